"""What machine pools and Determined pools share at run time: work handed to warm machines
(their node agents run assignments, on the local cloud and on AWS and Google Cloud), and the
request and instance records of work that runs on pooled machines.

A pooled machine outlives the work it runs, so a request's instance records here are
*assignments*: one per (request, machine, placement), RUNNING while the work runs there and
TERMINATED ("released to the pool") when it stops; the machine itself goes on.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from corral.services.providers.base import NodeWork, node_work_of
from corral.services.runtime.attempt_record import fail_request, move_request_from
from corral.services.runtime.deps import Deps
from corral.services.runtime.launch import zones_for
from corral.services.runtime.planning import accelerator_of, price_of
from corral.services.runtime.typed_task import task_of
from corral.services.state.blocks import RememberedBlock
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.config.task import Task
from corral.shared.errors import ProviderError
from corral.shared.lifecycle import (
    MACHINE_TRANSITIONS,
    POOL_WORDS,
    TERMINAL_REQUEST_STATES,
    InstanceState,
    MachineState,
    RequestState,
    is_transition,
)
from corral.shared.machine_walk import LaunchBlocked, launch_blocked
from corral.shared.placement import Block
from corral.shared.records import Assignment, Instance, LaunchRequest, Transition
from corral.shared.recovery import Restart, restart_after
from corral.shared.scheduling.pooled import PooledMachine

log = logging.getLogger("corral.pools")


def as_machine(held: Mapping[str, Instance], pooled: PooledMachine) -> Instance | None:
    """A pool machine's or a Determined agent's row of the machine table, if the cloud holds
    it (``held``: the rows of the pool's machines that came up, read once per sync); None
    until it is up: no work goes to it."""
    return None if pooled.status == "launching" else held.get(pooled.key)


def held_rows(deps: Deps, machines: Iterable[PooledMachine]) -> dict[str, Instance]:
    """The table's rows of the machines that came up, in one round trip (none when all are
    launching)."""
    return deps.machines.get_many(m.key for m in machines if m.status != "launching")


def held_rows_and_blocks(
    deps: Deps, machines: Iterable[PooledMachine], now: float
) -> tuple[dict[str, Instance], list[RememberedBlock]]:
    """:func:`held_rows`, and the blocks every launch shares in force at ``now``, in one
    round trip (a pass reads both)."""
    ids = [m.key for m in machines if m.status != "launching"]
    rows, raw = deps.machines.get_many_beside(ids, deps.blocks.key)
    return rows, deps.blocks.active_in(raw, now)


def _cloud_id(machine: Instance) -> str:
    """The cloud's id of a machine that is up."""
    if not machine.provider_id:
        raise ValueError(f"pooled machine {machine.id} is not up: no work goes to it")
    return machine.provider_id


def terminate(deps: Deps, row: Instance | None, reason: str = "its pool let it go") -> bool:
    """Terminate a pool machine or a Determined agent at its cloud, and record it so in its
    row: False (nothing done) when it never came up (no row)."""
    if row is None or not row.provider_id:
        return False
    deps.provider(row.cloud).terminate([row.provider_id], zone=row.zone or None)
    deps.machines.move(row.id, InstanceState.TERMINATING, deps.now(), reason)
    return True


def mirror(deps: Deps, row: Instance | None, pooled: PooledMachine) -> Instance | None:
    """The pool's word for its machine carried onto the machine's row, along the one machine
    lifecycle (``POOL_WORDS``): ``retiring`` makes it RETIRING, ``reaping`` TERMINATING (its
    pool let it go; the cloud is asked once its grace is over). Nothing is written when the
    row is there already, or past it (ended, lost). The row as it is now."""
    to = POOL_WORDS[pooled.status]
    if row is None or to not in (MachineState.RETIRING, MachineState.TERMINATING):
        return row
    if row.state == to or not is_transition(MACHINE_TRANSITIONS, row.state, to):
        return row
    why = "its replacement is up" if to is MachineState.RETIRING else "its pool reaps it"
    return deps.machines.move(row.id, to, deps.now(), f"{pooled.status}: {why}") or row


