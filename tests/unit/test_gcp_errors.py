"""GCP errors -> Corral's typed errors: real google-api-core exceptions and compute_v1
operations, built as the SDK builds them from the API's bodies."""

from __future__ import annotations

import concurrent.futures

import pytest
import requests
import urllib3
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud import compute_v1

from corral.services.providers.gcp import errors
from corral.services.providers.gcp.errors import (
    BY_CODE,
    Detail,
    classify,
    from_api_error,
    from_exception,
    from_operation,
    translated,
)
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    LaunchTimeoutError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)

STOCKOUT_MSG = (
    "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to "
    "fulfill the request.  Try a different zone, or try again later."
)


def http_error(
    status: int, reason: str, message: str, info_reason: str | None = None
) -> api_exceptions.GoogleAPICallError:
    """What the REST transport raises for an HTTP error body (api_core's own builder)."""
    error_info = (
        {"reason": info_reason, "domain": "compute.googleapis.com"} if info_reason else None
    )
    return api_exceptions.from_http_status(
        status,
        f"POST https://compute.googleapis.com/...: {message}",
        errors=[{"message": message, "domain": "global", "reason": reason}],
        error_info=error_info,
    )


def failed_operation(
    code: str, message: str, status: int, quota: compute_v1.QuotaExceededInfo | None = None
) -> compute_v1.Operation:
    details = [compute_v1.ErrorDetails(quota_info=quota)] if quota else []
    entry = compute_v1.Errors(code=code, message=message, error_details=details)
    return compute_v1.Operation(
        name="operation-1",
        status=compute_v1.Operation.Status.DONE,
        error=compute_v1.Error(errors=[entry]),
        http_error_status_code=status,
        http_error_message="SERVICE UNAVAILABLE" if status == 503 else "FORBIDDEN",
    )


# --- failed operations ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"]
)
def test_a_stockout_operation_is_a_zone_capacity_error_despite_its_503(code: str) -> None:
    err = from_operation(failed_operation(code, STOCKOUT_MSG, 503))
    assert isinstance(err, CapacityError)
    assert err.scope == Scope.ZONE
    assert err.code == code
    assert "does not have enough resources" in err.message


def test_the_stockout_as_extended_operation_result_raises_it_is_the_same() -> None:
    # ExtendedOperation.result() raises ServiceUnavailable with the operation as `response`
    # and its Errors messages as `errors`: the code is only there.
    op = failed_operation("ZONE_RESOURCE_POOL_EXHAUSTED", STOCKOUT_MSG, 503)
    exc = api_exceptions.from_http_status(
        503, "SERVICE UNAVAILABLE", response=op, errors=op.error.errors
    )
    assert isinstance(exc, api_exceptions.ServiceUnavailable)
    err = from_api_error(exc)
    assert (type(err), err.scope, err.code) == (
        CapacityError,
        Scope.ZONE,
        "ZONE_RESOURCE_POOL_EXHAUSTED",
    )


def test_a_regional_quota_blocks_its_metric_in_the_region() -> None:
    quota = compute_v1.QuotaExceededInfo(
        metric_name="compute.googleapis.com/nvidia_a100_gpus",
        limit_name="NVIDIA-A100-GPUS-per-project-region",
        dimensions={"region": "us-central1"},
        limit=0,
    )
    op = failed_operation(
        "QUOTA_EXCEEDED",
        "Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region us-central1.",
        403,
        quota,
    )
    err = from_operation(op)
    assert isinstance(err, QuotaError)
    # Issue #46: the A100 quota of the region, not the region (its CPUs, its T4s are free).
    assert (err.scope, err.family) == (Scope.FAMILY, "NVIDIA_A100_GPUS")
    assert err.code == "QUOTA_EXCEEDED:NVIDIA_A100_GPUS"


def test_gpus_all_regions_blocks_the_instance_type_everywhere() -> None:
    quota = compute_v1.QuotaExceededInfo(metric_name="compute.googleapis.com/gpus_all_regions")
    msg = "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."
    err = from_operation(failed_operation("QUOTA_EXCEEDED", msg, 403, quota))
    assert isinstance(err, QuotaError)
    assert err.scope == Scope.INSTANCE_TYPE
    assert err.code == "QUOTA_EXCEEDED:GPUS_ALL_REGIONS"


def test_a_global_quota_is_read_from_the_message_when_no_quota_info_came() -> None:
    msg = "Quota 'CPUS_ALL_REGIONS' exceeded.  Limit: 32.0 globally."
    err = from_operation(failed_operation("QUOTA_EXCEEDED", msg, 403))
    assert (type(err), err.scope) == (QuotaError, Scope.INSTANCE_TYPE)


def test_a_successful_operation_has_no_error() -> None:
    op = compute_v1.Operation(name="op", status=compute_v1.Operation.Status.DONE)
    assert from_operation(op) is None


def test_an_operation_failing_with_an_unknown_code_blocks_the_zone() -> None:
    err = from_operation(failed_operation("SOMETHING_NEW", "odd", 409))
    assert type(err) is ProviderError
    assert err.scope == Scope.ZONE


