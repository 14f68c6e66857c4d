"""Managed-job recovery, decided: whether a failed run restarts, where a recovered job goes
next, and what each run (and the whole request, over its recoveries) cost.

A *run* is one launch of the request's machines: one attempt that came up, from the launch
the cloud accepted to the machines' end (for pool work, one placement on the pool's
machines). A request has several when it was relaunched (its machine lost or reclaimed) or
restarted (its job failed and its ``job_recovery`` allows it).

Pure: the standard library and the records only; times are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .config.task import JobRecovery
from .lifecycle import InstanceState
from .records import ChainStep, Instance

EAGER_NEXT_REGION = "EAGER_NEXT_REGION"  # SkyPilot's default strategy


@dataclass(frozen=True)
class Restart:
    """A failed run restarts: ``counted`` against ``max_restarts_on_errors`` or not (an exit
    code the task lists in ``recover_on_exit_codes`` always restarts)."""

    counted: bool
    reason: str


def restart_after(
    policy: JobRecovery | None, exit_code: int, restarts_so_far: int
) -> Restart | None:
    """Whether a job whose run exited ``exit_code`` (non-zero) runs again; None: it fails."""
    if policy is None or exit_code == 0:
        return None
    if exit_code in policy.recover_on_exit_codes:
        return Restart(False, f"its job exited {exit_code}, listed in recover_on_exit_codes")
    if restarts_so_far < policy.max_restarts_on_errors:
        n = restarts_so_far + 1
        return Restart(
            True,
            f"its job exited {exit_code}; restart {n} of {policy.max_restarts_on_errors}"
            " (max_restarts_on_errors)",
        )
    return None


def recovery_chain(
    chain: Sequence[ChainStep], policy: JobRecovery | None, last_region: str | None
) -> list[ChainStep]:
    """The chain a recovered job is launched down. Without a policy, or without a region to
    move from, as planned. ``EAGER_NEXT_REGION`` (the default): the other regions first, the
    one it ran in last; ``FAILOVER``: its own region first, then the rest."""
    if policy is None or last_region is None:
        return list(chain)
    here = [c for c in chain if c.region == last_region]
    elsewhere = [c for c in chain if c.region != last_region]
    if (policy.strategy or EAGER_NEXT_REGION) == EAGER_NEXT_REGION:
        return elsewhere + here
    return here + elsewhere


@dataclass(frozen=True)
class Run:
    """One launch of a request's machines, as ``corral status`` shows it."""

    attempt_id: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    nodes: int
    started_at: float  # the cloud accepted the launch (billing starts)
    ended_at: float | None  # every machine ended; None while any runs
    outcome: str  # booting | running | exited N | lost | terminated
    cost_usd: float | None  # None when a machine's price is unknown

    def to_public(self) -> dict[str, object]:
        return {
            "attempt_id": self.attempt_id,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "market": self.market,
            "nodes": self.nodes,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
        }


def runs_of(instances: Iterable[Instance], now: float) -> list[Run]:
    """The request's runs, oldest first, from its instances (grouped by attempt)."""
    groups: dict[str, list[Instance]] = {}
    for inst in sorted(instances, key=lambda i: (i.created_at, i.node_index)):
        groups.setdefault(inst.placement or inst.attempt_id or inst.id, []).append(inst)
    return [_run(key, nodes, now) for key, nodes in groups.items()]


def total_cost(runs: Iterable[Run]) -> float | None:
    """The cost of every run, summed (None if any run's cost is unknown)."""
    costs = [r.cost_usd for r in runs]
    return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)


def _run(key: str, nodes: list[Instance], now: float) -> Run:
    first = nodes[0]
    ends = [_ended_at(i) for i in nodes]  # a run has ended once every machine has
    ended_at = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    costs = [_cost(i, now) for i in nodes]
    return Run(
        attempt_id=key,
        cloud=first.cloud,
        region=first.region,
        zone=first.zone,
        instance_type=first.instance_type,
        market=first.market,
        nodes=len(nodes),
        started_at=min(i.created_at for i in nodes),
        ended_at=ended_at,
        outcome=_outcome(nodes),
        cost_usd=None if any(c is None for c in costs) else sum(c for c in costs if c),
    )


# A machine is billed until it is gone; a LOST one is terminated as it is found lost.
_BILLED_UNTIL = frozenset({InstanceState.TERMINATED, InstanceState.FAILED, InstanceState.LOST})


def _ended_at(inst: Instance) -> float | None:
    """When the machine stopped being billed (None while it still is)."""
    if inst.state not in _BILLED_UNTIL:
        return None
    ends = {s.value for s in _BILLED_UNTIL}
    return next((t.at for t in inst.history if t.to_state in ends), inst.updated_at)


def _cost(inst: Instance, now: float) -> float | None:
    """What the machine cost from the launch to its end (or ``now``)."""
    price = getattr(inst, "price_usd_per_hour", None)
    if price is None:
        return None
    end = _ended_at(inst)
    return float(price) * max(0.0, (now if end is None else end) - inst.created_at) / 3600.0


def _outcome(nodes: list[Instance]) -> str:
    states = {i.state for i in nodes}
    if InstanceState.LOST in states:
        return "lost"
    codes = [i.exit_code for i in nodes if i.exit_code is not None]
    ended = all(i.state in _BILLED_UNTIL for i in nodes)
    if codes and ended:
        return f"exited {next((c for c in codes if c != 0), 0)}"
    if ended:
        return "terminated"
    if states & {InstanceState.RUNNING, InstanceState.TERMINATING}:
        return "running"
    return "booting"
