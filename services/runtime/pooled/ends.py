"""Pooled work that ended outside any pass, noticed by reconcile and told to its pool at once.

A pool's pass places its queue; its sync notices what ended (a job's exit, a request's end)
and sends the next pass. Two ends happen where no pass looks: a job exits on its machine (its
agent records the result), and a machine dies (the cloud lost it, its agent fell silent, the
cloud is about to reclaim it). Beat's rebalancing finds both, but only every
``pool_rebalance_interval_s`` (30 s). Reconcile looks every ``reconcile_interval_s`` (2 s) at
the clouds anyway, so it tells the pool instead:

- the machines whose agents reported an assignment's end since its last look (each cloud's
  agents keep that list: :meth:`~corral.services.providers.base.NodeWork.ended_work`) wake
  their pool (:func:`.passes.wake`): the pass's sync finishes the job and places the queue;
- a pool's machine the clouds' answers show gone, dead, silent or being reclaimed has its
  pool's machines checked (:func:`.passes.check_machines`, a fresh look of its own), and the
  pool woken when that dropped any: its work is placed again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from corral.services.providers.base import TAG_POOL, ProviderInstance, node_work_of
from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import passes, work
from corral.services.runtime.pooled.kind_registry import kind_named
from corral.shared.lifecycle import InstanceState
from corral.shared.records import Instance

log = logging.getLogger("corral.pools")

PoolRows = dict[str, list[Instance]]  # pool name -> the rows of its machines that are up
# A retiring machine serves its work until its replacement does: its death counts too.
_SERVING = (InstanceState.RUNNING, InstanceState.RETIRING)


def pool_rows(deps: Deps) -> PoolRows:
    """Every pool's machines that came up, as its ledger counts them and the machine table
    holds them: read before the clouds are asked, so that a machine missing from their
    answers was up before the look."""
    out: PoolRows = {}
    for name in deps.pools.names():
        record = deps.pools.get(name)
        kind = kind_named(record.kind) if record is not None else None
        ledger = kind.ledgers(deps).get(name) if kind is not None else None
        if kind is None or ledger is None:
            continue
        rows = work.held_rows(deps, kind.machines(ledger).values()).values()
        out[name] = [r for r in rows if r.state in _SERVING and r.provider_id]
    return out


def notice(
    deps: Deps,
    rows: PoolRows,
    by_cloud: Mapping[str, Mapping[str, ProviderInstance]],
    counts: dict[str, int],
) -> list[str]:
    """Wake the pools whose work ended or whose machines died since the last look (``rows``:
    :func:`pool_rows`, read before ``by_cloud``, the clouds' answers); the pools woken."""
    owner = {(row.cloud, row.provider_id): name for name, found in rows.items() for row in found}
    ended: set[str] = set()
    for cloud, seen in by_cloud.items():
        agents = node_work_of(deps.provider(cloud))
        for provider_id in agents.ended_work() if agents is not None else ():
            pi = seen.get(provider_id)
            pool = owner.get((cloud, provider_id)) or (pi.tags.get(TAG_POOL) if pi else None)
            if pool is not None:
                ended.add(pool)
    dead = {
        name
        for name, found in rows.items()
        for row in found
        if row.cloud in by_cloud and passes.gone(by_cloud[row.cloud].get(str(row.provider_id)))
    }
    woken = []
    for name in sorted(ended | dead):
        record = deps.pools.get(name)
        if record is None:
            continue
        if name in dead and (lost := passes.check_machines(deps, record, kind_named(record.kind))):
            counts["pool_machines_lost"] += len(lost)
            ended.add(name)
        if name in ended and passes.wake(deps, name):
            woken.append(name)
    counts["pools_woken"] += len(woken)
    if woken:
        log.info("woke pool(s) %s: work ended or a machine died", ", ".join(woken))
    return woken
