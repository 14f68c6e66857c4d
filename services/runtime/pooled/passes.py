"""The queue, passes and sync of every registered pool, written once for both kinds.

- :func:`enqueue`: a PENDING pooled request joins its pool's queue (once), then a pass runs.
- :func:`run_pass`: the kind's scheduler over a snapshot of the pool's ledger, applied to a
  copy and written only if the ledger is still the one read (a compare-and-set through
  :meth:`DocStore.replace`, which computes again from a fresh snapshot after a lost race). Any
  number of scheduling workers may run passes over one pool at once.
- :func:`sync`: carries the ledger out, idempotently: machines to launch are handed to the
  provisioning worker, reaped machines terminated, the kind's own part done for each request
  and machine (assignments, preemption, finished jobs, replacement).
- :func:`rebalance_all`: beat's pass over every pool with replacement and idle reaping, after
  :func:`check_machines` dropped the machines the cloud lost or is reclaiming.
- :func:`wake`: a pass sent for something that ended outside any pass (a job's exit, a
  machine lost: :mod:`.ends`), at most one waiting on the queue per pool.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from corral.services.providers.base import TAG_POOL, ProviderInstance
from corral.services.queues import dispatch
from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import work
from corral.services.runtime.pooled.kind_registry import kind_named, kind_of_route
from corral.services.runtime.pooled.pool_kind import PassResult, PoolKind
from corral.services.state.pool_store import PoolRecord
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import InstanceState
from corral.shared.observe import Seen, observe
from corral.shared.records import Instance, LaunchRequest
from corral.shared.routing import PooledRoute, pool_of
from corral.shared.scheduling.pooled import PooledMachine

# A machine reaped the moment its workload ended is terminated this long after: its agent
# ships its log every 0.5 s, and a terminated machine's (a deleted pod's) cannot ship the rest.
REAP_GRACE_S = 3.0
# A woken pass waits on the queue alone: wakes meanwhile send none, since it reads the pool
# afresh when it starts. Past this a wake sends again (a pass lost with a killed worker).
WAKE_COALESCE_S = 5.0

log = logging.getLogger("corral.pools")


def _pool(deps: Deps, name: str) -> tuple[PoolRecord, PoolKind] | None:
    record = deps.pools.get(name)
    return None if record is None else (record, kind_named(record.kind))


def enqueue(deps: Deps, req: LaunchRequest) -> str:
    """Put a PENDING pooled request's work on its pool's queue (once), then run a pass."""
    route = req.route
    assert not isinstance(route, str) and route.kind != "direct"
    kind, name = kind_of_route(route), pool_of(route) or ""
    record = deps.pools.get(name)
    ledgers = kind.ledgers(deps)
    if record is None or record.kind != kind.name:
        work.fail_pending(deps, req.id, f"{kind.label} {name!r} was deleted")
        return "failed"
    ledgers.create(name, kind.new_ledger(name))  # a no-op when it exists
    if ledgers.update(name, kind.add_work(record, req)) is None:
        work.fail_pending(deps, req.id, f"{kind.label} {name!r} was deleted")
        return "failed"
    return run_pass(deps, name)


def run_pass(deps: Deps, name: str, woken: bool = False, *, rebalance: bool = False) -> str:
    """One scheduling pass over pool ``name``, committed by compare-and-set, then carried
    out. ``rebalance`` (beat): replacement and idle reaping are decided too. ``woken``: sent
    by :func:`wake`, whose next wake may send again once this pass starts reading."""
    if woken:
        deps.store.release(_wake_key(name), "queued")  # what it reads covers every wake so far
    found = _pool(deps, name)
    if found is None:
        return "no such pool"
    record, kind = found
    computed: list[PassResult] = []
    rows: list[Mapping[str, Instance]] = [{}]

    def step(ledger: Any) -> Any | None:
        computed.clear()
        # The machine table's rows of its machines that came up, read once with the ledger
        # (one pipelined read): the pass reads an agent's market there, and sync carries on.
        # The blocks every launch shares come in the same round trip.
        now = deps.now()
        held, blocks = work.held_rows_and_blocks(deps, kind.machines(ledger).values(), now)
        rows[0] = held
        result = kind.pass_over(
            deps, record, ledger, now, rebalance=rebalance, held=held, blocks=blocks
        )
        if result.after.model_dump(exclude={"version"}) == ledger.model_dump(exclude={"version"}):
            return None  # nothing to write
        computed.append(result)
        return result.after

    written = kind.ledgers(deps).replace(name, step)
    if written is None:
        return "no such pool"
    for result in computed:
        result.log()  # the plan that was written
    return sync(deps, name, written, rows[0])


def sync(
    deps: Deps, name: str, ledger: Any | None = None, held: Mapping[str, Instance] | None = None
) -> str:
    """Carry pool ``name``'s ledger out once (idempotent; see the module docstring).
    ``ledger``, ``held``: the ledger as a pass just wrote (or read) it and its machines' rows
    (read here when not given)."""
    found = _pool(deps, name)
    if found is not None and ledger is None:
        ledger = found[1].ledgers(deps).get(name)
    if found is None or ledger is None:
        return "no such pool"
    record, kind = found
    changed = False
    if held is None:
        held = work.held_rows(deps, kind.machines(ledger).values())
    for work_id in kind.work_ids(ledger):
        changed |= kind.sync_work(deps, record, ledger, work_id, held)
    ledger = kind.ledgers(deps).get(name) or ledger
    machines = kind.machines(ledger)
    if any(m.status != "launching" and mid not in held for mid, m in machines.items()):
        held = work.held_rows(deps, machines.values())  # one came up meanwhile
    for machine_id, machine in machines.items():
        changed |= _sync_machine(deps, kind, record, ledger, machine_id, machine, held)
    if changed:
        dispatch.pool_pass(name, settings=deps.settings)
        return "changed"
    return "steady"


def _sync_machine(
    deps: Deps,
    kind: PoolKind,
    record: PoolRecord,
    ledger: Any,
    machine_id: str,
    machine: PooledMachine,
    held: Mapping[str, Instance],
) -> bool:
    work.mirror(deps, work.as_machine(held, machine), machine)  # its row says retiring, reaping
    if machine.status == "launching":  # MachineStatus and AgentStatus alike
        # Hand it to the provisioning worker once per retry period (the launch is idempotent).
        retry_s = deps.settings.timers.pool_machine_launch_retry_s
        if deps.store.claim(f"pool-launch:{machine_id}", "sent", retry_s):
            cloud = kind.cloud_of(record, machine)
            dispatch.pool_machine(record.name, machine_id, cloud, settings=deps.settings)
        return False
    if machine.status == "reaping":
        # Reaped with the workload it was launched for (it still names it): terminated a
        # little later, so that its agent ships the last of the work's output. (Idle-reaped
        # machines go at once: the reaper counts a machine until it is gone.)
        ended = getattr(machine, "idle_since", None)
        with_work = getattr(machine, "workload_id", None) and not getattr(machine, "head", False)
        if with_work and ended is not None and deps.now() - ended < REAP_GRACE_S:
            return False
        why = "its workload's own config" if with_work else "idle past its limit"
        if work.terminate(deps, work.as_machine(held, machine), f"reaped: {why}"):
            log.info("terminated pool machine %s (reaped: %s)", machine_id, why)
        kind.ledgers(deps).update(record.name, lambda led: kind.drop_machine(led, machine_id))
        return True
    return kind.sync_machine(deps, record, ledger, machine_id, machine, held)


def wake(deps: Deps, name: str) -> bool:
    """Send pool ``name`` a pass now, unless one sent by a wake still waits to start (it will
    read what this wake was for). True if sent."""
    if not deps.store.claim(_wake_key(name), "queued", WAKE_COALESCE_S):
        return False
    try:
        dispatch.pool_pass(name, settings=deps.settings, woken=True)
    except Exception:
        deps.store.release(_wake_key(name), "queued")  # not sent: the next wake sends it
        raise
    return True


def _wake_key(name: str) -> str:
    return f"pool-wake:{name}"


def rebalance_all(deps: Deps) -> dict[str, str]:
    """Beat: every pool's machines checked, then its pass with replacement and idle reaping."""
    out = {}
    for name in deps.pools.names():
        found = _pool(deps, name)
        if found is not None:
            check_machines(deps, *found)
            out[name] = run_pass(deps, name, rebalance=True)
    return out


