"""A fake Kubernetes API server for tests: a stdlib HTTP server speaking the part of core/v1
that Corral's Kubernetes provider uses, with the real server's Status bodies. No API server
installs on these machines; the real ``kubernetes`` Python client talks to this one over HTTP.

- Nodes are declared by the test (:meth:`FakeKube.add_node`: allocatable cpu, memory,
  ``nvidia.com/gpu`` and labels) and listed at ``GET /api/v1/nodes``.
- ``POST /api/v1/namespaces/{ns}/pods`` creates a pod (409 AlreadyExists for a taken name),
  after the namespace's ResourceQuotas: a pod that would take a ``hard`` limit past it is a 403
  Forbidden ``exceeded quota: NAME, requested: ..., used: ..., limited: ...``, as the real
  admission plugin answers.
- The scheduler runs at creation: the first node whose nodeSelector labels match and whose
  allocatable minus the requests of the pods bound to it holds the pod's requests gets it
  (``spec.nodeName``, phase Running). Otherwise the pod stays Pending with the condition
  ``PodScheduled=False, reason Unschedulable`` and a ``FailedScheduling`` event,
  ``0/N nodes are available: N Insufficient nvidia.com/gpu.`` (or ``node(s) didn't match
  Pod's node affinity/selector``).
- ``GET`` pods by name, by namespace or across namespaces with ``labelSelector`` (``k=v``
  terms joined by commas); ``DELETE`` a pod (404 once gone); events by ``fieldSelector``
  ``involvedObject.name=NAME``; ResourceQuotas created and listed.
- :meth:`FakeKube.end_pod` plays a container's exit (phase Succeeded or Failed with its exit
  code); :meth:`FakeKube.throttle` answers the next calls 429 TooManyRequests.

Every pod body the server accepted is recorded (``created``) so tests validate each manifest.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

GPU = "nvidia.com/gpu"
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number: ``500m`` = 0.5, ``2Gi`` = 2 * 2**30, ``4`` = 4."""
    text = str(value).strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    for suffix, factor in _SUFFIX.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


