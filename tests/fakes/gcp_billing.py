"""A local stand-in for the Cloud Billing catalog API's SKU listing.

``GET /v1/services/{service}/skus?currencyCode=USD&pageToken=...`` answers ``{"skus": [...],
"nextPageToken": ...}`` as the real API does, ``page_size`` SKUs a page. A SKU is built by
:func:`sku` in the real shape: a description ("N1 Predefined Instance Core running in
Americas"), its category, ``serviceRegions`` and ``pricingInfo`` with a tiered unit price in
units and nanos. ``with FakeBilling([...]) as fake: fake.url``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

COMPUTE = "6F81-5844-456A"


def sku(description: str, regions: list[str], usd: float, unit: str = "h") -> dict[str, Any]:
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    spot = description.lower().startswith(("spot ", "preemptible "))
    return {
        "name": f"services/{COMPUTE}/skus/{abs(hash(description + str(regions))) % 10**12:X}",
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "usageType": "Preemptible" if spot else "OnDemand",
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "pricingExpression": {
                    "usageUnit": unit,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(units),
                                "nanos": nanos,
                            },
                        }
                    ],
                }
            }
        ],
    }


@dataclass
class FakeBilling:
    skus: list[dict[str, Any]]
    page_size: int = 3
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeBilling:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def list_skus(self, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.calls.append(path)
        if path != f"/v1/services/{COMPUTE}/skus":
            return 404, {"error": {"code": 404, "message": f"{path} not found"}}
        if query.get("currencyCode", "USD") != "USD":
            return 400, {"error": {"code": 400, "message": "only USD here"}}
        start = int(query.get("pageToken") or 0)
        page = self.skus[start : start + self.page_size]
        more = start + self.page_size < len(self.skus)
        return 200, {"skus": page, "nextPageToken": str(start + self.page_size) if more else ""}


def _handler(fake: FakeBilling) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            status, answer = fake.list_skus(url.path, query)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
