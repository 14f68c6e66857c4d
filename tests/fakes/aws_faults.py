"""moto's server with injected EC2 faults, recording what Corral sends.

moto has no capacity, quota or throttling errors of its own, and it ignores ClientToken and
capacity reservations. :class:`FaultyMoto` wraps moto's WSGI app in a middleware that

- answers chosen EC2 actions with an AWS-style error, matched by (zone, instance type, market)
  and optionally only the first ``count`` times;
- records every matching request's parameters (RunInstances by default), faulted or not, so
  tests assert what Corral sends.

It is served by werkzeug on 127.0.0.1 (a free port) in a thread. The test process controls it
directly; other processes (Celery workers) do through a small HTTP endpoint on the same port:

    POST   /_faults    a fault (or a list of them) as JSON: {"code": ..., "zone": ..., ...}
    GET    /_faults    the faults still armed
    DELETE /_faults    disarm every fault
    GET    /_requests  the recorded requests; DELETE forgets them
    POST   /_reset     faults, records and moto's own state, all wiped
"""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

# The HTTP status AWS answers each error with (botocore retries the 5xx and throttling ones).
STATUS_BY_CODE = {
    "InsufficientInstanceCapacity": 500,
    "InsufficientHostCapacity": 500,
    "InternalError": 500,
    "RequestLimitExceeded": 503,
    "ServiceUnavailable": 503,
    "Unavailable": 503,
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
}
RECORDED_ACTIONS = ("RunInstances", "TerminateInstances", "StopInstances", "StartInstances")

StartResponse = Callable[..., Any]


