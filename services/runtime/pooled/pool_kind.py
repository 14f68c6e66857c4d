"""The pool-kind interface: what differs between a machine pool and a Determined master
config at run time. Everything else (the queue, the compare-and-set pass, sync, launching a
machine, the registry) is written once, in terms of this interface."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.services.runtime.deps import Deps
from corral.services.state.blocks import RememberedBlock
from corral.services.state.docstore import DocStore
from corral.services.state.pool_store import PoolKind as KindName
from corral.services.state.pool_store import PoolRecord
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.records import Instance, LaunchRequest, OwnerKind
from corral.shared.scheduling.fallback import FallbackPolicy, Setback
from corral.shared.scheduling.pooled import PooledMachine

Held = Mapping[str, Instance]  # machine id -> its row of the machine table (those up)


@dataclass(frozen=True)
class LaunchOrder:
    """How one pooled machine is launched: on which cloud, the templates to try in order, and
    the workload's own advanced_instance_config merged over each template's."""

    cloud: str
    templates: list[LaunchTemplate]
    extra: dict[str, Any] = field(default_factory=dict)
    boot_deadline_s: float | None = None  # how long it may take to come up; None: Corral's


@dataclass(frozen=True)
class PassResult:
    """A pass computed over one snapshot: the ledger to write, and what to log once it is."""

    after: Any
    log: Callable[[], None]


class PoolKind(Protocol):
    """One kind of registered pool. ``ledger`` is the kind's run-time document (a
    :class:`~corral.shared.scheduling.ledger.PoolLedger` or a
    :class:`~corral.shared.scheduling.det_ledger.DetLedger`); ``machine`` one of its machines
    (a pool machine or an agent)."""

    name: KindName
    owner_kind: OwnerKind  # the machine table's name for it, as the owner of its machines
    label: str  # for messages: "machine pool", "master config"

    def ledgers(self, deps: Deps) -> DocStore[Any]: ...

    def new_ledger(self, name: str) -> Any: ...

    # The queue
    def add_work(self, record: PoolRecord, req: LaunchRequest) -> Callable[[Any], bool]:
        """The ledger change that puts the request's work on the queue (a no-op if there)."""
        ...

    def work_ids(self, ledger: Any) -> list[str]: ...

    # A pass
    def pass_over(
        self,
        deps: Deps,
        record: PoolRecord,
        ledger: Any,
        now: float,
        *,
        rebalance: bool,
        held: Held,
        blocks: Sequence[RememberedBlock] = (),
    ) -> PassResult:
        """The scheduler over a snapshot of ``ledger``, applied to a copy (pure but for
        reading settings). ``held``: the table's rows of its machines that came up;
        ``blocks``: those every launch shares, in force now (a machine pool books no new
        machine of a type whose every place they cover; Determined's agents walk them as
        they launch, their pass does not read them)."""
        ...

    def lose_machine(self, ledger: Any, machine_id: str, now: float) -> list[str]:
        """The ledger change for a machine the cloud no longer runs (or is reclaiming): it
        leaves the pool and the work on it waits again. Returns the work ids sent back."""
        ...

    # Carrying the ledger out
    def sync_work(
        self, deps: Deps, record: PoolRecord, ledger: Any, work_id: str, held: Held
    ) -> bool:
        """Carry one request's part of the ledger out (idempotent); True if anything moved.
        ``held``: the machine table's rows of the ledger's machines that came up."""
        ...

    def machines(self, ledger: Any) -> Mapping[str, PooledMachine]: ...

    def sync_machine(
        self, deps: Deps, record: PoolRecord, ledger: Any, machine_id: str, machine: Any, held: Held
    ) -> bool:
        """The kind's own part of carrying a machine out (launching and reaping machines are
        handled for both kinds alike); True if anything moved."""
        ...

    def drop_machine(self, ledger: Any, machine_id: str) -> bool: ...

    # Launching one machine
    def cloud_of(self, record: PoolRecord, machine: Any) -> str: ...

    def launch_order(self, deps: Deps, record: PoolRecord, machine: Any) -> LaunchOrder | str:
        """How to launch ``machine``, or why it cannot be launched any more."""
        ...

    def machine_up(self, ledger: Any, machine_id: str, now: float) -> bool:
        """``machine_id`` came up (its row of the machine table says where): False if the
        ledger no longer waits for it."""
        ...

    def machine_failed(
        self, ledger: Any, machine_id: str, now: float, *, why: str, policy: FallbackPolicy
    ) -> bool:
        """``machine_id`` could not be launched (``why``); the work it was for follows
        ``policy`` (machine pools: it backs off and falls down its group order)."""
        ...

    def setback_of(self, ledger: Any, work_id: str) -> Setback | None:
        """What failed launches left on a request's work (None: nothing, or not this kind's)."""
        ...

    def workload_of(self, machine: Any) -> str | None:
        """The request a machine was launched for, if one (its events tell the user)."""
        ...

    # Views
    def why(self, deps: Deps, req: LaunchRequest, ledger: Any | None) -> dict[str, Any]: ...

    def view(self, record: PoolRecord, ledger: Any, rows: Held) -> dict[str, Any]:
        """``machines``, ``workloads`` and (machine pools) ``machine_types`` for `pools list`
        (a machine's cloud id and place from its row in ``rows``)."""
        ...
