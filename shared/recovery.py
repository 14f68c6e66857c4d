"""Recovery, decided: whether a failed run restarts, whether a request whose machine was lost
is launched again and down which chain (the runtime's reconcile and the simulator both ask
:func:`relaunch_after_loss`), and what each run (and the whole request, over its recoveries)
cost.

A *run* is one launch of the request's machines: one attempt that came up, from the launch
the cloud accepted to the machines' end (for pool work, one placement on the pool's
machines). A request has several when it was relaunched (its machine lost or reclaimed) or
restarted (its job failed and its ``job_recovery`` allows it).

Pure: the standard library and the records only; times are passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from .config.task import JobRecovery
from .lifecycle import InstanceState
from .placement import Placed, Placement
from .records import Instance

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


Step = TypeVar("Step", bound=Placed)  # a ChainStep or a planner Candidate


def recovery_chain(
    chain: Sequence[Step], policy: JobRecovery | None, last_region: str | None
) -> list[Step]:
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
class Loss:
    """A machine a running request lost, as the relaunch decision reads it: where it ran and
    how long it had been up (from its launch to its loss). ``region`` None: unknown."""

    cloud: str
    region: str | None
    zone: str
    ran_s: float


@dataclass(frozen=True)
class Relaunch(Generic[Step]):
    """A lost machine's request goes down ``chain`` again; ``in_a_row``: its losses in a row
    so far, this one included (what ``relaunch_limit`` bounds)."""

    chain: list[Step]
    in_a_row: int


def relaunch_after_loss(
    planned: Sequence[Step],
    policy: JobRecovery | None,
    loss: Loss,
    *,
    lost_zones: Collection[tuple[str, str]] = (),
    in_a_row: int,
    limit: int | None,
    reset_s: float,
) -> Relaunch[Step] | str:
    """Whether and where a request whose machine was lost is launched again; a string: why
    it fails instead.

    Whether: ``relaunch_limit`` bounds the losses *in a row*: a loss of a machine that stayed
    up ``reset_s`` or longer (it ran long enough to be worth running again) starts the count
    over. A request whose machines keep dying at boot or within minutes (a crash loop, a spot
    market reclaiming everything) fails after ``limit`` relaunches; a long job that loses a
    spot machine every hour or two runs to its end. A task with a ``job_recovery`` is
    recovered from every loss (``in_a_row`` still counted, for the record).

    Where: :func:`recovery_chain` (a ``job_recovery`` strategy orders the regions), then every
    zone it lost a machine in (``lost_zones`` as (cloud, zone), and this ``loss``'s) at the
    end of its chain: a request that keeps losing machines moves on to other zones and clouds
    before it tries one that took a machine from it again. Tried last, never blocked: one
    request's history does not close a zone for everyone."""
    if not planned:
        return "no candidate left"
    before = 0 if loss.ran_s >= reset_s else in_a_row
    if policy is None and limit is not None and before >= limit:
        return "relaunch limit reached"
    avoid = {*lost_zones, (loss.cloud, loss.zone)}
    chain = recovery_chain(planned, policy, loss.region)
    chain.sort(key=lambda c: (c.cloud, c.zone) in avoid)  # stable: the rest keep their order
    return Relaunch(chain, before + 1)


@dataclass(frozen=True)
class Run:
    """One launch of a request's machines (at one place), as ``corral status`` shows it."""

    attempt_id: str
    place: Placement
    nodes: int
    started_at: float  # the cloud accepted the launch (billing starts)
    ended_at: float | None  # every machine ended; None while any runs
    outcome: str  # booting | running | exited N | lost | terminated
    cost_usd: float | None  # None when a machine's price is unknown

    def to_public(self) -> dict[str, object]:
        return {
            "attempt_id": self.attempt_id,
            **self.place.fields(),
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
    ends = [i.billed_until() for i in nodes]  # a run has ended once every machine has
    ended_at = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    costs = [_cost(i, now) for i in nodes]
    return Run(
        attempt_id=key,
        place=first.place,
        nodes=len(nodes),
        started_at=min(i.created_at for i in nodes),
        ended_at=ended_at,
        outcome=_outcome(nodes),
        cost_usd=None if any(c is None for c in costs) else sum(c for c in costs if c),
    )


# The states a run's machine has ended in, for its outcome (its bill: Instance.billed_until).
_ENDED = frozenset({InstanceState.TERMINATED, InstanceState.FAILED, InstanceState.LOST})


def _cost(inst: Instance, now: float) -> float | None:
    """What the machine cost from the launch to its end (or ``now``)."""
    price = getattr(inst, "price_usd_per_hour", None)
    if price is None:
        return None
    end = inst.billed_until()
    return float(price) * max(0.0, (now if end is None else end) - inst.created_at) / 3600.0


def _outcome(nodes: list[Instance]) -> str:
    states = {i.state for i in nodes}
    if InstanceState.LOST in states:
        return "lost"
    codes = [i.exit_code for i in nodes if i.exit_code is not None]
    ended = all(i.state in _ENDED for i in nodes)
    if codes and ended:
        return f"exited {next((c for c in codes if c != 0), 0)}"
    if ended:
        return "terminated"
    if states & {InstanceState.RUNNING, InstanceState.TERMINATING}:
        return "running"
    return "booting"
