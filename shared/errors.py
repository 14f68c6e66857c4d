"""Provider errors as the decision core sees them: a kind, an outcome word and a scope.

Providers (services/providers/*) turn SDK errors into these; failover reads ``scope`` to
decide what to block and ``outcome`` to record the attempt. Pure: no SDK is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    """How much of the search space one failure rules out, narrowest first."""

    NONE = "none"  # nothing is blocked: retry in place (throttling, a 5xx)
    ZONE = "zone"  # this instance type and market in this zone (sold out)
    FAMILY = "family"  # one quota family (market included) in this region: a regional quota
    REGION = "region"  # this region for this cloud (a cloud API that does not answer)
    INSTANCE_TYPE = "instance_type"  # this instance type (and market) in every region of the cloud
    CLOUD = "cloud"  # the whole cloud (bad credentials, permission denied)
    REQUEST = "request"  # the request itself is wrong: fail fast, try nothing else


class ProviderError(Exception):
    """Base of every error a provider raises on purpose."""

    outcome = "error"
    scope = Scope.ZONE  # an unknown failure blocks the zone, as SkyPilot does

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        scope: Scope | None = None,
        family: str | None = None,
        free: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code  # the provider's own code, e.g. InsufficientInstanceCapacity
        if scope is not None:
            self.scope = scope
        # The quota family the cloud named (NVIDIA_T4_GPUS, on_demand:g-vt); None: the
        # candidate's own families (corral.shared.quota_families) are what it blocks.
        self.family = family
        # A shortfall: how many machines were free when more were asked ("1 of 1 free, asked
        # for 2"); it blocks only asks of more than that. None: none are (sold out).
        self.free = free

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.code else self.message


class CapacityError(ProviderError):
    """The zone has no capacity for this type and market now."""

    outcome = "capacity"
    scope = Scope.ZONE


class QuotaError(ProviderError):
    """An account limit: one quota family in the region by default (its ``family``, or the
    candidate's), cloud-wide for some (GPUS_ALL_REGIONS)."""

    outcome = "quota"
    scope = Scope.FAMILY


class ThrottledError(ProviderError):
    """The API asks us to slow down; retry the same zone with backoff."""

    outcome = "throttled"
    scope = Scope.NONE


class AuthError(ProviderError):
    """Credentials missing, expired or without permission: the whole cloud is out."""

    outcome = "auth"
    scope = Scope.CLOUD


class InvalidRequestError(ProviderError):
    """The cloud says the request itself is wrong; trying elsewhere will not help."""

    outcome = "invalid"
    scope = Scope.REQUEST


class LaunchTimeoutError(ProviderError):
    """The cloud's API did not answer within the attempt's deadline (a hung region): block
    the region for a while. Machines the cloud started that never report are not this
    (:class:`UnregisteredError`)."""

    outcome = "timeout"
    scope = Scope.REGION


class UnregisteredError(ProviderError):
    """The cloud started the machines but their agents never registered by the deadline: a
    fault of those machines (they are let go and the request goes on), not of the region."""

    outcome = "unregistered"
    scope = Scope.NONE


ERRORS_BY_OUTCOME: dict[str, type[ProviderError]] = {
    cls.outcome: cls
    for cls in (
        ProviderError,
        CapacityError,
        QuotaError,
        ThrottledError,
        AuthError,
        InvalidRequestError,
        LaunchTimeoutError,
        UnregisteredError,
    )
}


@dataclass(frozen=True)
class ErrorRule:
    """What one provider error code becomes: an error class, and a scope when not the class's
    own. Each provider keeps a table of these (its codes are data, not a chain of ifs)."""

    error: type[ProviderError]
    scope: Scope | None = None

    def build(self, message: str, code: str) -> ProviderError:
        return self.error(message, code=code, scope=self.scope)
