"""The local cloud's injected faults (its file's ``errors``), played at launch as a real
cloud's API would answer: the typed error, or machines that start and never register."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.services.providers.local.state import UNREGISTERED
from corral.shared.errors import (
    AuthError,
    CapacityError,
    ProviderError,
    QuotaError,
    ThrottledError,
)

if TYPE_CHECKING:
    from corral.services.providers.base import LaunchSpec
    from corral.services.providers.local.state import CloudState
    from corral.shared.config.localcloud import LocalCloud

INJECTED: dict[str, tuple[type[ProviderError], str]] = {
    "capacity": (CapacityError, "InsufficientInstanceCapacity"),
    "quota": (QuotaError, "QuotaExceeded"),
    "throttle": (ThrottledError, "RequestLimitExceeded"),
    "auth": (AuthError, "AuthFailure"),
}


def play_injected(cloud: LocalCloud, state: CloudState, spec: LaunchSpec) -> bool | str:
    """Raise the zone's injected error when its turn comes. True (nothing played): the
    attempt is bound already, a launch that met no error then (a redelivery) meets none now
    either. ``UNREGISTERED``: the launch goes on, its agents never to register. Only a zone
    with an injected error looks (a Redis command)."""
    type_name = cloud.instance_type(spec.instance_type).name
    fault = cloud.zone(spec.zone).errors.get(type_name)
    if fault is None or not fault.meets(spec.market):
        return False
    if state.attempt_value(spec.attempt_id) is not None:
        return True
    if fault.fails_launch(state.count_fault(spec.zone, type_name)):
        if fault.kind == UNREGISTERED:
            return UNREGISTERED
        cls, code = INJECTED[fault.kind]
        named = f" (quota family {fault.family})" if fault.family else ""
        raise cls(
            f"{spec.zone}: {fault.kind} error for {type_name}{named} (injected by the cloud file)",
            code=code,
            family=fault.family,  # None: the candidate's own (its accelerator's quota)
        )
    return False
