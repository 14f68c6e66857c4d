"""AWS SDK errors as Corral's typed errors, each with the scope it blocks.

The mapping is data: :data:`RULES` by exact error code, :data:`PREFIX_RULES` for families of
codes such as ``InvalidAMIID.NotFound`` / ``InvalidAMIID.Malformed``. :func:`from_sdk_error`
turns anything boto3 raises into a :class:`~corral.shared.errors.ProviderError`; failover reads
its ``scope`` (what to block) and ``outcome`` (how the attempt ended).

Quota is told apart from capacity: a sold-out zone (``InsufficientInstanceCapacity``) blocks
one type and market in one zone; a vCPU limit (``VcpuLimitExceeded``) blocks one vCPU quota
class and market in the region (AWS counts Standard, G and VT, P, ... and spot apart from
on-demand: :func:`corral.shared.quota_families.aws_vcpu_class`), which :func:`quota_family`
names from the instance type the launch asked for; only the limits every instance shares
(volumes, addresses, interfaces) block the region.
"""

from __future__ import annotations

import re

from botocore import exceptions as sdk

from corral.shared.errors import (
    AuthError,
    CapacityError,
    ErrorRule,
    InvalidRequestError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)
from corral.shared.quota_families import quota_families

Rule = ErrorRule


_CAPACITY = Rule(CapacityError)  # this type and market in this zone
_CLASS_QUOTA = Rule(QuotaError)  # a vCPU limit: the type's quota class and market in the region
_REGION_QUOTA = Rule(QuotaError, Scope.REGION)  # a limit every instance of the region shares
_AUTH = Rule(AuthError)  # the whole cloud
_RETRY = Rule(ThrottledError)  # nothing blocked: retry in place with backoff
_INVALID = Rule(InvalidRequestError)  # the request itself is wrong: fail fast

RULES: dict[str, Rule] = {
    # Sold out in the zone (AWS answers these with HTTP 500, which botocore would retry).
    "InsufficientInstanceCapacity": _CAPACITY,
    "InsufficientHostCapacity": _CAPACITY,
    "InsufficientReservedInstanceCapacity": _CAPACITY,
    "InsufficientCapacity": _CAPACITY,
    "ReservationCapacityExceeded": _CAPACITY,  # the targeted capacity reservation is full
    "InsufficientFreeAddressesInSubnet": _CAPACITY,  # the zone's subnet has no free address
    "SpotMaxPriceTooLow": _CAPACITY,  # spot prices are per zone
    # The type is not offered in this zone: the zone is out for it, as if sold out.
    "Unsupported": _CAPACITY,
    # Account limits, counted per region: vCPUs per quota class and market (the error does
    # not name the class: the instance type asked for does), and what all instances share.
    "VcpuLimitExceeded": _CLASS_QUOTA,
    "InstanceLimitExceeded": _CLASS_QUOTA,  # an older account's instance count limit
    "VolumeLimitExceeded": _REGION_QUOTA,
    "AddressLimitExceeded": _REGION_QUOTA,
    "NetworkInterfaceLimitExceeded": _REGION_QUOTA,
    # The spot instance limit: this type on the spot market is out everywhere on AWS.
    "MaxSpotInstanceCountExceeded": Rule(QuotaError, Scope.INSTANCE_TYPE),
    # Credentials and permissions: nothing on AWS can work until they are fixed.
    "AuthFailure": _AUTH,
    "UnauthorizedOperation": _AUTH,
    "InvalidClientTokenId": _AUTH,
    "SignatureDoesNotMatch": _AUTH,
    "AccessDenied": _AUTH,
    "AccessDeniedException": _AUTH,
    "ExpiredToken": _AUTH,
    "ExpiredTokenException": _AUTH,
    "RequestExpired": _AUTH,  # a signature too old: the clock is skewed or the token expired
    "UnrecognizedClientException": _AUTH,
    "MissingAuthenticationToken": _AUTH,
    "Blocked": _AUTH,  # the account is suspended
    "PendingVerification": _AUTH,
    # A region the account has not enabled (or a Marketplace image whose terms are not
    # accepted there): that region is out, the others may work.
    "OptInRequired": Rule(AuthError, Scope.REGION),
    # Throttling and the API's own failures: retry the same zone with backoff.
    "RequestLimitExceeded": _RETRY,
    "Throttling": _RETRY,
    "ThrottlingException": _RETRY,
    "TooManyRequestsException": _RETRY,
    "InternalError": _RETRY,
    "InternalFailure": _RETRY,
    "ServerInternal": _RETRY,
    "ServiceUnavailable": _RETRY,
    "Unavailable": _RETRY,
    "RequestTimeout": _RETRY,
    "RequestTimeoutException": _RETRY,
    # The request is wrong: no other zone, region or type will make it right.
    "InvalidParameterValue": _INVALID,
    "InvalidParameter": _INVALID,
    "InvalidParameterCombination": _INVALID,
    "MissingParameter": _INVALID,
    "UnknownParameter": _INVALID,
    "InvalidInput": _INVALID,
    "ValidationError": _INVALID,
    "InvalidBlockDeviceMapping": _INVALID,
    "InvalidUserData.Malformed": _INVALID,
    # The same ClientToken with other parameters: the attempt changed between deliveries.
    # Nothing about the zone is known: move on without blocking anything.
    "IdempotentParameterMismatch": Rule(ProviderError, Scope.NONE),
}