def check_machines(deps: Deps, record: PoolRecord, kind: PoolKind) -> list[str]:
    """Machines the cloud no longer runs, whose agents fell silent, or that the cloud is about
    to reclaim (their agent relayed the notice) leave the pool and are terminated; the work on
    them waits again at its original place. Returns the machine ids dropped."""
    ledger = kind.ledgers(deps).get(record.name)
    if ledger is None:
        return []
    held = work.held_rows(deps, kind.machines(ledger).values())
    placed = {
        mid: row
        for mid, m in kind.machines(ledger).items()
        if (row := work.as_machine(held, m)) is not None and row.provider_id and row.cloud
    }
    dropped = []
    for cloud in sorted({row.cloud for row in placed.values()}):
        try:
            found = deps.provider(cloud).describe({TAG_POOL: record.name})
        except ProviderError as exc:
            log.warning("%s did not answer for pool %s (%s)", cloud, record.name, exc)
            continue
        seen = {p.provider_id: p for p in found}
        for mid, row in placed.items():
            if row.cloud == cloud and (why := gone(seen.get(str(row.provider_id)))):
                _drop(deps, record, kind, mid, row, why)
                dropped.append(mid)
    return dropped


def _drop(
    deps: Deps, record: PoolRecord, kind: PoolKind, mid: str, row: Instance, why: str
) -> None:
    """One machine out of its pool (and terminated); its work queued again."""
    now = deps.now()
    sent_back: list[str] = []

    def lose(led: Any) -> bool:
        sent_back[:] = kind.lose_machine(led, mid, now)
        return True

    kind.ledgers(deps).update(record.name, lose)
    log.warning("pool %s: machine %s %s", record.name, mid, why)
    deps.machines.move(mid, InstanceState.LOST, now, f"its pool's machine {why}")
    with contextlib.suppress(ProviderError):  # what remains of it is a stray for reconcile
        work.terminate(deps, row, f"its pool's machine {why}")
    for wid in sent_back:
        work.end_instances(deps, wid, f"pool machine {mid} {why}")
        deps.store.append_event(
            wid, f"pool machine {mid} {why}; requeued at its original place", now
        )


