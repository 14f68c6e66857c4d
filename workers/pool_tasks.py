"""Machine pool and Determined pool tasks: scheduling passes and syncs (queue ``schedule``),
machine and agent launches (queue ``provision.<cloud>``), and beat's rebalancing."""

from __future__ import annotations

from corral.services.queues import dispatch
from corral.services.runtime.deps import deps
from corral.services.runtime.pooled import launching, passes
from corral.workers.app import app


@app.task(name=dispatch.POOL_PASS, acks_late=True)
def pool_pass(pool: str, woken: bool = False) -> str:
    return passes.run_pass(deps(), pool, woken)


@app.task(name=dispatch.POOL_SYNC, acks_late=True)
def pool_sync(pool: str) -> str:
    return passes.sync(deps(), pool)


@app.task(name=dispatch.POOL_MACHINE, acks_late=True)
def pool_machine(pool: str, machine_id: str) -> str:
    return launching.launch_machine(deps(), pool, machine_id)


@app.task(name=dispatch.POOL_REBALANCE, acks_late=True, send_events=False)  # beat's
def pool_rebalance() -> dict[str, str]:
    return passes.rebalance_all(deps())
