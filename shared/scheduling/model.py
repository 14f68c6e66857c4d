"""What the schedulers read and what they decide: snapshots in, plans out.

Every type is a frozen pydantic model, so a snapshot or a plan travels as JSON
(``model_dump_json`` / ``model_validate_json``) between the scheduling workers, the store and
``corral why``. A plan carries the versions of the snapshot it was computed from
(``based_on``): the committer writes it only if those versions are still current
(compare-and-set) and otherwise recomputes from a fresh snapshot.

Times are seconds since the epoch, passed in; nothing here reads a clock. Priorities are
Corral's (higher wins) on the machine-pool side and Determined's (lower wins, 1-99, default
42) on the Determined side, as each system writes them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..placement import Market

WorkloadType = Literal["job", "service", "workspace"]
OnFull = Literal["fallback", "preempt"]
# pending: holds no machine; running: holds its machines; stopping: preempted, still holding
# machines it is giving back (neither placed again nor chosen as a victim again).
Phase = Literal["pending", "running", "stopping"]
# Why a workload waits, for `corral why`. Codes are stable; the text beside each says more.
PendingCode = Literal[
    "partition_full",  # every partition it may use is full
    "rule_denies",  # no partition's rules let it in (no rule matches, or priority 0)
    "quota_reached",  # its rule's quota is used up where there would be room
    "no_fitting_machine",  # it can never fit: no pool machine type, or more nodes than exist
    "preempted",  # it was preempted and is queued again at its original place
    "waiting_for_preemption",  # capacity is held for it while the work it preempted stops
    "stopping",  # it is giving its machines back after a preemption
    "over_budget",  # placing it would break a dollar budget (the reason names it)
    "backing_off",  # a machine of its last placement failed to launch: it waits, then falls back
]

DEFAULT_RULE_PRIORITY = 1  # a partition without rules, or a rule without a priority
DEFAULT_REPLACEMENT_THRESHOLD_S = 3600.0  # Anyscale's default replacement_threshold: 60 min


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- machine pools
class RuleSpec(_Frozen):
    """A partition rule: who (``selector``), how urgently (``priority``), how much (``quota``)."""

    selector: str | dict[str, str] = ""  # "" matches every workload
    priority: int | None = None  # higher wins; 0 shuts the workload out; None: 1
    quota: int | None = None  # machines of this partition its workloads may hold; None: no cap


class PartitionState(_Frozen):
    """One partition of a machine type: at most ``size`` machines, shared per ``rules``."""

    name: str
    size: int = Field(ge=0)
    rules: tuple[RuleSpec, ...] = ()  # none: anyone, at priority 1
    free_since: float | None = None  # since when it has had free room; None: full now


class MachineTypeState(_Frozen):
    """A machine type of the pool, its market, its idle limit and its partitions."""

    machine_type: str
    market: Market = "on_demand"
    max_idle_s: float | None = None  # recycle_policy.max_idle_duration; None: never reaped
    partitions: tuple[PartitionState, ...] = ()
    # Set by the pass's caller when every place its launch templates could launch a new
    # machine is blocked (shared.machine_walk.launch_blocked): until when, and the line
    # saying so. Its partitions then lend only their idle machines.
    launch_blocked_until: float | None = None
    launch_blocked_why: str | None = None


class Machine(_Frozen):
    """A machine of the pool, in one partition, held by at most one workload."""

    machine_id: str
    machine_type: str
    partition: str
    workload_id: str | None = None  # None: idle, warm, free for the partition's workloads
    idle_since: float | None = None  # when it last became idle


class Workload(_Frozen):
    """A job, service or workspace that wants ``num_nodes`` machines of the pool."""

    workload_id: str
    workload_type: WorkloadType = "job"
    labels: dict[str, str] = Field(default_factory=dict)  # `workload-type` is added from above
    priority: int = 0  # Corral's: higher wins
    preemptible: bool | None = None  # None: jobs yes, services and workspaces no
    on_full: OnFull = "fallback"
    num_nodes: int = Field(1, ge=1)
    group_order: tuple[str, ...] = ()  # machine types, most preferred first
    submitted_at: float  # its place in the queue; kept across preemptions
    started_at: float | None = None  # when it was last placed
    phase: Phase = "pending"
    preempted_by: str | None = None  # the workload that last preempted it
    enable_replacement: bool = False
    replacement_threshold_s: float = DEFAULT_REPLACEMENT_THRESHOLD_S
    last_replaced_at: float | None = None

    def is_preemptible(self) -> bool:
        """Its own setting, else the default of its type (jobs yes; services, workspaces no)."""
        return self.preemptible if self.preemptible is not None else self.workload_type == "job"

    def selector_labels(self) -> dict[str, str]:
        """The labels rules select on: its own plus ``workload-type``."""
        return {**self.labels, "workload-type": self.workload_type}


class Reservation(_Frozen):
    """Room in a partition held for one workload (the capacity its preemption frees)."""

    workload_id: str
    machine_type: str
    partition: str
    count: int = Field(ge=1)


class PoolSnapshot(_Frozen):
    """Everything a machine-pool scheduling pass reads, as of ``versions``."""

    pool: str
    versions: dict[str, int] = Field(default_factory=dict)  # what the committer compares
    machine_types: tuple[MachineTypeState, ...] = ()
    machines: tuple[Machine, ...] = ()
    workloads: tuple[Workload, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    replacements_in_flight: int = Field(0, ge=0)


class NodeAssignment(_Frozen):
    """One node of a workload: a machine of a partition (``machine_id`` None: launch one)."""

    machine_type: str
    partition: str
    machine_id: str | None = None


class Placement(_Frozen):
    """A workload placed: its nodes, best-ranked group first."""

    workload_id: str
    nodes: tuple[NodeAssignment, ...]
    reason: str


class Preemption(_Frozen):
    """A running workload to stop and requeue (keeping its place), and who it yields to."""

    workload_id: str
    preempted_by: str
    machine_ids: tuple[str, ...]
    reason: str


class Replacement(_Frozen):
    """Move one node of a workload up its group order. Steps, in this order: bring up
    ``bring_up`` and attach it to the workload; only then retire ``retire_machine_id``."""

    workload_id: str
    bring_up: NodeAssignment
    retire_machine_id: str
    retire_machine_type: str
    reason: str

    def steps(self) -> tuple[tuple[str, str, str | None], ...]:
        """The steps in the order they must be carried out: (action, machine type, machine id;
        None: a new machine)."""
        return (
            ("bring_up", self.bring_up.machine_type, self.bring_up.machine_id),
            ("retire", self.retire_machine_type, self.retire_machine_id),
        )


class Reap(_Frozen):
    """An idle machine to terminate."""

    machine_id: str
    machine_type: str
    reason: str


class Pending(_Frozen):
    """A workload left waiting, and why (from the decision itself)."""

    workload_id: str
    code: PendingCode
    reason: str
    preempted_by: str | None = None
    budget: str | None = None  # the budget holding it back (code over_budget)


class Plan(_Frozen):
    """What one machine-pool pass decided. ``reservations`` is the complete set after it."""

    pool: str
    based_on: dict[str, int]
    computed_at: float
    placements: tuple[Placement, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    replacements: tuple[Replacement, ...] = ()
    reaps: tuple[Reap, ...] = ()
    pending: tuple[Pending, ...] = ()

    def why(self, workload_id: str) -> str | None:
        """The plan's word on one workload (for ``corral why``); None if it says nothing."""
        items: list[Pending | Placement | Preemption | Replacement] = [
            *self.pending,
            *self.placements,
            *self.preemptions,
            *self.replacements,
        ]
        return next((i.reason for i in items if i.workload_id == workload_id), None)


