"""The Compute API's wire shapes for the fake (tests/fakes/gcp_compute.py): its error kinds
and error bodies, injected faults, and the list filter syntax.

Error bodies are the real API's: an HTTP error is ``{"error": {"code", "message",
"errors": [{"reason", "message", "domain"}], "status"}}`` (with a ``google.rpc.ErrorInfo`` in
``details`` for permission and rate errors); an operation that fails after being accepted ends
``DONE`` with ``error.errors[].code`` and ``httpErrorStatusCode``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_KEY_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}$")
HTTP_WORDS = {
    400: "BAD REQUEST",
    403: "FORBIDDEN",
    404: "NOT FOUND",
    409: "CONFLICT",
    429: "TOO MANY REQUESTS",
    503: "SERVICE UNAVAILABLE",
}
STATUS_WORDS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class ErrorKind:
    """One error as the real API sends it. ``reason`` is ``errors[].reason`` of an HTTP error
    or ``errors[].code`` of a failed operation; messages may use {project} {zone} {region}
    {name} {machine_type}."""

    http_status: int
    reason: str
    message: str
    stage: str = "http"  # http: the call itself fails | operation: accepted, then DONE with error
    domain: str = "global"
    info_reason: str | None = None  # a google.rpc.ErrorInfo reason in error.details
    quota: dict[str, Any] | None = None  # quotaInfo of an operation error


ERROR_KINDS: dict[str, ErrorKind] = {
    "stockout": ErrorKind(
        503,
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "The zone 'projects/{project}/zones/{zone}' does not have enough resources available "
        "to fulfill the request.  Try a different zone, or try again later.",
        stage="operation",
    ),
    "stockout_details": ErrorKind(
        503,
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "The zone 'projects/{project}/zones/{zone}' does not have enough resources available "
        "to fulfill the request. '(resource type:compute)'.",
        stage="operation",
    ),
    "quota_region": ErrorKind(
        403,
        "QUOTA_EXCEEDED",
        "Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region {region}.",
        stage="operation",
        quota={
            "metricName": "compute.googleapis.com/nvidia_a100_gpus",
            "limitName": "NVIDIA-A100-GPUS-per-project-region",
            "dimensions": {"region": "{region}"},
            "limit": 0,
        },
    ),
    # An N2 machine's own vCPU quota (a series with a quota of its own: N2_CPUS).
    "quota_region_n2": ErrorKind(
        403,
        "QUOTA_EXCEEDED",
        "Quota 'N2_CPUS' exceeded.  Limit: 24.0 in region {region}.",
        stage="operation",
        quota={
            "metricName": "compute.googleapis.com/n2_cpus",
            "limitName": "N2-CPUS-per-project-region",
            "dimensions": {"region": "{region}"},
            "limit": 24,
        },
    ),
    "quota_gpus_all_regions": ErrorKind(
        403,
        "QUOTA_EXCEEDED",
        "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.",
        stage="operation",
        quota={
            "metricName": "compute.googleapis.com/gpus_all_regions",
            "limitName": "GPUS-ALL-REGIONS-per-project",
            "limit": 0,
        },
    ),
    # The same quota refused by the insert call itself: a 403 that is not a permission error.
    "quota_region_http": ErrorKind(
        403,
        "quotaExceeded",
        "Quota 'CPUS' exceeded.  Limit: 24.0 in region {region}.",
        domain="usageLimits",
    ),
    "rate_limit": ErrorKind(
        429,
        "rateLimitExceeded",
        "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service "
        "'compute.googleapis.com' for consumer 'project_number:123456789'.",
        domain="usageLimits",
        info_reason="RATE_LIMIT_EXCEEDED",
    ),
    "permission": ErrorKind(
        403,
        "forbidden",
        "Required 'compute.instances.create' permission for "
        "'projects/{project}/zones/{zone}/instances/{name}'",
        info_reason="IAM_PERMISSION_DENIED",
    ),
    "unauthenticated": ErrorKind(
        401,
        "authError",
        "Request is missing required authentication credential. Expected OAuth 2 access token.",
        info_reason="CREDENTIALS_MISSING",
    ),
    "invalid": ErrorKind(
        400,
        "invalid",
        "Invalid value for field 'resource.machineType': "
        "'zones/{zone}/machineTypes/{machine_type}'. Machine type with name '{machine_type}' "
        "does not exist in zone '{zone}'.",
    ),
    "backend": ErrorKind(
        503,
        "backendError",
        "Internal error. Please try again or contact Google Support. (Code: '-1234567890')",
    ),
}


@dataclass
class Fault:
    """Answer matching calls with ``kind`` (a key of :data:`ERROR_KINDS`). ``"*"`` matches
    anything; ``count`` None fails every matching call, else that many, then stops."""

    kind: str
    method: str = "insert"  # insert | delete | get | list
    zone: str = "*"
    machine_type: str = "*"
    provisioning_model: str = "*"  # STANDARD | SPOT
    count: int | None = None
    after: int = 0  # let this many matching calls through first
    stage: str | None = None  # None: the kind's own (http or operation)

    def matches(self, method: str, zone: str, machine_type: str, model: str) -> bool:
        wanted = (self.method, self.zone, self.machine_type, self.provisioning_model)
        got = (method, zone, machine_type, model)
        return self.count != 0 and all(w in ("*", g) for w, g in zip(wanted, got, strict=True))


class HttpError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def error_body(status: int, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    """An HTTP error body as the Compute API sends it."""
    err: dict[str, Any] = {
        "code": status,
        "message": message,
        "errors": [{"message": message, "domain": extra.get("domain", "global"), "reason": reason}],
        "status": STATUS_WORDS.get(status, "UNKNOWN"),
    }
    if extra.get("info_reason"):
        err["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": extra["info_reason"],
                "domain": "compute.googleapis.com",
                "metadata": {},
            }
        ]
    return {"error": err}


def fill_template(value: Any, names: dict[str, str]) -> Any:
    """Fill {project} {zone} ... into every text of a (nested) value."""
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: fill_template(v, names) for k, v in value.items()}
    return value


def last_segment(url: str) -> str:
    """``https://.../zones/z/machineTypes/n2-standard-4`` -> ``n2-standard-4``."""
    return url.rstrip("/").rsplit("/", 1)[-1]


# --- the filter syntax ---------------------------------------------------------------------
_COND = re.compile(
    r"\s*(?P<open>\()?\s*(?P<path>[A-Za-z][\w.-]*)\s*(?P<op>!=|=)\s*"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|[^\s()\"]+)\s*(?P<close>\))?\s*"
)


def parse_filter(text: str) -> list[tuple[str, str, str]]:
    """``(a.b = "x") AND c != y`` -> [(path, op, value)], all ANDed. Anything else is an
    error, as the real API refuses a filter it cannot parse."""
    conds: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(text):
        m = _COND.match(text, pos)
        if m is None or bool(m.group("open")) != bool(m.group("close")):
            raise ValueError(f"Invalid list filter expression '{text}'.")
        value = m.group("value")
        if value.startswith('"'):
            value = json.loads(value)
        conds.append((m.group("path"), m.group("op"), value))
        pos = m.end()
        if text.startswith("AND", pos):
            pos += 3
    return conds


def _field(resource: dict[str, Any], path: str) -> str | None:
    node: Any = resource
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return str(node).lower() if isinstance(node, bool) else str(node)


def matches_filter(resource: dict[str, Any], conds: list[tuple[str, str, str]]) -> bool:
    return all((_field(resource, p) == v) == (op == "=") for p, op, v in conds)