# Families of codes ("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", ...): the request names
# something that does not exist or is malformed. Checked in order after RULES.
PREFIX_RULES: tuple[tuple[str, Rule], ...] = (
    # Images, key pairs, subnets, security groups, templates and reservations exist per region:
    # one that is missing here may well exist in the chain's next region.
    *(
        (f"{family}.NotFound", Rule(InvalidRequestError, Scope.REGION))
        for family in (
            "InvalidAMIID",
            "InvalidKeyPair",
            "InvalidSubnetID",
            "InvalidGroup",
            "InvalidSecurityGroupID",
            "InvalidLaunchTemplateId",
            "InvalidLaunchTemplateName",
            "InvalidCapacityReservationId",
            "InvalidSnapshot",
            "InvalidPlacementGroup",
        )
    ),
    ("InvalidAMIID.", _INVALID),
    ("InvalidKeyPair.", _INVALID),
    ("InvalidSubnetID.", _INVALID),
    ("InvalidSubnet.", _INVALID),
    ("InvalidGroup.", _INVALID),
    ("InvalidGroupId.", _INVALID),
    ("InvalidSecurityGroupID.", _INVALID),
    ("InvalidLaunchTemplateId.", _INVALID),
    ("InvalidLaunchTemplateName.", _INVALID),
    ("InvalidCapacityReservationId.", _INVALID),
    ("InvalidNetworkInterfaceID.", _INVALID),
    ("InvalidIamInstanceProfile.", _INVALID),
    ("InvalidSnapshot.", _INVALID),
    ("InvalidPlacementGroup.", _INVALID),
    ("InvalidInstanceID.", _INVALID),
)

# Errors boto3 raises before (or instead of) an answer from AWS.
_CREDENTIAL_ERRORS = (
    sdk.NoCredentialsError,
    sdk.PartialCredentialsError,
    sdk.CredentialRetrievalError,
    sdk.ProfileNotFound,
    sdk.TokenRetrievalError,
    sdk.SSOError,
)

_ACCESS_KEY_ID = re.compile(r"\b(AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b")
_MAX_MESSAGE_CHARS = 500


def rule_for(code: str) -> Rule | None:
    """The rule for an AWS error code; None when the code is unknown.

    Old-style codes carry a ``Server.`` or ``Client.`` prefix
    (``Server.InsufficientInstanceCapacity``); it is ignored.
    """
    for prefix in ("Server.", "Client."):
        code = code.removeprefix(prefix)
    rule = RULES.get(code)
    if rule is not None:
        return rule
    return next((r for prefix, r in PREFIX_RULES if code.startswith(prefix)), None)


def classify(code: str, message: str = "", *, http_status: int | None = None) -> ProviderError:
    """The typed error for an AWS error code and message.

    An unknown code blocks the zone (the base error's scope), except a 5xx answer, which is the
    service's own trouble: retried in place.
    """
    text = redact(message) or code
    rule = rule_for(code)
    if rule is None:
        if http_status is not None and http_status >= 500:
            return ThrottledError(text, code=code)
        return ProviderError(text, code=code)
    return rule.build(text, code)


def from_sdk_error(exc: BaseException) -> ProviderError:
    """Any exception from a boto3 call as a :class:`ProviderError` (returned, not raised)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, sdk.ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        status = meta.get("HTTPStatusCode")
        return classify(
            str(error.get("Code", "")),
            str(error.get("Message", "")),
            http_status=status if isinstance(status, int) else None,
        )
    name = type(exc).__name__
    if isinstance(exc, _CREDENTIAL_ERRORS):
        return AuthError(redact(str(exc)), code=name)
    if isinstance(exc, sdk.ParamValidationError):
        return InvalidRequestError(redact(str(exc)), code=name)
    if isinstance(exc, sdk.ConnectionError | sdk.HTTPClientError):
        # The endpoint did not answer (or the connection broke): the network, not the zone.
        return ThrottledError(redact(str(exc)), code=name)
    if isinstance(exc, sdk.BotoCoreError):
        return ProviderError(redact(str(exc)), code=name)
    return ProviderError(redact(f"{name}: {exc}"), code=name)


def quota_family(instance_type: str, market: str) -> str:
    """The vCPU quota a launch of ``instance_type`` on ``market`` counts against, as
    :mod:`corral.shared.quota_families` names it (``on_demand:g-vt``, ``spot:p``)."""
    return next(iter(quota_families("aws", instance_type, market)))


def with_family(err: ProviderError, instance_type: str, market: str) -> ProviderError:
    """``err`` naming its quota family, when it is a class quota the launch ran into."""
    if isinstance(err, QuotaError) and err.scope == Scope.FAMILY and err.family is None:
        err.family = quota_family(instance_type, market)
    return err


def is_ambiguous(exc: BaseException) -> bool:
    """Whether a call may have reached AWS although no answer came back (a read timeout, a
    connection closed mid-answer): a launch must then be retried with the same ClientToken,
    never with a new one."""
    return isinstance(exc, sdk.HTTPClientError)


def redact(text: str) -> str:
    """``text`` without anything that looks like an access key id, cut to a readable length."""
    text = _ACCESS_KEY_ID.sub(lambda m: m.group(1) + "…", text)
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 1] + "…"
    return text