# --- HTTP errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "reason", "info", "message", "kind", "scope"),
    [
        # A 403 is a permission error...
        (403, "forbidden", "IAM_PERMISSION_DENIED", "Required 'compute.instances.create' "
         "permission for 'projects/p/zones/z/instances/i'", AuthError, Scope.CLOUD),
        # ... unless its reason says quota (regional here) or rate limit.
        (403, "quotaExceeded", None, "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-east1.",
         QuotaError, Scope.FAMILY),
        (403, "quotaExceeded", None, "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.",
         QuotaError, Scope.INSTANCE_TYPE),
        (403, "rateLimitExceeded", None, "Rate Limit Exceeded", ThrottledError, Scope.NONE),
        (403, "quotaExceeded", None, "Quota exceeded for quota metric 'Queries' and limit "
         "'Queries per minute' of service 'compute.googleapis.com'", ThrottledError, Scope.NONE),
        (429, "rateLimitExceeded", "RATE_LIMIT_EXCEEDED", "Quota exceeded for quota metric "
         "'Queries'", ThrottledError, Scope.NONE),
        (401, "authError", "CREDENTIALS_MISSING", "Request is missing required authentication "
         "credential.", AuthError, Scope.CLOUD),
        (403, "accessNotConfigured", None, "Compute Engine API has not been used in project 1",
         AuthError, Scope.CLOUD),
        (400, "invalid", None, "Invalid value for field 'resource.machineType': "
         "'zones/z/machineTypes/n9-bogus'.", InvalidRequestError, Scope.REQUEST),
        (400, "badRequest", None, "Bad request", InvalidRequestError, Scope.REQUEST),
        (503, "backendError", None, "Internal error. Please try again.", ThrottledError,
         Scope.NONE),
        (500, "internalError", None, "Internal error.", ThrottledError, Scope.NONE),
        (400, "UNSUPPORTED_OPERATION", None, "The accelerator type is not supported in zone",
         InvalidRequestError, Scope.ZONE),
        (400, "VPC_NOT_FOUND", None, "The network 'corral' was not found", InvalidRequestError,
         Scope.CLOUD),
    ],
)  # fmt: skip
def test_http_errors(
    status: int,
    reason: str,
    info: str | None,
    message: str,
    kind: type[ProviderError],
    scope: Scope,
) -> None:
    err = from_api_error(http_error(status, reason, message, info))
    assert type(err) is kind
    assert err.scope == scope
    assert message in err.message


def test_the_error_info_reason_is_the_reported_code() -> None:
    err = from_api_error(http_error(403, "forbidden", "denied", "IAM_PERMISSION_DENIED"))
    assert err.code == "IAM_PERMISSION_DENIED"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, InvalidRequestError),
        (401, AuthError),
        (403, AuthError),
        (404, InvalidRequestError),
        (429, ThrottledError),
        (500, ThrottledError),
        (502, ThrottledError),
        (503, ThrottledError),
        (409, ProviderError),
    ],
)
def test_without_a_known_reason_the_http_status_decides(
    status: int, kind: type[ProviderError]
) -> None:
    err = from_api_error(http_error(status, "someNewReason", "what happened"))
    assert type(err) is kind
    assert err.code == f"HTTP {status}"


def test_the_first_known_code_wins_over_the_http_status() -> None:
    details = [Detail("unheard_of"), Detail("ZONE_RESOURCE_POOL_EXHAUSTED", "sold out")]
    err = classify(503, details, "outer")
    assert (type(err), err.message) == (CapacityError, "sold out")


# requests reports a read timeout inside a response body as a ConnectionError.
BODY_READ_TIMEOUT = requests.ConnectionError(
    urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]
)


# --- other failures ------------------------------------------------------------------------
def test_client_retries_that_ran_out_are_judged_by_the_last_error() -> None:
    last = http_error(503, "backendError", "busy")
    err = from_exception(api_exceptions.RetryError("deadline exceeded", cause=last))
    assert (type(err), err.scope) == (ThrottledError, Scope.NONE)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (auth_exceptions.DefaultCredentialsError("no credentials"), AuthError),
        (auth_exceptions.RefreshError("invalid_grant: token revoked"), AuthError),
        (requests.ConnectionError("connection refused"), ThrottledError),
        (requests.ReadTimeout("read timed out"), LaunchTimeoutError),
        (BODY_READ_TIMEOUT, LaunchTimeoutError),
        (concurrent.futures.TimeoutError(), LaunchTimeoutError),
    ],
)  # fmt: skip
def test_transport_and_credential_failures(exc: Exception, kind: type[ProviderError]) -> None:
    assert type(from_exception(exc)) is kind


def test_translated_turns_sdk_errors_into_typed_errors_and_leaves_bugs_alone() -> None:
    with pytest.raises(CapacityError) as caught, translated():
        raise api_exceptions.from_http_status(
            503, "x", errors=[{"reason": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "gone"}]
        )
    assert isinstance(caught.value.__cause__, api_exceptions.ServiceUnavailable)
    with pytest.raises(KeyError), translated():
        raise KeyError("a bug of ours is not a cloud error")


def test_every_row_of_the_table_names_a_typed_error() -> None:
    assert BY_CODE, "the table is empty"
    for code, rule in {**BY_CODE, **{str(k): v for k, v in errors.BY_HTTP_STATUS.items()}}.items():
        assert issubclass(rule.error, ProviderError), code
        err = rule.error("m", scope=rule.scope)
        assert isinstance(err.scope, Scope), code