# --------------------------------------------------------------------------- Determined pools
DETERMINED_DEFAULT_PRIORITY = 42
DetPendingCode = Literal[
    "pool_full",  # not enough free slots on any agent (or set of whole agents)
    "behind_higher_priority",  # a higher-priority task is blocked; lower ones only backfill
    "over_fair_share",  # its group already has its fair share of the pool
    "at_max_slots",  # its group holds as many slots as its max_slots lets it
    "waiting_for_preemption",  # slots are being freed for it
    "can_never_fit",  # the pool can never have the slots it asks for
    "no_such_pool",  # it names a pool the master config does not define
    "over_budget",  # starting it would break a dollar budget (the reason names it)
]


class SlotAllocation(_Frozen):
    """Slots of one agent held by one task (0 for an auxiliary, zero-slot task)."""

    agent_id: str
    slots: int = Field(ge=0)


class Agent(_Frozen):
    """A Determined agent: a machine with ``slots`` (GPUs, or CPU slots)."""

    agent_id: str
    slots: int = Field(ge=0)
    market: Market = "on_demand"
    idle_since: float | None = None  # when its last task ended; None while it runs one
    max_aux_containers: int | None = Field(None, ge=0)  # its own zero-slot limit; None: pool's


class DetTask(_Frozen):
    """A task of a Determined pool: an experiment's trial, a notebook, a TensorBoard, ..."""

    task_id: str
    group_id: str  # its job (experiment); fair share and round robin share among groups
    slots: int = Field(ge=0)
    priority: int | None = Field(None, ge=1, le=99)  # Determined's: lower wins; None: default
    weight: float = Field(1.0, gt=0)  # its group's fair-share weight
    # Its group's limit on slots held at once (Determined's resources.max_slots; None: none).
    # Tasks of one group that disagree: the smallest counts. Fair share only, as in Determined.
    max_slots: int | None = Field(None, gt=0)
    preemptible: bool = True
    submitted_at: float
    started_at: float | None = None
    allocations: tuple[SlotAllocation, ...] = ()  # empty: pending
    stopping: bool = False  # released by a preemption, still giving slots back
    fallback_pools: tuple[str, ...] = ()  # where it may go, in order, when its pool is full
    labels: dict[str, str] = Field(default_factory=dict)  # what label budgets select on
    blocked_agents: tuple[str, ...] = ()  # agents it must avoid (Determined's blocked nodes)

    def is_running(self) -> bool:
        """Whether it holds slots (or, zero-slot, an agent)."""
        return bool(self.allocations)


