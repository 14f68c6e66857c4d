"""A local stand-in for the AWS Price List Query API (``pricing``), which moto does not play.

It answers ``AWSPriceListService.GetProducts`` as the real API does (the awsJson1_1 protocol:
a POST whose ``X-Amz-Target`` names the operation): the products of one ``ServiceCode`` whose
attributes match every ``TERM_MATCH`` filter, each a JSON *string* in ``PriceList``, paged by
``NextToken`` (``page_size`` entries a page, small so that paging is exercised). Every call's
body is recorded. ``with FakePricing({...}) as fake: fake.url``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def product(instance_type: str, region: str, usd: str, **attributes: str) -> dict[str, Any]:
    """One price list entry as the API sends it: a Linux, shared-tenancy, on-demand price
    unless ``attributes`` say otherwise."""
    attrs = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        **attributes,
    }
    sku = f"SKU{abs(hash((instance_type, region, tuple(sorted(attrs.items()))))) % 10**8}"
    return {
        "product": {"productFamily": "Compute Instance", "attributes": attrs, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                f"{sku}.JRTCKXETXF": {
                    "priceDimensions": {
                        f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs",
                            "pricePerUnit": {"USD": usd},
                        }
                    }
                }
            }
        },
    }


@dataclass
class FakePricing:
    products: list[dict[str, Any]]
    page_size: int = 2
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakePricing:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def get_products(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(body)
        wanted = {
            f["Field"]: f["Value"] for f in body.get("Filters", []) if f["Type"] == "TERM_MATCH"
        }
        found = [
            p
            for p in self.products
            if p["serviceCode"] == body.get("ServiceCode")
            and all(p["product"]["attributes"].get(k) == v for k, v in wanted.items())
        ]
        start = int(body.get("NextToken") or 0)
        page = found[start : start + self.page_size]
        answer: dict[str, Any] = {
            "FormatVersion": "aws_v1",
            "PriceList": [json.dumps(p) for p in page],
        }
        if start + self.page_size < len(found):
            answer["NextToken"] = str(start + self.page_size)
        return answer


def _handler(fake: FakePricing) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            target = self.headers.get("X-Amz-Target", "")
            if target == "AWSPriceListService.GetProducts":
                status, answer = 200, fake.get_products(body)
            else:
                status = 400
                answer = {"__type": "InvalidParameterException", "Message": f"no {target}"}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