class KubeError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass
class FakeKube:
    """The fake cluster and its server. ``with FakeKube() as kube: kube.url``."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (ns, name)
    events: list[dict[str, Any]] = field(default_factory=list)
    quotas: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)  # every pod body accepted
    calls: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._throttle_left = 0
        self._server: ThreadingHTTPServer | None = None

    # --- the test's hand on the cluster
    def add_node(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        gpus: int = 0,
        labels: dict[str, str] | None = None,
    ) -> None:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable[GPU] = str(gpus)
        with self.lock:
            self.nodes[name] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": dict(labels or {}), "uid": self._uid()},
                "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
            }

    def end_pod(self, namespace: str, name: str, exit_code: int) -> None:
        """The pod's container exited with ``exit_code``."""
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            pod["status"]["containerStatuses"] = [
                {
                    "name": pod["spec"]["containers"][0]["name"],
                    "ready": False,
                    "restartCount": 0,
                    "image": pod["spec"]["containers"][0].get("image", ""),
                    "imageID": "",
                    "state": {"terminated": {"exitCode": exit_code, "reason": "Completed"}},
                }
            ]

    def throttle(self, calls: int) -> None:
        """Answer the next ``calls`` API calls 429 TooManyRequests."""
        with self.lock:
            self._throttle_left = calls

    # --- the API
    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        with self.lock:
            self.calls.append((method, path))
            if self._throttle_left > 0:
                self._throttle_left -= 1
                raise KubeError(429, "TooManyRequests", "the server has received too many requests")
            parts = path.strip("/").split("/")
            if parts[:2] != ["api", "v1"]:
                raise KubeError(404, "NotFound", f"the server could not find {path}")
            rest = parts[2:]
            if rest == ["nodes"] and method == "GET":
                return self._list("NodeList", list(self.nodes.values()), query)
            if rest == ["pods"] and method == "GET":
                return self._list("PodList", list(self.pods.values()), query)
            if len(rest) >= 3 and rest[0] == "namespaces":
                return self._namespaced(method, rest[1], rest[2], rest[3:], query, body)
            raise KubeError(404, "NotFound", f"the server could not find {path}")

    def _namespaced(
        self, method: str, ns: str, kind: str, tail: list[str], query: dict[str, str], body: Any
    ) -> Any:
        if kind == "pods" and not tail and method == "POST":
            return self._create_pod(ns, body or {})
        if kind == "pods" and not tail and method == "GET":
            mine = [p for (n, _), p in self.pods.items() if n == ns]
            return self._list("PodList", mine, query)
        if kind == "pods" and len(tail) == 1:
            pod = self.pods.get((ns, tail[0]))
            if pod is None:
                raise KubeError(404, "NotFound", f'pods "{tail[0]}" not found')
            if method == "GET":
                return pod
            if method == "DELETE":
                del self.pods[(ns, tail[0])]
                return pod
        if kind == "events" and not tail and method == "GET":
            mine = [e for e in self.events if e["metadata"]["namespace"] == ns]
            return self._list("EventList", mine, query)
        if kind == "resourcequotas" and not tail and method == "POST":
            name = body["metadata"]["name"]
            self.quotas[(ns, name)] = {**body, "metadata": {**body["metadata"], "namespace": ns}}
            return self.quotas[(ns, name)]
        if kind == "resourcequotas" and not tail and method == "GET":
            mine = [q for (n, _), q in self.quotas.items() if n == ns]
            return self._list("ResourceQuotaList", mine, query)
        raise KubeError(405, "MethodNotAllowed", f"{method} on {kind} {tail} is not served")

    def _create_pod(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not name or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
            raise KubeError(422, "Invalid", f'Pod "{name}" is invalid: metadata.name')
        if (ns, name) in self.pods:
            raise KubeError(409, "AlreadyExists", f'pods "{name}" already exists')
        requests = _requests(body)
        self._admit_quota(ns, name, requests)
        pod = copy.deepcopy(body)
        pod.update(apiVersion="v1", kind="Pod")
        pod["metadata"] = {
            **meta,
            "namespace": ns,
            "uid": self._uid(),
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.created.append(copy.deepcopy(body))
        node, why = self._schedule(pod, requests)
        if node is not None:
            pod["spec"]["nodeName"] = node
            conditions = [{"type": "PodScheduled", "status": "True"}]
            pod["status"] = {"phase": "Running", "conditions": conditions}
        else:
            message = f"0/{len(self.nodes)} nodes are available: {why}."
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ],
            }
            self.events.append(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{name}.{next(self._ids):x}", "namespace": ns},
                    "involvedObject": {"kind": "Pod", "name": name, "namespace": ns},
                    "reason": "FailedScheduling",
                    "message": message,
                    "type": "Warning",
                }
            )
        self.pods[(ns, name)] = pod
        return pod

    def _admit_quota(self, ns: str, name: str, requests: dict[str, float]) -> None:
        for (qns, qname), quota in self.quotas.items():
            if qns != ns:
                continue
            hard = (quota.get("spec") or {}).get("hard") or {}
            for key, limit in hard.items():
                resource = key.removeprefix("requests.")
                wanted = 1.0 if key == "pods" else requests.get(resource, 0.0)
                if not wanted:
                    continue
                used = sum(
                    1.0 if key == "pods" else _requests(p).get(resource, 0.0)
                    for (pns, _), p in self.pods.items()
                    if pns == ns and p["status"]["phase"] in ("Pending", "Running")
                )
                if used + wanted > quantity(limit):
                    raise KubeError(
                        403,
                        "Forbidden",
                        f'pods "{name}" is forbidden: exceeded quota: {qname}, requested: '
                        f"{key}={wanted:g}, used: {key}={used:g}, limited: {key}={limit}",
                    )

    def _schedule(self, pod: dict[str, Any], requests: dict[str, float]) -> tuple[str | None, str]:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        short: dict[str, int] = {}
        unmatched = 0
        for name, node in self.nodes.items():
            labels = node["metadata"]["labels"]
            if any(labels.get(k) != v for k, v in selector.items()):
                unmatched += 1
                continue
            allocatable = node["status"]["allocatable"]
            bound = [p for p in self.pods.values() if p["spec"].get("nodeName") == name]
            missing = [
                resource
                for resource, amount in requests.items()
                if amount
                > quantity(allocatable.get(resource, 0))
                - sum(_requests(p).get(resource, 0.0) for p in bound)
            ]
            if not missing:
                return name, ""
            for resource in missing:
                short[resource] = short.get(resource, 0) + 1
        reasons = [f"{n} Insufficient {r}" for r, n in sorted(short.items())]
        if unmatched:
            reasons.append(f"{unmatched} node(s) didn't match Pod's node affinity/selector")
        return None, ", ".join(reasons) or "no nodes"

    def _list(self, kind: str, items: list[dict[str, Any]], query: dict[str, str]) -> Any:
        wanted = _terms(query.get("labelSelector", ""))
        fields = _terms(query.get("fieldSelector", ""))

        def keep(item: dict[str, Any]) -> bool:
            labels = item.get("metadata", {}).get("labels") or {}
            if any(labels.get(k) != v for k, v in wanted.items()):
                return False
            name = fields.get("involvedObject.name")
            return name is None or item.get("involvedObject", {}).get("name") == name

        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"resourceVersion": str(next(self._ids))},
            "items": [copy.deepcopy(i) for i in items if keep(i)],
        }

    def _uid(self) -> str:
        return f"00000000-0000-0000-0000-{next(self._ids):012x}"

    # --- the server
    def start(self) -> FakeKube:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _requests(pod: dict[str, Any]) -> dict[str, float]:
    """What the pod's containers request, summed (limits stand in for missing requests, as
    the API server defaults them)."""
    total: dict[str, float] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for key, value in asked.items():
            total[key] = total.get(key, 0.0) + quantity(value)
    return total


def _terms(selector: str) -> dict[str, str]:
    out = {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        out[key.strip()] = value.strip().lstrip("=")
    return out


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
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
                status, out = 200, kube.handle(self.command, url.path, query, body)
                if self.command == "POST":
                    status = 201
            except KubeError as exc:
                status, out = exc.code, exc.body()
            except (ValueError, TypeError, KeyError) as exc:
                status, out = 400, KubeError(400, "BadRequest", f"bad request: {exc}").body()
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = _serve

    return Handler


def kubeconfig_for(url: str, path: Path, context: str = "test") -> Path:
    """A kubeconfig with one context pointing at ``url`` (no auth), for the
    provider to reach this server by."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": context, "cluster": {"server": url}}],
                "users": [{"name": context, "user": {}}],
                "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
                "current-context": context,
            }
        )
    )
    return path