class _QuietHandler(MotoRequestHandler):
    """moto's request handler without a log line per request."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


@dataclass
class Fault:
    """An error to answer with. ``None`` fields match anything; ``count`` None: every time."""

    code: str
    action: str = "RunInstances"
    zone: str | None = None
    instance_type: str | None = None
    market: str | None = None  # on_demand | spot | reserved
    region: str | None = None
    count: int | None = None
    message: str = ""
    status: int | None = None

    def matches(self, req: Recorded) -> bool:
        wanted = (self.action, self.zone, self.instance_type, self.market, self.region)
        seen = (req.action, req.zone, req.instance_type, req.market, req.region)
        return all(w is None or w == s for w, s in zip(wanted, seen, strict=True))


@dataclass
class Recorded:
    """One EC2 request as it reached the proxy: its action, region and flat query parameters
    (``Placement.AvailabilityZone``, ``TagSpecification.1.Tag.1.Key``, ...)."""

    action: str
    region: str
    params: dict[str, str]
    fault: str | None = None  # the error code it was answered with, if any
    zone: str | None = field(init=False)
    instance_type: str | None = field(init=False)
    market: str = field(init=False)

    def __post_init__(self) -> None:
        p = self.params
        self.zone = p.get("Placement.AvailabilityZone")
        self.instance_type = p.get("InstanceType")
        if p.get("InstanceMarketOptions.MarketType") == "spot":
            self.market = "spot"
        elif any(k.startswith("CapacityReservationSpecification.") for k in p):
            self.market = "reserved"
        else:
            self.market = "on_demand"

    def tags(self, resource_type: str = "instance") -> dict[str, str]:
        """The tags sent for one resource type in TagSpecifications."""
        p = self.params
        n = next(
            (
                i
                for i in range(1, 20)
                if p.get(f"TagSpecification.{i}.ResourceType") == resource_type
            ),
            None,
        )
        if n is None:
            return {}
        out = {}
        for j in range(1, 200):
            key = p.get(f"TagSpecification.{n}.Tag.{j}.Key")
            if key is None:
                break
            out[key] = p.get(f"TagSpecification.{n}.Tag.{j}.Value", "")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "region": self.region,
            "params": self.params,
            "fault": self.fault,
        }


class FaultyMoto:
    """moto's server behind a fault-injecting, request-recording middleware."""

    def __init__(self) -> None:
        self._moto = DomainDispatcherApplication(create_backend_app)
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._recorded: list[Recorded] = []
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, port: int = 0) -> FaultyMoto:
        """Serve on 127.0.0.1:``port`` (0: a free port) in a daemon thread; ``url`` says where."""
        self._server = make_server(
            "127.0.0.1", port, self, threaded=True, request_handler=_QuietHandler
        )
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="faulty-moto", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultyMoto:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- control from the test process ----------------------------------------------------
    def add_fault(self, code: str, **where: Any) -> Fault:
        """Arm a fault: ``add_fault("InsufficientInstanceCapacity", zone="us-east-1a")``."""
        fault = Fault(code=code, **where)
        with self._lock:
            self._faults.append(fault)
        return fault

    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def requests(self, action: str = "RunInstances") -> list[Recorded]:
        """The recorded requests of one action, oldest first."""
        with self._lock:
            return [r for r in self._recorded if r.action == action]

    def all_requests(self) -> list[Recorded]:
        """Every recorded request, of every action, oldest first."""
        with self._lock:
            return list(self._recorded)

    def clear_requests(self) -> None:
        with self._lock:
            self._recorded.clear()

    def reset(self) -> None:
        """Faults, records and moto's own state (every instance), all wiped."""
        from moto.moto_api._internal.models import moto_api_backend

        self.clear_faults()
        self.clear_requests()
        moto_api_backend.reset()

    # --- WSGI ------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/_faults", "/_requests", "/_reset"):
            return self._control(environ, start_response, path)
        body = _read_body(environ)
        params = {
            k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()
        }
        action = params.get("Action", "")
        if action not in RECORDED_ACTIONS:
            return self._pass(environ, start_response)
        req = Recorded(action, _region(environ), params)
        fault = self._take_fault(req)
        req.fault = fault.code if fault else None
        with self._lock:
            self._recorded.append(req)
        if fault is None:
            return self._pass(environ, start_response)
        return _error_response(fault, start_response)

    def _pass(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        answer: Iterable[bytes] = self._moto(environ, start_response)
        return answer

    def _take_fault(self, req: Recorded) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(req):
                    if fault.count is not None:
                        fault.count -= 1
                        if fault.count <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _control(
        self, environ: dict[str, Any], start_response: StartResponse, path: str
    ) -> Iterator[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        body = _read_body(environ)
        answer: Any = {"ok": True}
        if path == "/_faults" and method == "POST":
            data = json.loads(body or b"{}")
            for item in data if isinstance(data, list) else [data]:
                self.add_fault(**item)
        elif path == "/_faults" and method == "DELETE":
            self.clear_faults()
        elif path == "/_faults":
            answer = [asdict(f) for f in self.faults()]
        elif path == "/_requests" and method == "DELETE":
            self.clear_requests()
        elif path == "/_requests":
            with self._lock:
                answer = [r.to_dict() for r in self._recorded]
        elif path == "/_reset" and method == "POST":
            self.reset()
        start_response("200 OK", [("Content-Type", "application/json")])
        yield json.dumps(answer).encode()


# --- for other processes -------------------------------------------------------------------
def post_fault(base_url: str, code: str, **where: Any) -> None:
    """Arm a fault on a FaultyMoto running in another process."""
    data = json.dumps({"code": code, **where}).encode()
    req = urllib.request.Request(
        f"{base_url}/_faults",
        data=data,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).close()


def recorded_requests(base_url: str, action: str = "RunInstances") -> list[Recorded]:
    """The requests a FaultyMoto in another process recorded."""
    with urllib.request.urlopen(f"{base_url}/_requests", timeout=10) as resp:
        items = json.loads(resp.read())
    return [
        Recorded(i["action"], i["region"], i["params"], i["fault"])
        for i in items
        if i["action"] == action
    ]


# --- helpers -------------------------------------------------------------------------------
def _read_body(environ: dict[str, Any]) -> bytes:
    """The request body, put back so moto can read it again."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return bytes(body)


def _region(environ: dict[str, Any]) -> str:
    """The region of a SigV4-signed request, from its credential scope."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    try:
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0]
        return str(scope.split("/")[2])
    except IndexError:
        return ""


def _error_response(fault: Fault, start_response: StartResponse) -> Iterator[bytes]:
    status = fault.status or STATUS_BY_CODE.get(fault.code, 400)
    message = fault.message or f"{fault.code} (injected by the test proxy)"
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{fault.code}</Code><Message>{_escape(message)}"
        f"</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    start_response(f"{status} Error", [("Content-Type", "text/xml")])
    yield xml.encode()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main() -> None:
    """Serve a FaultyMoto on its own: ``python tests/fakes/aws_faults.py --port 5011``."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    server = FaultyMoto().start(parser.parse_args().port)
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