def agents(deps: Deps, machine: Instance) -> NodeWork | None:
    """The agents of the machine's cloud, which take assignments (the local cloud's, and AWS
    and Google Cloud machines booted with the node agent); None for a cloud whose machines run
    none: a pooled machine there is only held for its work."""
    return node_work_of(deps.provider(machine.cloud))


def status(deps: Deps, machine: Instance) -> dict[str, Any]:
    """The machine's assignments: {"assigned": [...], "running": {id: activity}, "results":
    {id: result}} (empty for a cloud without agents)."""
    provider = agents(deps, machine)
    if provider is None:
        return {"assigned": [], "running": {}, "results": {}}
    return provider.assignment_status(_cloud_id(machine))


def assignment(aid: str, task: Task, envs: Mapping[str, str]) -> dict[str, Any]:
    """An assignment for a task: its setup, run, envs and secrets (plus ``envs``) and
    workdir."""
    return {
        "id": aid,
        "setup": task.setup,
        "run": task.run,
        "envs": {**task.run_envs(), **envs},
        "workdir": task.workdir if isinstance(task.workdir, str) else None,
    }


def ensure_assigned(
    deps: Deps, machine: Instance, work: dict[str, Any], seen: Mapping[str, Any] | None = None
) -> bool:
    """Hand ``work`` to the machine unless it already has it (or ran it); True if sent."""
    provider = agents(deps, machine)
    if provider is None:
        return False
    current = seen if seen is not None else status(deps, machine)
    aid = work["id"]
    if aid in current.get("assigned", ()) or aid in current.get("results", {}):
        return False
    provider.assign(_cloud_id(machine), work)
    return True


def withdraw(deps: Deps, machine: Instance, aid: str | None = None) -> None:
    """Stop one assignment on the machine (or, ``aid`` None, all of them)."""
    provider = agents(deps, machine)
    if provider is None:
        return
    current = status(deps, machine)
    if aid is None:
        if current.get("assigned"):
            provider.withdraw(_cloud_id(machine))
    elif aid in current.get("assigned", ()):
        provider.withdraw(_cloud_id(machine), aid)


def withdraw_others(deps: Deps, machine: Instance, keep: set[str]) -> None:
    """Stop every assignment on the machine but ``keep``."""
    provider = agents(deps, machine)
    if provider is None:
        return
    for aid in status(deps, machine).get("assigned", ()):
        if aid not in keep:
            provider.withdraw(_cloud_id(machine), aid)


def running(deps: Deps, machine: Instance, prefix: str) -> bool:
    """Whether an assignment whose id starts with ``prefix`` still runs on the machine."""
    return any(aid.startswith(prefix) for aid in status(deps, machine).get("running", {}))


def result(deps: Deps, machine: Instance, aid: str) -> Mapping[str, Any] | None:
    """The assignment's result once it ended (None while it runs, or on a cloud without
    agents)."""
    found = status(deps, machine).get("results", {}).get(aid)
    return found if isinstance(found, Mapping) else None


def stop_preempted(
    deps: Deps,
    req: LaunchRequest,
    by: str,
    machines: Sequence[tuple[Instance, str | None]],
    release: Callable[[], object],
) -> bool:
    """Preempted work: its request shows it (PREEMPTED, or PENDING if it had not run yet), its
    assignments are withdrawn (``None``: all on that machine), and once none runs any more
    ``release`` requeues it at its original place. True once released."""
    if req.state == RequestState.RUNNING:
        move_request(deps, req.id, RequestState.PREEMPTED, f"preempted by {by}")
    elif req.state == RequestState.PROVISIONING:
        move_request(deps, req.id, RequestState.PENDING, f"preempted by {by} before it ran")
    for machine, aid in machines:
        withdraw(deps, machine, aid)
    if any(running(deps, machine, f"{req.id}.") for machine, _ in machines):
        return False
    release()
    end_instances(deps, req.id, f"preempted by {by}")
    deps.store.append_event(
        req.id, f"requeued at its original place (preempted by {by})", deps.now()
    )
    return True


