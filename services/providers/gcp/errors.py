"""Google Compute Engine errors as Corral's typed errors, decided by a table.

The API reports a failure in one of two places:
- an HTTP error: ``{"error": {"code": 403, "errors": [{"reason": "forbidden", ...}],
  "details": [{"@type": ".../google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED"}]}}``,
  which google-api-core raises as a ``GoogleAPICallError`` (``.code``, ``.errors``, ``.reason``);
- an operation accepted, then DONE with ``error.errors[].code`` (``ZONE_RESOURCE_POOL_EXHAUSTED``)
  and ``httpErrorStatusCode`` (503): how stockouts and most quota refusals arrive.

Both become a list of :class:`Detail` and one decision: the first code with a row in
:data:`BY_CODE` wins; a quota's scope comes from its metric (the metric's family in the
region, or cloud-wide such as ``GPUS_ALL_REGIONS``); with no known code, :data:`BY_HTTP_STATUS`
decides. A 5xx that names no capacity code is retried in place; a 403 is a permission error
unless a code says quota.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from corral.shared.errors import (
    AuthError,
    CapacityError,
    ErrorRule,
    InvalidRequestError,
    LaunchTimeoutError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)

Rule = ErrorRule


_ZONE_CAPACITY = Rule(CapacityError)
_QUOTA = Rule(QuotaError)  # the scope comes from the quota metric: see quota_scope()
_THROTTLED = Rule(ThrottledError)
_AUTH = Rule(AuthError)
_INVALID = Rule(InvalidRequestError)
_ZONE_CANNOT = Rule(InvalidRequestError, Scope.ZONE)  # this zone cannot do it; others may

# Operation error codes (UPPER_SNAKE), HTTP error reasons (camelCase) and ErrorInfo reasons.
BY_CODE: dict[str, Rule] = {
    # The zone has no machines of this type and market now.
    "ZONE_RESOURCE_POOL_EXHAUSTED": _ZONE_CAPACITY,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": _ZONE_CAPACITY,
    "insufficientCapacity": _ZONE_CAPACITY,
    "RESOURCE_NOT_READY": _ZONE_CAPACITY,
    "resourceNotReady": _ZONE_CAPACITY,
    # The zone does not offer what was asked (a GPU type, a feature), or lacks a resource the
    # request names (a reservation in this zone).
    "UNSUPPORTED_OPERATION": _ZONE_CANNOT,
    "RESOURCE_NOT_FOUND": _ZONE_CANNOT,
    # Account limits.
    "QUOTA_EXCEEDED": _QUOTA,
    "quotaExceeded": _QUOTA,
    # Slow down and retry in place.
    "rateLimitExceeded": _THROTTLED,
    "userRateLimitExceeded": _THROTTLED,
    "RATE_LIMIT_EXCEEDED": _THROTTLED,
    "RESOURCE_OPERATION_RATE_EXCEEDED": _THROTTLED,  # too many operations on one resource
    "backendError": _THROTTLED,
    "internalError": _THROTTLED,
    # Credentials or permissions: nothing on this cloud will work.
    "IAM_PERMISSION_DENIED": _AUTH,
    "forbidden": _AUTH,
    "insufficientPermissions": _AUTH,
    "authError": _AUTH,
    "CREDENTIALS_MISSING": _AUTH,
    "ACCESS_TOKEN_EXPIRED": _AUTH,
    "ACCESS_TOKEN_SCOPE_INSUFFICIENT": _AUTH,
    "accessNotConfigured": _AUTH,  # the Compute API is not enabled in the project
    "SERVICE_DISABLED": _AUTH,
    # The network named by the request is missing: everywhere, or in this region.
    "VPC_NOT_FOUND": Rule(InvalidRequestError, Scope.CLOUD),
    "SUBNET_NOT_FOUND_FOR_VPC": Rule(InvalidRequestError, Scope.REGION),
    # The request itself is wrong (a bad field, an unknown machine type or image).
    "invalid": _INVALID,
    "badRequest": _INVALID,
    "required": _INVALID,
    "invalidParameter": _INVALID,
    "notFound": _INVALID,
    # A name already taken. The provider's own names are deterministic per attempt, so for it
    # this means "created by an earlier delivery": it never reaches failover.
    "alreadyExists": Rule(ProviderError, Scope.ZONE),
    "RESOURCE_ALREADY_EXISTS": Rule(ProviderError, Scope.ZONE),
}

# When no code has a row: decided by the HTTP status alone.
BY_HTTP_STATUS: dict[int, Rule] = {
    400: _INVALID,
    401: _AUTH,
    403: _AUTH,
    404: _INVALID,
    412: _THROTTLED,  # a precondition (fingerprint) changed under us: read again and retry
    429: _THROTTLED,
}
SERVER_ERROR = _THROTTLED  # any other 5xx: the API's own trouble, not the zone's capacity

# Quota metrics counted over the whole project, not per region: what they block is this
# instance type in every region (a smaller type may still fit).
GLOBAL_QUOTA_METRICS = frozenset({"GPUS_ALL_REGIONS", "CPUS_ALL_REGIONS"})
_QUOTA_METRIC_RE = re.compile(r"Quota '([A-Za-z0-9_-]+)' exceeded")
_RATE_QUOTA_RE = re.compile(r"per (minute|second|100 seconds)", re.IGNORECASE)


@dataclass(frozen=True)
class Detail:
    """One entry of an error: its code (or reason), message and the quota it names."""

    code: str
    message: str = ""
    quota_metric: str = ""  # upper case, e.g. NVIDIA_A100_GPUS, GPUS_ALL_REGIONS
    quota_region: str = ""


def quota_scope(detail: Detail) -> tuple[type[ProviderError], Scope]:
    """A quota refusal's kind and scope: a per-minute API quota is throttling; a cloud-wide
    metric (``GPUS_ALL_REGIONS``, or a message saying "globally") blocks the instance type in
    every region; anything else is one regional quota (its metric, ``NVIDIA_T4_GPUS``,
    ``PREEMPTIBLE_NVIDIA_T4_GPUS``, ``CPUS``...: the family it blocks in the region, see
    :mod:`corral.shared.quota_families`)."""
    if _RATE_QUOTA_RE.search(detail.message):
        return ThrottledError, Scope.NONE
    if detail.quota_metric in GLOBAL_QUOTA_METRICS or "globally" in detail.message:
        return QuotaError, Scope.INSTANCE_TYPE
    return QuotaError, Scope.FAMILY


def classify(http_status: int | None, details: Iterable[Detail], message: str) -> ProviderError:
    """The typed error for a failure with this HTTP status and these details."""
    for detail in details:
        rule = BY_CODE.get(detail.code)
        if rule is None:
            continue
        text = detail.message or message
        if rule.error is QuotaError:
            cls, scope = quota_scope(detail)
            # The metric is the family; none named: the candidate's own (its GPUs' quota).
            family = (detail.quota_metric or None) if scope == Scope.FAMILY else None
            return cls(text, code=_quota_code(detail), scope=scope, family=family)
        return rule.build(text, detail.code)
    rule = BY_HTTP_STATUS.get(http_status or 0)
    if rule is None and http_status is not None and http_status >= 500:
        rule = SERVER_ERROR
    code = f"HTTP {http_status}" if http_status else ""
    if rule is None:
        return ProviderError(message, code=code)  # unknown: blocks the zone
    return rule.build(message, code)


def _quota_code(detail: Detail) -> str:
    return f"{detail.code}:{detail.quota_metric}" if detail.quota_metric else detail.code


# --- reading the SDK's objects -------------------------------------------------------------
def _get(obj: Any, name: str, json_name: str | None = None) -> Any:
    """A field of a proto-plus message or of the dict the REST error body holds."""
    if isinstance(obj, dict):
        return obj.get(json_name or name)
    return getattr(obj, name, None)


def detail_of(entry: Any) -> Detail:
    """One ``errors[]`` entry (a dict of an HTTP error, or an operation's ``Errors`` message)."""
    code = str(_get(entry, "code") or _get(entry, "reason") or "")
    message = str(_get(entry, "message") or "")
    metric, region = "", ""
    for item in _get(entry, "error_details", "errorDetails") or ():
        info = _get(item, "quota_info", "quotaInfo")
        if info:
            metric = str(_get(info, "metric_name", "metricName") or "").rsplit("/", 1)[-1]
            dims = _get(info, "dimensions") or {}
            region = str(dims.get("region", "")) if hasattr(dims, "get") else ""
    return _detail(code, message, metric, region)


def _detail(code: str, message: str, metric: str = "", region: str = "") -> Detail:
    if not metric:
        found = _QUOTA_METRIC_RE.search(message)
        metric = found.group(1) if found else ""
    return Detail(code, message, metric.upper().replace("-", "_"), region)


def from_api_error(exc: api_exceptions.GoogleAPICallError) -> ProviderError:
    """An HTTP error (or a failed operation raised by ``ExtendedOperation.result``)."""
    details = [detail_of(e) for e in exc.errors]
    if exc.reason:  # the ErrorInfo reason (IAM_PERMISSION_DENIED ...): the most specific code
        details.insert(0, _detail(str(exc.reason), exc.message))
    status = exc.code if isinstance(exc.code, int) else None
    return classify(status, details, exc.message)


def from_operation(op: Any) -> ProviderError | None:
    """The error of a DONE ``compute_v1.Operation``, or None if it succeeded."""
    entries = list(_get(_get(op, "error"), "errors") or ())
    status = int(_get(op, "http_error_status_code") or 0) or None
    if not entries and status is None:
        return None
    message = "; ".join(str(_get(e, "message") or "") for e in entries) or str(
        _get(op, "http_error_message") or "the operation failed"
    )
    return classify(status, [detail_of(e) for e in entries], message)


def from_exception(exc: BaseException) -> ProviderError:
    """Any failure of a call to the API, as a typed error."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, api_exceptions.RetryError) and exc.cause is not None:
        return from_exception(exc.cause)  # the client's own retries ran out: judge the last try
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return from_api_error(exc)
    if isinstance(exc, auth_exceptions.DefaultCredentialsError | auth_exceptions.RefreshError):
        return AuthError(str(exc), code=type(exc).__name__)
    if is_timeout(exc):
        return LaunchTimeoutError(f"the Compute API did not answer in time: {exc}", code="Timeout")
    if isinstance(exc, requests.RequestException | auth_exceptions.TransportError):
        return ThrottledError(f"could not reach the Compute API: {exc}", code="ConnectionError")
    return ProviderError(str(exc), code=type(exc).__name__)


def is_timeout(exc: BaseException) -> bool:
    """Whether a call failed by running out of time. requests reports a read timeout during
    the body as a ConnectionError wrapping urllib3's ReadTimeoutError: look down the chain."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, _TIMEOUTS):
            return True
        todo += [item.__cause__, item.__context__, *item.args, getattr(item, "reason", None)]
    return False


_TIMEOUTS = (
    TimeoutError,  # also socket.timeout
    concurrent.futures.TimeoutError,
    requests.Timeout,
    urllib3.exceptions.TimeoutError,
)

# What the SDK raises that translated() turns into typed errors; anything else is a bug of
# ours and passes through untouched.
SDK_ERRORS: tuple[type[BaseException], ...] = (
    api_exceptions.GoogleAPIError,
    auth_exceptions.GoogleAuthError,
    requests.RequestException,
    concurrent.futures.TimeoutError,
)


@contextmanager
def translated() -> Iterator[None]:
    """Run API calls; their SDK exceptions leave as :class:`ProviderError`s."""
    try:
        yield
    except SDK_ERRORS as exc:
        raise from_exception(exc) from exc
