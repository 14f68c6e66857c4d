"""The scheduling core: pure passes from a snapshot to a plan.

- Machine pools (:mod:`.machine_pools`): partitions and their rules, placement along a
  workload's group order, priority and preemption, replacement, idle reaping, and a reason
  for every workload left waiting. :func:`schedule` is the pass; :func:`apply_plan` and
  :func:`release` are what committing it and giving machines back do to the state.
- Determined resource pools (:mod:`.determined`): fair_share, priority and round_robin with
  best or worst fitting, fallback pools, and :func:`can_ever_fit`.

Inputs and outputs are frozen pydantic models (:mod:`.model`) that travel as JSON; a plan
carries the versions of its snapshot, for the committer's compare-and-set. Clocks (``now``)
and ids come in as arguments.
"""

from .apply import apply_plan, release
from .determined import schedule_pool, schedule_pools
from .fair_share import fair_shares
from .fitting import FitVerdict, can_ever_fit
from .machine_pools import schedule
from .model import (
    Agent,
    DetPlan,
    DetPoolSnapshot,
    DetScheduler,
    DetTask,
    Machine,
    MachineTypeState,
    PartitionState,
    Pending,
    Placement,
    Plan,
    PoolSnapshot,
    Preemption,
    Replacement,
    Reservation,
    RuleSpec,
    SlotAllocation,
    Workload,
)
from .selectors import Selector, compile_selector

__all__ = [
    "Agent",
    "DetPlan",
    "DetPoolSnapshot",
    "DetScheduler",
    "DetTask",
    "FitVerdict",
    "Machine",
    "MachineTypeState",
    "PartitionState",
    "Pending",
    "Placement",
    "Plan",
    "PoolSnapshot",
    "Preemption",
    "Replacement",
    "Reservation",
    "RuleSpec",
    "Selector",
    "SlotAllocation",
    "Workload",
    "apply_plan",
    "can_ever_fit",
    "compile_selector",
    "fair_shares",
    "release",
    "schedule",
    "schedule_pool",
    "schedule_pools",
]