def finish_when_ended(
    deps: Deps,
    request_id: str,
    run: str,
    results: Sequence[Mapping[str, Any] | None],
    release: Callable[[bool], object],
) -> bool:
    """A job whose every node's work in ``run`` (its placement) has ended: end the request by
    the first non-zero exit code (SUCCEEDED when all are 0) and ``release(finished=True)`` its
    machines; or, when its task's ``job_recovery`` restarts a failed run, queue it again at its
    original place (``release(False)``). False while any still runs, and when the request is
    not running ``run`` any more: two passes of one pool can read the same ended run, and only
    the first to move the request tells it (the second would restart, or end, the run placed
    after it). The request moves before the pool: a worker that stops in between leaves a
    request its next pass finds ended (or queued), never a pool that forgot a running one."""
    if not results or any(r is None for r in results):
        return False
    codes = [int(r.get("exit_code") or 0) for r in results if r is not None]
    code = next((c for c in codes if c != 0), 0)
    req = deps.store.get_request(request_id)
    if req is None:
        release(True)
        end_instances(deps, request_id, "its request is gone", exit_code=code)
        return True
    if not running_run(req, run):
        return False
    again = restart_after(task_of(req).recovery(), code, req.restarts_on_errors)
    if again is not None:
        if not _restart(deps, request_id, run, again):
            return False
        release(False)
        reason = f"its job exited {code}; it restarts"
        end_instances(deps, request_id, reason, exit_code=code, placement=run)
        return True
    # The run's records end before the request does (whoever reads it ended reads them
    # ended); a pass that lost the race to tell it ends only what was ended already.
    end_instances(deps, request_id, f"its job exited {code}", exit_code=code, placement=run)
    if not finish_request(deps, request_id, run, code):
        return False
    release(True)
    end_instances(deps, request_id, f"its job exited {code}", exit_code=code)
    return True


def release_told(
    deps: Deps, req: LaunchRequest, run: str, release: Callable[[bool], object]
) -> bool:
    """A run whose restart was told while its pool still holds it (the pass that told it
    stopped before it released the pool): released now, queued again; True if so."""
    if run not in req.runs_ended:
        return False
    release(False)
    end_instances(deps, req.id, "its job ended; it restarts", placement=run)
    return True


def running_run(req: LaunchRequest, run: str) -> bool:
    """Whether the request runs the pool placement ``run`` (RUNNING, and that run has not
    ended: a request that restarted is RUNNING again only on a later placement)."""
    return req.state == RequestState.RUNNING and run not in req.runs_ended


def move_for_run(deps: Deps, request_id: str, run: str, to: RequestState, reason: str) -> bool:
    """:func:`move_request` for the pool placement ``run``: not once that run has ended (a pass
    that read its pool before the run's end was told must not bring it back)."""
    now = deps.now()
    live = set(RequestState) - TERMINAL_REQUEST_STATES - {to}

    def move(r: LaunchRequest) -> bool:
        return r.state in live and run not in r.runs_ended and r.move(to, now, reason)

    moved, _ = _moved(deps, request_id, move)
    if moved:
        deps.store.append_event(request_id, f"state: {to.value} ({reason})", now)
    return moved


RUNS_ENDED_KEPT = 8  # a request's last ended runs kept (a pass is at most a few runs behind)


def _ended(r: LaunchRequest, run: str) -> None:
    r.runs_ended = [*r.runs_ended, run][-RUNS_ENDED_KEPT:]


