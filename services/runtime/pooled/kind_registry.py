"""Which implementation serves a registered pool: one entry per kind of pool file."""

from __future__ import annotations

from corral.services.runtime.pooled.determined import DeterminedPools
from corral.services.runtime.pooled.machine_pool import MachinePools
from corral.services.runtime.pooled.pool_kind import PoolKind
from corral.services.state.pool_store import PoolKind as KindName
from corral.shared.routing import DeterminedRoute, MachinePoolRoute, PooledRoute

KINDS: dict[KindName, PoolKind] = {
    "machine_pool": MachinePools(),
    "master_config": DeterminedPools(),
}


def kind_named(name: KindName) -> PoolKind:
    return KINDS[name]


def kind_of_route(route: PooledRoute) -> PoolKind:
    """The kind a pooled request's route sends it to."""
    match route:
        case MachinePoolRoute():
            return KINDS["machine_pool"]
        case DeterminedRoute():
            return KINDS["master_config"]
