"""AWS SDK errors -> Corral's typed errors: the table, prefixes, unknown codes, boto3's own
exceptions, and that nothing credential-like survives into a message."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ProfileNotFound,
    ReadTimeoutError,
)

from corral.services.providers.aws.errors import (
    PREFIX_RULES,
    RULES,
    classify,
    from_sdk_error,
    is_ambiguous,
    redact,
    rule_for,
)
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)

# The list, code by code: (error class, scope, outcome).
EXPECTED = [
    ("InsufficientInstanceCapacity", CapacityError, Scope.ZONE, "capacity"),
    ("InsufficientHostCapacity", CapacityError, Scope.ZONE, "capacity"),
    ("Unsupported", CapacityError, Scope.ZONE, "capacity"),
    # Issue #46: a vCPU limit is one quota class (and market) of the region, not the region.
    ("VcpuLimitExceeded", QuotaError, Scope.FAMILY, "quota"),
    ("InstanceLimitExceeded", QuotaError, Scope.FAMILY, "quota"),
    ("VolumeLimitExceeded", QuotaError, Scope.REGION, "quota"),
    ("MaxSpotInstanceCountExceeded", QuotaError, Scope.INSTANCE_TYPE, "quota"),
    ("AuthFailure", AuthError, Scope.CLOUD, "auth"),
    ("UnauthorizedOperation", AuthError, Scope.CLOUD, "auth"),
    ("InvalidClientTokenId", AuthError, Scope.CLOUD, "auth"),
    ("SignatureDoesNotMatch", AuthError, Scope.CLOUD, "auth"),
    ("AccessDenied", AuthError, Scope.CLOUD, "auth"),
    ("OptInRequired", AuthError, Scope.REGION, "auth"),
    ("RequestLimitExceeded", ThrottledError, Scope.NONE, "throttled"),
    ("InternalError", ThrottledError, Scope.NONE, "throttled"),
    ("ServiceUnavailable", ThrottledError, Scope.NONE, "throttled"),
    ("Unavailable", ThrottledError, Scope.NONE, "throttled"),
    ("InvalidParameterValue", InvalidRequestError, Scope.REQUEST, "invalid"),
    # Images and key pairs are regional: missing here, perhaps present in the next region.
    ("InvalidAMIID.NotFound", InvalidRequestError, Scope.REGION, "invalid"),
    ("InvalidAMIID.Malformed", InvalidRequestError, Scope.REQUEST, "invalid"),
    ("InvalidKeyPair.NotFound", InvalidRequestError, Scope.REGION, "invalid"),
]


def client_error(code: str, message: str = "boom", status: int = 400) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "RunInstances",
    )


@pytest.mark.parametrize(("code", "cls", "scope", "outcome"), EXPECTED)
def test_each_code_maps_to_its_error_and_scope(
    code: str, cls: type[ProviderError], scope: Scope, outcome: str
) -> None:
    err = from_sdk_error(client_error(code, "the message"))
    assert type(err) is cls
    assert err.scope == scope
    assert err.outcome == outcome
    assert err.code == code
    assert err.message == "the message"


def test_quota_is_told_apart_from_capacity() -> None:
    capacity = classify("InsufficientInstanceCapacity")
    quota = classify("VcpuLimitExceeded")
    assert (capacity.outcome, capacity.scope) == ("capacity", Scope.ZONE)
    assert (quota.outcome, quota.scope) == ("quota", Scope.FAMILY)


def test_old_style_server_and_client_prefixes_are_ignored() -> None:
    assert type(classify("Server.InsufficientInstanceCapacity")) is CapacityError
    assert type(classify("Client.InvalidParameterValue")) is InvalidRequestError


def test_prefix_rules_cover_families_but_not_lookalikes() -> None:
    assert rule_for("InvalidSubnetID.NotFound") is not None
    assert rule_for("InvalidCapacityReservationId.Malformed") is not None
    # "InvalidAMIID" without a dot-suffix is not a family member.
    assert rule_for("InvalidAMIIDs") is None
    assert all(prefix.endswith((".", ".NotFound")) for prefix, _ in PREFIX_RULES)


def test_unknown_client_code_blocks_the_zone() -> None:
    err = from_sdk_error(client_error("SomethingNew", status=400))
    assert type(err) is ProviderError
    assert err.scope == Scope.ZONE
    assert err.outcome == "error"
    assert err.code == "SomethingNew"


def test_unknown_server_code_is_retried_in_place() -> None:
    err = from_sdk_error(client_error("SomethingBroke", status=503))
    assert type(err) is ThrottledError
    assert err.scope == Scope.NONE


def test_rule_scopes_are_only_overrides_where_they_differ() -> None:
    # A rule's explicit scope must change something, or the table says more than it means.
    for code, rule in RULES.items():
        if rule.scope is not None:
            assert rule.scope != rule.error.scope, code


@pytest.mark.parametrize(
    ("exc", "cls", "ambiguous"),
    [
        (NoCredentialsError(), AuthError, False),
        (ProfileNotFound(profile="nope"), AuthError, False),
        (EndpointConnectionError(endpoint_url="http://x"), ThrottledError, False),
        (ConnectTimeoutError(endpoint_url="http://x"), ThrottledError, False),
        (ReadTimeoutError(endpoint_url="http://x"), ThrottledError, True),
        (ParamValidationError(report="Unknown parameter Foo"), InvalidRequestError, False),
        (RuntimeError("weird"), ProviderError, False),
    ],
)
def test_boto3s_own_exceptions(exc: Exception, cls: type[ProviderError], ambiguous: bool) -> None:
    err = from_sdk_error(exc)
    assert type(err) is cls
    assert err.code == type(exc).__name__
    assert is_ambiguous(exc) is ambiguous


def test_a_provider_error_passes_through_unchanged() -> None:
    original = QuotaError("limit", code="X", scope=Scope.CLOUD)
    assert from_sdk_error(original) is original


def test_access_key_ids_never_reach_a_message() -> None:
    message = "key AKIAIOSFODNN7EXAMPLE is not valid; session ASIAY34FZKBOKMUTVV7A too"
    err = from_sdk_error(client_error("AuthFailure", message))
    assert "AKIAIOSFODNN7EXAMPLE" not in str(err)
    assert "ASIAY34FZKBOKMUTVV7A" not in str(err)
    assert "is not valid" in str(err)


def test_long_messages_are_cut() -> None:
    text = redact("x" * 5000)
    assert len(text) == 500
    assert text.endswith("…")