def _restart(deps: Deps, request_id: str, run: str, again: Restart) -> bool:
    """The request goes back to its pool's queue to run its job again; True if this call
    moved it (from running ``run``)."""
    now = deps.now()

    def back(r: LaunchRequest) -> bool:
        if not running_run(r, run):
            return False
        _ended(r, run)
        r.relaunches += 1
        r.restarts += 1
        r.restarts_on_errors += int(again.counted)
        r.move(RequestState.PENDING, now, f"restart {r.restarts}: {again.reason}")
        return True

    moved, updated = _moved(deps, request_id, back)
    if moved and updated is not None:
        deps.store.append_event(request_id, f"state: PENDING ({updated.history[-1].reason})", now)
    return moved


# ----------------------------------------------------------------------------------------------
# Request and instance records


def move_request(deps: Deps, request_id: str, to: RequestState, reason: str) -> bool:
    """Move a request (unless it is there already, or ended); True if this call moved it."""
    live = set(RequestState) - TERMINAL_REQUEST_STATES - {to}
    return move_request_from(deps, request_id, live, to, reason) is not None


def send_back(deps: Deps, request_id: str, reason: str) -> bool:
    """A placement sent back before it ran: its PROVISIONING request waits again (PENDING).
    Only from PROVISIONING: a pass that read its pool before the work was placed again must
    not send back the request its new placement runs."""
    moved = move_request_from(
        deps, request_id, {RequestState.PROVISIONING}, RequestState.PENDING, reason
    )
    return moved is not None


def finish_request(deps: Deps, request_id: str, run: str, code: int) -> bool:
    """A job's work in ``run`` ended with ``code``: SUCCEEDED on 0, else FAILED. True if this
    call ended the request."""
    now = deps.now()
    to = RequestState.SUCCEEDED if code == 0 else RequestState.FAILED

    def finish(r: LaunchRequest) -> bool:
        if not running_run(r, run):
            return False
        _ended(r, run)
        r.exit_code = code
        if code:
            r.error = f"its job exited {code}"
        r.move(to, now, f"its job exited {code}")
        return True

    moved, _ = _moved(deps, request_id, finish)
    if moved:
        deps.store.append_event(request_id, f"state: {to.value} (exit {code})", now)
    return moved


def _moved(
    deps: Deps, request_id: str, fn: Callable[[LaunchRequest], bool]
) -> tuple[bool, LaunchRequest | None]:
    """Write ``fn``'s change; whether this call's ``fn`` made the change that was written."""

    def decide(r: LaunchRequest) -> tuple[bool, bool]:
        changed = fn(r)
        return changed, changed

    updated, moved = deps.store.decide_request(request_id, decide)
    return bool(moved), updated


def fail_pending(deps: Deps, request_id: str, reason: str) -> None:
    """A PENDING request that can never run here ends FAILED with ``reason``."""
    fail_request(deps, request_id, reason, expected={RequestState.PENDING})


def instance_id_for(aid: str) -> str:
    return "i-" + hashlib.sha1(aid.encode()).hexdigest()[:10]


def record_instance(
    deps: Deps,
    machine: Instance,
    request_id: str,
    rank: int,
    aid: str,
    placement: str,
    as_type: str | None = None,
) -> None:
    """The request's record of the work running on this machine (once per assignment), part
    of ``placement`` (its nodes' records share it): an :class:`Assignment` pointing at the
    machine's row, which its request reads through the row (cloud id, place, type, price).
    ``as_type``: the machine type the record shows, instead of the pool's (a head node's)."""
    now = deps.now()
    _cloud_id(machine)  # a machine not up runs no work
    row = _priced(deps, machine)
    record = Assignment(
        id=instance_id_for(aid), request_id=request_id, node_index=rank, machine_id=row.id,
        attempt_id=aid, placement=placement, shown_type=as_type, state=InstanceState.REQUESTED,
        created_at=now, updated_at=now,
        history=[Transition(from_state=None, to_state=InstanceState.REQUESTED.value, at=now,
                            reason=f"assigned pooled machine {row.id}")],
    )  # fmt: skip
    view = record.view(row)
    view.move(InstanceState.RUNNING, now, "its pooled machine runs the work")
    if not deps.store.create_instance(view, stored=record.follow(view)):
        return

    def link(r: LaunchRequest) -> bool:
        if view.id in r.instance_ids:
            return False
        r.instance_ids = [*r.instance_ids, view.id]
        return True

    linked = deps.store.update_request(request_id, link)
    if linked is not None and linked.is_terminal:
        # The request ended while this placement was being written (a cancel): its sweep of
        # the records may have listed them before this one existed, so it ends here.
        end_instances(deps, request_id, f"its request ended ({linked.state.value})")