class DetScheduler(_Frozen):
    """A pool's effective scheduler (see ``shared.pools.pool_scheduler``)."""

    type: Literal["fair_share", "priority", "round_robin"] = "fair_share"
    fitting_policy: Literal["best", "worst"] = "best"
    preemption: bool = False  # the priority scheduler's; fair share always may release
    allow_heterogeneous_fits: bool = False  # a multi-agent task may mix agent sizes
    default_priority: int = Field(DETERMINED_DEFAULT_PRIORITY, ge=1, le=99)


class DetPoolSnapshot(_Frozen):
    """One Determined resource pool as a scheduling pass reads it."""

    pool: str
    versions: dict[str, int] = Field(default_factory=dict)
    scheduler: DetScheduler = Field(default_factory=DetScheduler)
    agents: tuple[Agent, ...] = ()
    tasks: tuple[DetTask, ...] = ()
    slots_per_agent: int | None = None  # the provider's instance_slots; None: from the agents
    max_agents: int | None = None  # the provider's max_instances; None: a static pool
    max_aux_containers_per_agent: int | None = None  # zero-slot tasks per agent; None: 100
    min_agents: int = 0  # the provider's min_instances (idle reaping keeps this many)
    max_idle_agent_s: float | None = None  # the provider's max_idle_agent_period


class TaskStart(_Frozen):
    """A task to start, on these agents, in ``pool`` (another pool when it fell back)."""

    task_id: str
    pool: str
    allocations: tuple[SlotAllocation, ...]
    reason: str


class TaskRelease(_Frozen):
    """A running task to preempt (release its slots), and for whom."""

    task_id: str
    preempted_by: str
    reason: str


class TaskPending(_Frozen):
    """A task left waiting (or refused: ``can_never_fit``), and why."""

    task_id: str
    code: DetPendingCode
    reason: str
    budget: str | None = None  # the budget holding it back (code over_budget)


class AgentReap(_Frozen):
    """An idle agent to terminate."""

    agent_id: str
    reason: str


class DetPlan(_Frozen):
    """What one pass over one Determined pool (and its fallbacks) decided."""

    pool: str
    based_on: dict[str, int]
    computed_at: float
    starts: tuple[TaskStart, ...] = ()
    releases: tuple[TaskRelease, ...] = ()
    pending: tuple[TaskPending, ...] = ()
    reaps: tuple[AgentReap, ...] = ()

    def why(self, task_id: str) -> str | None:
        """The plan's word on one task; None if it says nothing."""
        items: list[TaskPending | TaskStart | TaskRelease] = [
            *self.pending,
            *self.starts,
            *self.releases,
        ]
        return next((i.reason for i in items if i.task_id == task_id), None)
