"""A simulated day for each policy, over the same scenario and workload, and the figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .corral import CorralPolicy, CorralWideBlocksPolicy
from .engine import Policy, Sim, SimTimers
from .metrics import series, summary
from .peers import GreedyPolicy, OraclePolicy, StaticPolicy
from .reserved import reserved_demand
from .scenario import Scenario
from .workload import Workload

POLICIES = ("corral", "greedy", "static", "oracle")
# Played only when asked for: Corral with the blocks of before issue #46, for comparison.
EXTRA_POLICIES = ("corral-wide-blocks",)


def make_policy(name: str, workload: Workload) -> Policy:
    """One of :data:`POLICIES` or :data:`EXTRA_POLICIES`."""
    kinds: dict[str, type[Any]] = {
        "corral": CorralPolicy,
        "corral-wide-blocks": CorralWideBlocksPolicy,
        "greedy": GreedyPolicy,
        "static": StaticPolicy,
        "oracle": OraclePolicy,
    }
    policy: Policy = kinds[name](workload)
    return policy


@dataclass
class PolicyRun:
    """One policy's day: its figures, its series, and the events it took."""

    name: str
    figures: dict[str, Any]
    series: dict[str, Any]
    events: int


def run_policy(
    scenario: Scenario,
    workload: Workload,
    name: str,
    timers: SimTimers | None = None,
    *,
    check_skips: bool = False,
) -> PolicyRun:
    """Play the day once under one policy (``check_skips``: see :class:`Sim`)."""
    sim = Sim(
        scenario,
        workload.arrivals,
        timers or SimTimers(),
        check_skips=check_skips,
        reserved_demand=reserved_demand(workload, scenario),
    )
    recorder = sim.run(make_policy(name, workload))
    figures = summary(name, recorder, template_names(workload))
    return PolicyRun(name, figures, series(recorder), sim.events_run)


def template_names(workload: Workload) -> dict[str, str]:
    """Each arrival's template: its task's name, or ``ray:<cluster>``."""
    return {
        a.id: f"ray:{a.ray.cluster}"
        if a.ray is not None
        else (a.task.name if a.task else None) or "unnamed"
        for a in workload.arrivals
    }