def _priced(deps: Deps, machine: Instance) -> Instance:
    """The machine's row with its price, as the catalog prices it: a row that has none (one
    written before rows were priced, or adopted from an older ledger) gets it written once."""
    if machine.price_usd_per_hour is not None:
        return machine
    place = machine.place
    price = price_of(
        deps, place.cloud, place.instance_type or machine.machine_type or "", place.zone or None,
        place.market,
    )  # fmt: skip
    if price is None:
        return machine

    def set_price(row: Instance) -> bool:
        if row.price_usd_per_hour is not None:
            return False
        row.price_usd_per_hour = price
        return True

    written = deps.machines.update(machine.id, set_price)
    return written or machine.model_copy(update={"price_usd_per_hour": price})


def end_stale_records(
    deps: Deps, request_id: str, reason: str, current_placement: Callable[[], str | None]
) -> None:
    """End the request's running records that belong to no current placement (one that was
    sent back to the queue, perhaps re-placed before any sync saw it waiting).

    The caller's ledger may be stale: another worker may have placed the work again since and
    be writing that placement's records. So ``current_placement`` reads the ledger afresh; its
    placement's records are kept, and so is any record created after that read (it can only
    belong to a placement committed since)."""
    read_at = deps.now()
    keep = current_placement()
    end_instances(deps, request_id, reason, placement_other_than=keep, created_before=read_at)


def end_instances(
    deps: Deps,
    request_id: str,
    reason: str,
    *,
    exit_code: int | None = None,
    provider_id: str | None = None,
    placement: str | None = None,
    placement_other_than: str | None = None,
    created_before: float | None = None,
) -> None:
    """The request's running assignment records (on one machine, or all) end: released to
    the pool with ``reason``. ``placement`` ends only that placement's records,
    ``placement_other_than`` spares that placement's records and
    ``created_before`` the records created at or after that time."""
    now = deps.now()
    for inst in deps.store.list_instances(request_id=request_id):
        if provider_id is not None and inst.provider_id != provider_id:
            continue
        if placement is not None and inst.placement != placement:
            continue
        if placement_other_than is not None and inst.placement == placement_other_than:
            continue
        if created_before is not None and inst.created_at >= created_before:
            continue
        if inst.state not in (InstanceState.REQUESTED, InstanceState.RUNNING):
            continue

        def end(i: Instance) -> bool:
            if i.state not in (InstanceState.REQUESTED, InstanceState.RUNNING):
                return False
            i.move(InstanceState.TERMINATED, now, f"released to the pool: {reason}")
            if exit_code is not None:
                i.exit_code = exit_code
            return True

        deps.store.update_instance(inst.id, end)


def blocked_launch(
    deps: Deps,
    pool: str,
    cloud: str,
    templates: Sequence[LaunchTemplate],
    blocks: Sequence[tuple[Block, float]],
) -> LaunchBlocked | None:
    """Whether a machine launched with ``templates`` now would be refused by ``blocks`` alone
    (:func:`launch_blocked`, over the zones the provider offers). A provider that cannot say
    where it launches leaves it launchable: its launch will say."""
    try:
        return launch_blocked(
            cloud,
            templates,
            lambda template: zones_for(deps, cloud, template),
            blocks,
            accelerator_of=lambda itype: accelerator_of(deps, cloud, itype),
        )
    except ProviderError as exc:
        log.warning("pool %s: could not read where %s launches: %s", pool, cloud, exc)
        return None