def gone(seen: ProviderInstance | None) -> str | None:
    """Why a pool's machine no longer serves, from what its cloud reports (None: it serves):
    the one observer's word (:func:`corral.shared.observe.observe`)."""
    look = observe("running", seen)
    match look.seen:
        case Seen.GONE | Seen.EXITED:  # a pool machine's end is never a run's end
            return "was lost (the cloud no longer runs it)"
        case Seen.DIED | Seen.SILENT:
            return "was lost (its agent fell silent)"
        case Seen.RECLAIMING:
            return f"is being reclaimed by the cloud ({seen.notice if seen else ''})"
    return None


def is_queued(deps: Deps, req: LaunchRequest, route: PooledRoute) -> bool:
    """Whether a pooled request is on its pool's queue (or placed) already."""
    kind = kind_of_route(route)
    ledger = kind.ledgers(deps).get(pool_of(route) or "")
    return ledger is not None and req.id in kind.work_ids(ledger)


def knows_machine(deps: Deps, name: str, machine_id: str) -> bool:
    """Whether pool ``name`` (a machine pool or a master config) still counts this machine."""
    found = _pool(deps, name)
    if found is None:
        return False
    ledger = found[1].ledgers(deps).get(name)
    return ledger is not None and machine_id in found[1].machines(ledger)
