"""A fake Google Compute Engine REST API for tests: a stdlib HTTP server speaking the part of
``compute/v1`` that Corral's GCP provider uses, with the real API's error bodies.

- ``POST .../zones/{z}/instances`` inserts; a repeated ``requestId`` returns the first
  operation and creates nothing (the real API's idempotency). A taken name is a 409.
- ``GET .../zones/{z}/instances/{name}``, ``DELETE`` the same (a 404 when it is gone).
- ``GET .../zones/{z}/instances`` and ``GET .../aggregated/instances`` with ``filter`` in the
  syntax the provider sends: ``(labels.k = "v") (status != "TERMINATED")``, ``AND`` allowed.
- ``GET .../zones/{z}/operations/{op}`` and ``POST .../operations/{op}/wait``.

Faults (:class:`~fakes.gcp_api.Fault`) are injected per (method, zone, machine type,
provisioning model), for a number of calls or for ever, either as an HTTP error or as an
operation that is accepted and then ends DONE with an error (how a stockout really arrives).
Every insert body is recorded. The test process drives the fake directly (:class:`FakeCompute`);
other processes (workers) use the control path ``/_faults`` through
:class:`FakeComputeControl`, so all of them see one cloud.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fakes.gcp_api import (
    ERROR_KINDS,
    HTTP_WORDS,
    LABEL_KEY_RE,
    LABEL_VALUE_RE,
    NAME_RE,
    ErrorKind,
    Fault,
    HttpError,
    error_body,
    fill_template,
    last_segment,
    matches_filter,
    parse_filter,
)

__all__ = ["ERROR_KINDS", "FakeCompute", "FakeComputeControl", "Fault"]

API = "/compute/v1/projects/"


# --- the cloud -----------------------------------------------------------------------------
@dataclass
class Operation:
    body: dict[str, Any]
    polls_left: int = 0  # GETs that still answer RUNNING


@dataclass
class FakeCompute:
    """The fake cloud and its server. ``with FakeCompute() as fake: fake.url``."""

    project: str = "corral-test"
    op_polls: int = 0  # how many GETs an operation stays RUNNING before it is DONE
    boot_statuses: tuple[str, ...] = ()  # what a new instance shows on its first reads
    machine_types: set[str] | None = None  # None: any name is a machine type
    faults: list[Fault] = field(default_factory=list)
    inserts: list[dict[str, Any]] = field(default_factory=list)  # {zone, requestId, body}
    firewalls: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> rule
    calls: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of each call
    # What machineTypes / acceleratorTypes.aggregatedList answer: zone -> the zone's resources
    # ({name, guestCpus, memoryMb, accelerators?} / {name, maximumCardsPerInstance}).
    zone_machine_types: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    zone_accelerator_types: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}  # (zone, name) -> resource
        self.boot_left: dict[tuple[str, str], list[str]] = {}
        self.power_calls: list[tuple[str, str, str]] = []  # (stop | start, zone, name)
        self.operations: dict[str, Operation] = {}
        self.by_request_id: dict[str, str] = {}
        self.lock = threading.RLock()
        self._ids = itertools.count(4_000_000_000_000_000_001)
        self._server: ThreadingHTTPServer | None = None

    # --- the test process's controls
    def add_fault(self, fault: Fault) -> None:
        if fault.kind not in ERROR_KINDS:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        with self.lock:
            self.faults.append(fault)

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self.lock:
            self.instances[(zone, name)]["status"] = status
            self.boot_left.pop((zone, name), None)

    def put_instance(self, zone: str, name: str, labels: dict[str, str], **fields: Any) -> None:
        """An instance made outside Corral (or by an earlier run): present without an insert."""
        machine_type = fields.pop("machine_type", "n2-standard-2")
        body = {"name": name, "labels": labels, "machineType": machine_type, **fields}
        with self.lock:
            self.instances[(zone, name)] = self._resource(zone, body)

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeCompute:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        serve = self._server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeCompute:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API
    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        self.calls.append((method, path))
        parts = path[len(API) :].split("/") if path.startswith(API) else []
        if len(parts) < 3 or parts[0] != self.project:
            raise HttpError(
                404, error_body(404, "notFound", f"The resource '{path}' was not found")
            )
        rest = parts[1:]
        if rest == ["aggregated", "instances"] and method == "GET":
            return self.aggregated_list(query)
        if rest in (["aggregated", "machineTypes"], ["aggregated", "acceleratorTypes"]):
            kind = rest[1]
            listed = (
                self.zone_machine_types if kind == "machineTypes" else self.zone_accelerator_types
            )
            items = {f"zones/{zone}": {kind: found} for zone, found in listed.items()}
            return {"kind": f"compute#{kind}AggregatedList", "items": items}
        if rest[:2] == ["global", "firewalls"]:
            return self._firewalls_call(method, rest[2:], body)
        if len(rest) >= 3 and rest[0] == "zones":
            zone, kind, tail = rest[1], rest[2], rest[3:]
            if kind == "instances":
                return self._instances_call(method, zone, tail, query, body)
            if kind == "operations" and tail:
                return self.operation(zone, tail[0])
        raise HttpError(400, error_body(400, "invalid", f"Unsupported call {method} {path}"))

    def _firewalls_call(self, method: str, tail: list[str], body: Any) -> Any:
        """Firewall rules: insert (answered with a finished global operation) and get."""
        with self.lock:
            if not tail and method == "POST":
                name = str((body or {}).get("name", ""))
                if name in self.firewalls:
                    msg = f"The resource 'projects/{self.project}/global/firewalls/{name}' "
                    raise HttpError(409, error_body(409, "alreadyExists", msg + "already exists"))
                self.firewalls[name] = dict(body or {})
                op = f"operation-fw-{next(self._ids):x}"
                base = f"https://www.googleapis.com{API}{self.project}/global"
                return {
                    "kind": "compute#operation",
                    "id": str(next(self._ids)),
                    "name": op,
                    "operationType": "insert",
                    "targetLink": f"{base}/firewalls/{name}",
                    "status": "DONE",
                    "progress": 100,
                    "selfLink": f"{base}/operations/{op}",
                }
            if len(tail) == 1 and method == "GET":
                if tail[0] not in self.firewalls:
                    msg = f"The resource 'projects/{self.project}/global/firewalls/{tail[0]}' "
                    raise HttpError(404, error_body(404, "notFound", msg + "was not found"))
                return {"kind": "compute#firewall", **self.firewalls[tail[0]]}
        raise HttpError(400, error_body(400, "invalid", f"Unsupported call {method} {tail}"))

    def _instances_call(
        self, method: str, zone: str, tail: list[str], query: dict[str, str], body: Any
    ) -> Any:
        if not tail and method == "POST":
            return self.insert(zone, body or {}, query.get("requestId"))
        if not tail and method == "GET":
            return self.list_zone(zone, query)
        if len(tail) == 1 and method == "GET":
            return self.get(zone, tail[0])
        if len(tail) == 1 and method == "DELETE":
            return self.delete(zone, tail[0], query.get("requestId"))
        if len(tail) == 2 and method == "POST" and tail[1] in ("stop", "start"):
            return self.power(zone, tail[0], tail[1])
        raise HttpError(400, error_body(400, "invalid", f"Unsupported call {method} {tail}"))

    def insert(self, zone: str, body: dict[str, Any], request_id: str | None) -> dict[str, Any]:
        with self.lock:
            self.inserts.append({"zone": zone, "requestId": request_id, "body": body})
            if request_id and request_id in self.by_request_id:
                return self._op_view(self.by_request_id[request_id])  # the same operation
            name = str(body.get("name", ""))
            machine_type = last_segment(str(body.get("machineType", "")))
            model = str((body.get("scheduling") or {}).get("provisioningModel", "STANDARD"))
            names = self._names(zone, name, machine_type)
            self._validate(zone, body, names)
            fault = self._take_fault("insert", zone, machine_type, model)
            if fault is not None and fault[1] == "http":
                raise self._http_error(fault[0], names)
            if fault is None and (zone, name) in self.instances:
                msg = f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                raise HttpError(409, error_body(409, "alreadyExists", msg + "already exists"))
            op = self._new_op(zone, "insert", name, fault[0] if fault else None, names)
            if fault is None:
                self.instances[(zone, name)] = self._resource(zone, body)
                self.boot_left[(zone, name)] = list(self.boot_statuses)
            if request_id:
                self.by_request_id[request_id] = op
            return self._op_view(op)

    def get(self, zone: str, name: str) -> dict[str, Any]:
        with self.lock:
            inst = self._existing(zone, name)
            self._fault_for("get", zone, inst, name)
            return self._read(zone, name)

    def delete(self, zone: str, name: str, request_id: str | None) -> dict[str, Any]:
        with self.lock:
            if request_id and request_id in self.by_request_id:
                return self._op_view(self.by_request_id[request_id])
            inst = self._existing(zone, name)
            kind = self._fault_for("delete", zone, inst, name)
            names = self._names(zone, name, last_segment(inst["machineType"]))
            if kind is None:
                del self.instances[(zone, name)]
            op = self._new_op(zone, "delete", name, kind, names)
            if request_id:
                self.by_request_id[request_id] = op
            return self._op_view(op)

    def power(self, zone: str, name: str, action: str) -> dict[str, Any]:
        """instances.stop (status TERMINATED, as Compute Engine names a stopped VM) and
        instances.start (RUNNING again); each recorded in ``power_calls``."""
        with self.lock:
            inst = self._existing(zone, name)
            self.power_calls.append((action, zone, name))
            inst["status"] = "TERMINATED" if action == "stop" else "RUNNING"
            self.boot_left.pop((zone, name), None)
            names = self._names(zone, name, last_segment(inst["machineType"]))
            return self._op_view(self._new_op(zone, action, name, None, names))

    def list_zone(self, zone: str, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            self._fault_for("list", zone, None, "")
            items = self._matching(query, zone)
            out: dict[str, Any] = {"kind": "compute#instanceList", "id": self._link(zone)}
            if items:
                out["items"] = items
            return out

    def aggregated_list(self, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            self._fault_for("list", "*", None, "")
            scoped: dict[str, Any] = {}
            for inst in self._matching(query, None):
                scoped.setdefault(f"zones/{last_segment(inst['zone'])}", {"instances": []})
                scoped[f"zones/{last_segment(inst['zone'])}"]["instances"].append(inst)
            return {"kind": "compute#instanceAggregatedList", "items": scoped}

    def operation(self, zone: str, name: str) -> dict[str, Any]:
        with self.lock:
            op = self.operations.get(name)
            if op is None:
                msg = f"The resource 'projects/{self.project}/zones/{zone}/operations/{name}' "
                raise HttpError(404, error_body(404, "notFound", msg + "was not found"))
            if op.polls_left > 0:
                op.polls_left -= 1
            return self._op_view(name)

    # --- helpers
    def _names(self, zone: str, name: str, machine_type: str) -> dict[str, str]:
        region = zone.rsplit("-", 1)[0]
        return {
            "project": self.project,
            "zone": zone,
            "region": region,
            "name": name,
            "machine_type": machine_type,
        }

    def _validate(self, zone: str, body: dict[str, Any], names: dict[str, str]) -> None:
        """What the real API refuses with a 400 before doing anything."""
        problems = []
        if not NAME_RE.match(names["name"]):
            problems.append(f"Invalid value for field 'resource.name': '{names['name']}'.")
        mt = str(body.get("machineType", ""))
        if not re.fullmatch(rf"(.*/)?zones/{re.escape(zone)}/machineTypes/[a-z0-9-]+", mt):
            problems.append(f"Invalid value for field 'resource.machineType': '{mt}'.")
        labels = body.get("labels") or {}
        for key, value in labels.items():
            if not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(str(value)):
                problems.append(f"Invalid value for field 'resource.labels': '{key}={value}'.")
        if not any(d.get("boot") for d in body.get("disks") or []):
            problems.append("Invalid value for field 'resource.disks': no boot disk.")
        if (
            not problems
            and self.machine_types is not None
            and last_segment(mt) not in self.machine_types
        ):
            kind = ERROR_KINDS["invalid"]
            problems.append(kind.message.format(**names))
        if problems:
            raise HttpError(400, error_body(400, "invalid", " ".join(problems)))

    def _existing(self, zone: str, name: str) -> dict[str, Any]:
        inst = self.instances.get((zone, name))
        if inst is None:
            msg = f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
            raise HttpError(404, error_body(404, "notFound", msg + "was not found"))
        return inst

    def _fault_for(
        self, method: str, zone: str, inst: dict[str, Any] | None, name: str
    ) -> ErrorKind | None:
        """Raise an HTTP-stage fault; return an operation-stage one for the caller."""
        mt = last_segment(inst["machineType"]) if inst else "*"
        model = str((inst or {}).get("scheduling", {}).get("provisioningModel", "STANDARD"))
        fault = self._take_fault(method, zone, mt, model)
        if fault is None:
            return None
        if fault[1] == "http" or method in ("get", "list"):
            raise self._http_error(fault[0], self._names(zone, name, mt))
        return fault[0]

    def _take_fault(
        self, method: str, zone: str, machine_type: str, model: str
    ) -> tuple[ErrorKind, str] | None:
        for fault in self.faults:
            if fault.matches(method, zone, machine_type, model):
                if fault.after > 0:
                    fault.after -= 1
                    return None
                if fault.count is not None:
                    fault.count -= 1
                kind = ERROR_KINDS[fault.kind]
                return kind, fault.stage or kind.stage
        return None

    def _http_error(self, kind: ErrorKind, names: dict[str, str]) -> HttpError:
        body = error_body(
            kind.http_status,
            kind.reason,
            kind.message.format(**names),
            domain=kind.domain,
            info_reason=kind.info_reason,
        )
        return HttpError(kind.http_status, body)

    def _new_op(
        self, zone: str, op_type: str, name: str, fault: ErrorKind | None, names: dict[str, str]
    ) -> str:
        op_name = f"operation-{int(time.time() * 1000)}-{next(self._ids):x}"
        body: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": op_name,
            "zone": self._link(zone, base=True),
            "operationType": op_type,
            "targetLink": f"{self._link(zone)}/{name}",
            "status": "DONE",
            "progress": 100,
            "selfLink": f"{self._link(zone, base=True)}/operations/{op_name}",
        }
        if fault is not None:
            error: dict[str, Any] = {"code": fault.reason, "message": fault.message.format(**names)}
            if fault.quota is not None:
                error["errorDetails"] = [{"quotaInfo": fill_template(fault.quota, names)}]
            body["error"] = {"errors": [error]}
            body["httpErrorStatusCode"] = fault.http_status
            body["httpErrorMessage"] = HTTP_WORDS.get(fault.http_status, "ERROR")
        self.operations[op_name] = Operation(body, polls_left=self.op_polls)
        return op_name

    def _op_view(self, op_name: str) -> dict[str, Any]:
        op = self.operations[op_name]
        if op.polls_left > 0:
            running = {k: v for k, v in op.body.items() if not k.startswith(("error", "http"))}
            return {**running, "status": "RUNNING", "progress": 0}
        return dict(op.body)

    def _resource(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        inst: dict[str, Any] = json.loads(json.dumps(body))  # a deep copy
        name, base = inst["name"], self._link(zone, base=True)
        inst.update(
            kind="compute#instance",
            id=str(next(self._ids)),
            zone=base,
            machineType=f"{base}/machineTypes/{last_segment(inst['machineType'])}",
            status="RUNNING",
            selfLink=f"{self._link(zone)}/{name}",
            creationTimestamp="2024-01-01T00:00:00.000-07:00",
        )
        return inst

    def _read(self, zone: str, name: str) -> dict[str, Any]:
        inst = self.instances[(zone, name)]
        left = self.boot_left.get((zone, name))
        return {**inst, "status": left.pop(0)} if left else dict(inst)

    def _matching(self, query: dict[str, str], zone: str | None) -> list[dict[str, Any]]:
        try:
            conds = parse_filter(query.get("filter", ""))
        except ValueError as exc:
            raise HttpError(400, error_body(400, "invalid", str(exc))) from None
        views = [self._read(z, n) for (z, n) in list(self.instances) if zone in (None, z)]
        return [v for v in views if matches_filter(v, conds)]

    def _link(self, zone: str, base: bool = False) -> str:
        root = f"https://www.googleapis.com{API}{self.project}/zones/{zone}"
        return root if base else f"{root}/instances"

    # --- the control path, for other processes
    def control(self, method: str, path: str, body: Any) -> Any:
        if path == "/_faults" and method == "POST":
            self.add_fault(Fault(**body))
            return {"faults": len(self.faults)}
        if path == "/_faults" and method == "DELETE":
            self.clear_faults()
            return {"faults": 0}
        if path == "/_inserts" and method == "GET":
            return {"inserts": self.inserts}
        if path == "/_instances" and method == "GET":
            return {"instances": list(self.instances.values())}
        raise HttpError(404, error_body(404, "notFound", f"no control path {method} {path}"))


def _handler(fake: FakeCompute) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
                if url.path.startswith("/_"):
                    status, out = 200, fake.control(self.command, url.path, body)
                else:
                    status, out = 200, fake.handle(self.command, url.path, query, body)
            except HttpError as exc:
                status, out = exc.status, exc.body
            except (ValueError, TypeError) as exc:
                status, out = 400, error_body(400, "invalid", f"bad request: {exc}")
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

    return Handler


class FakeComputeControl:
    """Drive a fake that another process serves: ``FakeComputeControl(url).add_fault(...)``."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def add_fault(self, fault: Fault) -> None:
        self._call("POST", "/_faults", asdict(fault))

    def clear_faults(self) -> None:
        self._call("DELETE", "/_faults")

    def inserts(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/_inserts")["inserts"])

    def instances(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/_instances")["instances"])
