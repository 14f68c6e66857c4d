"""Machine pools and Determined resource pools on the simulated cloud, through the passes the
runtime's scheduling worker runs (:mod:`corral.shared.scheduling.pool_passes`) and the ledger
steps its sync and boot watch take (``machine_up``, ``machine_failed``, ``release``, ...).

What the runtime's sync carries out, the simulator does at once: machines to launch are
launched (a pool's launch templates in order, each in the zones that offer it; a reserved
template in its reservation's zone), preempted work gives its machines back, finished work is
released, reaped and retired machines are terminated. A pool's passes coalesce within
``pass_coalesce_s``; beat's rebalancing pass (replacement, idle reaping) runs every
``pool_rebalance_interval_s``.

A pass that is known to decide nothing is skipped (:mod:`corral.shared.scheduling.quiet`): the
last pass was settled, nothing touched the ledger since, and no time threshold a decision
compares against was crossed. A skipped pass still counts a version, so the machines' ids (and
the seeded draws keyed on them) are those of a run that skips nothing; with
``Sim.check_skips`` the skipped passes are run anyway and must find nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import attrgetter, eq, itemgetter
from typing import Any, Generic, TypeVar

from ..budgets import Budget
from ..config.compute_config import ComputeConfig
from ..config.machine_pool import LaunchTemplate, MachinePool
from ..config.master_config import MasterConfig
from ..config.task import Task
from ..errors import ProviderError
from ..failover_plan import Attempt
from ..lifecycle import AgentStatus
from ..machine_walk import BlockRule, Laid, LaunchBlocked, MachineWalk, launch_blocked, lay_out
from ..placement import Block, Placement
from ..reservations import reservation_of
from ..resource_pools import resolve_pools
from ..routing import pool_limits
from ..scheduling.build import machine_types_of, with_launch_blocks, workload_of
from ..scheduling.det_ledger import DetLedger, add_task, agent_lost, release_task
from ..scheduling.det_pool_state import HOLDS_SLOTS
from ..scheduling.fallback import PASS_AFTER_S, FallbackPolicy
from ..scheduling.ledger import (
    PoolLedger,
    add_workload,
    machine_failed,
    machine_gone,
    machine_up,
    release,
)
from ..scheduling.model import DetTask, Plan
from ..scheduling.pool_passes import (
    Costing,
    PassKnobs,
    determined_pass,
    machine_pool_pass,
    machine_type_prices,
    slot_prices,
)
from ..scheduling.quiet import (
    determined_quiet_until,
    determined_settled,
    machine_pool_quiet_until,
    machine_pool_settled,
    rebalancing_quiet_after_plain,
)
from .cloud import SimInstance
from .direct import BlockMemory
from .engine import Sim

LedgerT = TypeVar("LedgerT", PoolLedger, DetLedger)
_FIELDS = attrgetter("__dict__")  # a model's fields as stored (read at C speed)
_PHASE = itemgetter("phase")
_STOPPING = attrgetter("stopping")


class _Pooled(Generic[LedgerT]):
    """What both kinds share: coalesced passes, launching one machine, instances by id."""

    ledger: LedgerT

    def __init__(self, sim: Sim, name: str, cloud: str, memory: BlockMemory | None = None,
                 block_rule: BlockRule = Block.for_error) -> None:  # fmt: skip
        self.sim, self.name, self.cloud = sim, name, cloud
        # The blocks every launch shares (a direct request's too), and what a refusal blocks.
        self.memory = memory if memory is not None else BlockMemory()
        self.block_rule = block_rule
        self.instances: dict[str, SimInstance] = {}  # machine id -> its instance
        self.machine_of: dict[str, str] = {}  # instance id -> machine id
        self.launching: set[str] = set()
        self.pass_due: float | None = None
        self.retry_at = 0.0  # a failed agent launch (Determined): the next pass waits for beat
        self.changed = True  # the ledger was touched since the last pass
        # After a settled pass: until when a pass of each kind (rebalancing or not) is quiet.
        self.quiet_until: dict[bool, float] = {}
        self.skipped = 0
        self.checking = False  # this pass would have been skipped: it must decide nothing

    def dirty(self, delay_s: float | None = None) -> None:
        """The ledger was touched: ask for a pass soon (passes asked for within
        ``pass_coalesce_s`` run once)."""
        self.changed = True
        at = max(self.sim.now + (delay_s or self.sim.timers.pass_coalesce_s), self.retry_at)
        if self.pass_due is None or at < self.pass_due:
            self.pass_due = at
            self.sim.at(at, self._due, at)

    def _due(self, at: float) -> None:
        if self.pass_due == at:
            self.pass_due = None
            self.run_pass(rebalance=False)

    def rebalance(self) -> None:
        self.run_pass(rebalance=True)
        self.sim.after(self.sim.timers.pool_rebalance_interval_s, self.rebalance)

    def run_pass(self, *, rebalance: bool) -> None:
        raise NotImplementedError

    def quiet(self, *, rebalance: bool) -> bool:
        """Whether this pass is known to decide nothing (see the module docstring); a quiet
        pass is skipped, counting its version, unless the simulation checks skips."""
        quiet = not self.changed and self.sim.now < self.quiet_until.get(rebalance, -1.0)
        if quiet and not self.sim.check_skips:
            self.ledger.version += 1
            self.skipped += 1
            return True
        if self.changed:
            self.quiet_until.clear()  # said of a ledger that is no longer this one
        self.checking = quiet
        self.changed = False  # from here, what sync and the events do counts for the next
        return False

    def finish(
        self, settled: bool, until: dict[bool, float], notes_same: Callable[[], bool]
    ) -> None:
        """After a pass: quiet until ``until`` (per kind) if it was settled; then sync.
        ``notes_same``: whether the pass left every note as it was (asked only of a pass
        that would have been skipped: comparing hundreds of notes costs)."""
        if self.checking and not (settled and notes_same()):
            raise AssertionError(f"{self.name}: a pass skipped at {self.sim.now} would decide")
        if settled:
            self.quiet_until.update(until)
        else:
            self.quiet_until.clear()
            self.changed = True
        self.sync()
        if self.checking and self.changed:
            raise AssertionError(f"{self.name}: a pass skipped at {self.sim.now} would act")

    def sync(self) -> None:
        raise NotImplementedError

    def lost(self, inst: SimInstance) -> bool:
        raise NotImplementedError

    def launch_one(
        self, machine_id: str, templates: list[LaunchTemplate], gpus_of: Callable[[str], int]
    ) -> SimInstance | None:
        """One machine in the first place of its launch order that takes it, walked as the
        runtime's ``launch_pooled`` walks (:class:`~corral.shared.machine_walk.MachineWalk`)
        over the blocks every launch shares: blocked places passed over, refusals remembered."""
        now = self.sim.now
        walk = MachineWalk.of(
            self.cloud,
            templates,
            self.zones,
            self.memory.active_until(now),
            accelerator_of=self.accelerator,
            rule=self.block_rule,
        )
        while isinstance(step := walk.next(), Attempt):
            at = walk.places[step.index]
            place = Placement(
                self.cloud, at.region, at.zone, at.instance_type, at.launch_market, at.reservation
            )
            key = f"{self.name}/{machine_id}/{at.zone}/{at.instance_type}"
            try:
                inst = self.sim.cloud.launch(place, now, key, gpus_of(at.instance_type))
            except ProviderError as exc:
                block = walk.failed(step.index, exc)
                if block is not None:
                    self.memory.add(block, now, self.sim.timers.blocked_ttl_s)
                continue
            self.instances[machine_id] = inst
            self.machine_of[inst.iid] = machine_id
            self.sim.launched(inst)
            return inst
        return None

    def zones(self, template: LaunchTemplate) -> list[tuple[str, str]]:
        """Where the catalog offers a template's type (a reservation's zone alone), as the
        runtime's ``launch.zones_for`` asks its provider (the walk keeps the template's own
        ``zones`` of them)."""
        reservation = reservation_of(template.advanced_instance_config)
        if reservation is not None:
            res = self.sim.cloud.reservations.get(reservation)
            if res is None:
                return []
            return [(res.zone, self.sim.cloud.regions[(res.cloud, res.zone)])]
        offered = self.sim.catalog.instance_type(self.cloud, template.instance_type)
        return [(o.zone, o.region) for o in offered]

    def accelerator(self, instance_type: str) -> str | None:
        found = self.sim.catalog.instance_type(self.cloud, instance_type)
        return found[0].accelerator if found else None

    def gpus(self, instance_type: str) -> int:
        found = self.sim.catalog.instance_type(self.cloud, instance_type)
        return found[0].accelerator_count if found else 0

    def end_machine(self, machine_id: str) -> None:
        inst = self.instances.pop(machine_id, None)
        if inst is not None:
            self.machine_of.pop(inst.iid, None)
            self.sim.cloud.end(inst, self.sim.now)


class MachinePoolSim(_Pooled[PoolLedger]):
    """One registered machine pool."""

    def __init__(
        self,
        sim: Sim,
        name: str,
        pool: MachinePool,
        cloud: str,
        budgets: tuple[Budget, ...],
        memory: BlockMemory | None = None,
        block_rule: BlockRule = Block.for_error,
    ) -> None:
        super().__init__(sim, name, cloud, memory, block_rule)
        self.pool = pool
        self.types = machine_types_of(pool)
        self.ledger = PoolLedger(pool=name)
        self.knobs = PassKnobs.of(sim.timers)
        self.costing = (
            Costing(budgets, machine_type_prices(pool, cloud, sim.catalog)) if budgets else None
        )
        self.started: set[str] = set()
        # The machine types as the last pass saw them: which launched nothing new (all blocked).
        self.seen_blocked: tuple[tuple[float | None, str | None], ...] = ()
        self.blocks_seen = -1  # the count of the cloud's block changes types_now was made at
        self.types_now = self.types
        # Each machine type's launch order laid out on the cloud (the pool's file is fixed for
        # the day): by the templates' identity, with them (kept alive).
        self.laid: dict[int, tuple[Sequence[LaunchTemplate], Laid]] = {}

    def add(self, rid: str, task: Task) -> None:
        compute = task.compute_config
        assert isinstance(compute, ComputeConfig)
        workload = workload_of(
            task, compute, workload_id=rid, pool_name=self.name, submitted_at=self.sim.now
        )
        add_workload(self.ledger, workload)
        self.dirty()

    def waiting(self) -> int:
        return sum(w.phase == "pending" for w in self.ledger.workloads.values())

    def run_pass(self, *, rebalance: bool) -> None:
        # As the runtime's pass: a machine type whose every place is blocked books no new
        # machine (a workload placed there would only fail its launch and back off). A
        # change in which are blocked is a change for the pass, as a ledger's is.
        blocks = self.memory.active_until(self.sim.now)
        # Worked out again only when this cloud's blocks changed (no other's can refuse it).
        if self.blocks_seen != self.memory.changes_of[self.cloud]:
            self.blocks_seen = self.memory.changes_of[self.cloud]
            self.types_now = with_launch_blocks(
                self.types, self.pool, lambda t: self._launch_blocked(t, blocks)
            )
        types = self.types_now
        seen = tuple((t.launch_blocked_until, t.launch_blocked_why) for t in types)
        if seen != self.seen_blocked:
            self.seen_blocked = seen
            self.changed = True
        if self.quiet(rebalance=rebalance):
            return
        before = self.ledger
        version = before.version

        def new_id(node: Any, wid: str, index: int) -> str:
            return f"m-{self.name}-{version}-{wid}-{index}"

        after, plan = machine_pool_pass(
            before,
            types,
            self.sim.now,
            self.knobs,
            rebalance=rebalance,
            new_id=new_id,
            costing=self.costing,
        )
        after.version = version + 1
        self.ledger = after
        self._count(plan)
        settled = machine_pool_settled(before, after, plan)
        if settled:
            now, knobs, costing = self.sim.now, self.knobs, self.costing
            until = {
                kind: machine_pool_quiet_until(
                    after, types, now, knobs, rebalance=kind, costing=costing
                )
                for kind in ((True, False) if rebalance else (False,))
            }
            if not rebalance:  # beat's next pass over this ledger may be quiet too
                until[True] = rebalancing_quiet_after_plain(after, types, now, knobs, until[False])
        self.finish(settled, until if settled else {}, lambda: after.notes == before.notes)

    def _launch_blocked(
        self, templates: Sequence[LaunchTemplate], blocks: Sequence[tuple[Block, float]]
    ) -> LaunchBlocked | None:
        kept = self.laid.get(id(templates))
        if kept is None:
            laid = lay_out(self.cloud, templates, self.zones, self.accelerator)
            kept = self.laid[id(templates)] = (templates, laid)
        return launch_blocked(
            self.cloud, templates, self.zones, blocks, accelerator_of=self.accelerator,
            laid=kept[1],
        )  # fmt: skip

    def _count(self, plan: Plan) -> None:
        rec = self.sim.recorder
        rec.scheduler_preemptions += len(plan.preemptions)
        rec.replacements += len(plan.replacements)
        for p in plan.preemptions:
            rec.requests[p.workload_id].evictions += 1

    def sync(self) -> None:
        """Carry the ledger out (the runtime's ``sync``)."""
        now = self.sim.now
        workloads = self.ledger.workloads
        phases = map(_PHASE, map(_FIELDS, workloads.values()))
        for wid in list(compress(workloads, map(eq, phases, repeat("stopping")))):
            self.sim.work_stop(wid)
            self.started.discard(wid)
            release(self.ledger, wid, now)
            self.dirty()
        for mid, machine in list(self.ledger.machines.items()):
            if machine.status == "launching" and mid not in self.launching:
                self._launch(mid)
            elif machine.status == "reaping":
                self.end_machine(mid)
                machine_gone(self.ledger, mid)
                self.changed = True
            elif machine.status == "retiring":
                self.end_machine(mid)
                machine_gone(self.ledger, mid)
                self.changed = True
                for other in self.ledger.machines.values():
                    if other.replaces == mid:
                        other.replaces = None
        self._start_ready()

    def _launch(self, mid: str) -> None:
        machine = self.ledger.machines[mid]
        found = self.pool.machine(machine.machine_type)
        templates = list(found.launch_templates) if found else []
        inst = self.launch_one(mid, templates, self.gpus)
        if inst is None:
            # As the runtime's provisioning step: the setback decided in the ledger, a pass
            # now (the machines that came up are free for others) and one when its pause ends.
            policy = FallbackPolicy.of(self.sim.timers)
            wid = machine_failed(self.ledger, mid, self.sim.now, policy=policy, why="no capacity")
            self.changed = True
            if wid is not None:
                self.started.discard(wid)
            setback = self.ledger.setbacks.get(machine.workload_id or "")
            if wid is not None and setback is not None and setback.retry_at > self.sim.now:
                self.sim.at(setback.retry_at + PASS_AFTER_S, self.dirty)
            self.dirty()
            return
        self.launching.add(mid)
        self.sim.at(inst.up_at, self._up, mid, inst)

    def _up(self, mid: str, inst: SimInstance) -> None:
        self.launching.discard(mid)
        if inst.ended_at is not None or mid not in self.ledger.machines:
            return
        machine_up(self.ledger, mid)  # where it is: its instance, the sim's table
        self.sync()
        self.dirty()

    def _start_ready(self) -> None:
        serving = self.ledger.machines_by_workload()
        workloads = self.ledger.workloads
        # Only a workload with machines can start or be handed one: those are picked out
        # of the queue at C speed, in its order.
        for wid in list(filter(serving.__contains__, workloads)):
            workload = workloads[wid]
            if workload.phase != "running":
                continue
            nodes = [m for m in serving.get(wid, ()) if m.status != "retiring"]
            insts = [self.instances.get(m.machine_id) for m in nodes]
            for inst in insts:
                if inst is not None and inst.owner != wid:
                    self.sim.cloud.hand_to(inst, wid, self.sim.now)
            if wid in self.started or len(nodes) < workload.num_nodes:
                continue
            if all(m.status == "up" for m in nodes):
                self.started.add(wid)
                self.sim.work_start(wid, sum(i.gpus for i in insts if i is not None))

    def done(self, wid: str) -> None:
        for machine in self.ledger.machines_of(wid):
            inst = self.instances.get(machine.machine_id)
            if inst is not None:
                self.sim.cloud.hand_to(inst, None, self.sim.now)
        self.started.discard(wid)
        release(self.ledger, wid, self.sim.now, finished=True)
        self.dirty()

    def lost(self, inst: SimInstance) -> bool:
        """A machine the cloud took back: it leaves the pool, its work is queued again."""
        mid = self.machine_of.pop(inst.iid, None)
        if mid is None:
            return False
        self.instances.pop(mid, None)
        self.launching.discard(mid)
        machine = self.ledger.machines.pop(mid, None)
        wid = machine.workload_id if machine else None
        if wid and wid in self.ledger.workloads and not (machine and machine.replaces):
            self.sim.work_stop(wid)
            self.started.discard(wid)
            release(self.ledger, wid, self.sim.now)
        self.dirty()
        return True


class DeterminedSim(_Pooled[DetLedger]):
    """The registered master config: every resource pool, agents grown for waiting tasks."""

    def __init__(
        self,
        sim: Sim,
        name: str,
        master: MasterConfig,
        budgets: tuple[Budget, ...],
        memory: BlockMemory | None = None,
        block_rule: BlockRule = Block.for_error,
    ) -> None:
        super().__init__(sim, name, "", memory, block_rule)
        self.pools = resolve_pools(master)
        self.limits = pool_limits(self.pools, sim.catalog)
        self.ledger = DetLedger(master=name)
        self.costing = (
            Costing(budgets, slot_prices(self.pools, self.limits, sim.catalog)) if budgets else None
        )
        self.started: set[str] = set()
        self.markets: dict[str, str] = {}  # an up agent's market (its instance's place)
        # The pools whose every agent place is blocked, as the last pass saw them.
        self.blocked: dict[str, LaunchBlocked] = {}
        # Where each pool with a provider launches its agents, and the counts of its clouds'
        # block changes ``blocked`` was worked out at.
        self.orders = {p: o for p in self.pools.names() if (o := self._order(p)) is not None}
        self.blocks_seen: tuple[int, ...] = ()

    def add(self, rid: str, task: Task, pool: str) -> None:
        det = DetTask(
            task_id=rid,
            group_id=task.labels.get("experiment", rid),
            slots=task.slots(),
            priority=task.resources.priority,
            preemptible=not (task.scheduling and task.scheduling.preemptible is False),
            submitted_at=self.sim.now,
            fallback_pools=tuple(task.scheduling.fallback_pools if task.scheduling else ()),
            labels=dict(task.labels),
        )
        add_task(self.ledger, det, pool)
        self.dirty()

    def waiting(self) -> int:
        return sum(not t.allocations for t in self.ledger.tasks.values())

    def run_pass(self, *, rebalance: bool) -> None:
        # As the runtime's pass: a pool whose every agent place is blocked grows by no agent
        # (it would only fail its launch); a change in which are is a change for the pass.
        blocks = self.memory.active_until(self.sim.now)  # the expired forgotten, counted
        seen = tuple(self.memory.changes_of[cloud] for cloud, _ in self.orders.values())
        if self.blocks_seen != seen:  # worked out again only when its clouds' blocks changed
            self.blocks_seen = seen
            blocked = {}
            for pool, (cloud, template) in self.orders.items():
                self.cloud = cloud
                found = launch_blocked(
                    cloud, [template], self.zones, blocks, accelerator_of=self.accelerator
                )
                if found is not None:
                    blocked[pool] = found
            if blocked != self.blocked:
                self.blocked = blocked
                self.changed = True
        # Determined's pass is the same either way (it reaps idle agents every time).
        if self.quiet(rebalance=False):
            return
        before = self.ledger
        version = before.version

        def new_id(pool: str, index: int) -> str:
            return f"a-{self.name}-{version}-{pool}-{index}"

        after, plans = determined_pass(
            before,
            self.pools,
            self.limits,
            self.sim.now,
            new_id=new_id,
            costing=self.costing,
            markets=self.markets,
            launch_blocked=self.blocked,
        )
        after.version = version + 1
        self.ledger = after
        for plan in plans:
            self.sim.recorder.scheduler_preemptions += len(plan.releases)
            for rel in plan.releases:
                self.sim.recorder.requests[rel.task_id].evictions += 1
        settled = determined_settled(before, after, plans)
        until = determined_quiet_until(
            after,
            self.limits,
            self.sim.now,
            pools=self.pools.names(),
            costing=self.costing,
            blocked_until=[b.until for b in self.blocked.values()],
        )
        self.finish(settled, {False: until}, lambda: after.notes == before.notes)

    def sync(self) -> None:
        now = self.sim.now
        tasks = self.ledger.tasks  # the stopping picked out at C speed: most tasks wait
        for tid in list(compress(tasks, map(_STOPPING, tasks.values()))):
            self.sim.work_stop(tid)
            self.started.discard(tid)
            release_task(self.ledger, tid, now, finished=False)
            self.dirty()
        for aid, agent in list(self.ledger.agents.items()):
            if agent.status == AgentStatus.LAUNCHING and aid not in self.launching:
                self._launch(aid)
            elif agent.status == AgentStatus.REAPING:
                self.end_machine(aid)
                self.ledger.agents.pop(aid, None)
                self.changed = True
        self._start_ready()

    def _order(self, pool: str) -> tuple[str, LaunchTemplate] | None:
        """Where a pool's agents launch: its provider's cloud and instance type (None: a
        static pool, started by hand)."""
        provider = self.pools.pool(pool).provider
        if not provider:
            return None
        instance = provider.get("instance_type")
        if isinstance(instance, dict):
            instance = instance.get("machine_type")
        template = LaunchTemplate(
            instance_type=str(instance), market_type="SPOT" if provider.get("spot") else "ON_DEMAND"
        )
        return str(provider.get("type") or ""), template

    def _launch(self, aid: str) -> None:
        agent = self.ledger.agents[aid]
        self.cloud, template = self.orders[agent.pool]  # only a pool with a provider grows
        inst = self.launch_one(aid, [template], self.gpus)
        if inst is None:
            agent_lost(self.ledger, aid, self.sim.now)
            self.retry_at = self.sim.now + self.sim.timers.pool_rebalance_interval_s
            self.dirty()
            return
        self.launching.add(aid)
        self.sim.at(inst.up_at, self._up, aid, inst)

    def _up(self, aid: str, inst: SimInstance) -> None:
        self.launching.discard(aid)
        agent = self.ledger.agents.get(aid)
        if inst.ended_at is not None or agent is None or agent.status != AgentStatus.LAUNCHING:
            return
        agent.move(AgentStatus.UP)
        self.markets[aid] = inst.place.market  # the sim's machine table: its instance's place
        agent.idle_since = self.sim.now
        self.sync()
        self.dirty()

    def _start_ready(self) -> None:
        tasks = self.ledger.tasks  # those holding slots picked out at C speed: most wait
        for tid in list(compress(tasks, map(HOLDS_SLOTS, tasks.values()))):
            task = tasks[tid]
            if tid in self.started or task.stopping:
                continue
            agents = [self.ledger.agents.get(a.agent_id) for a in task.allocations]
            if all(a is not None and a.status == AgentStatus.UP for a in agents):
                self.started.add(tid)
                for a in task.allocations:
                    inst = self.instances.get(a.agent_id)
                    if inst is not None and inst.owner is None:
                        self.sim.cloud.hand_to(inst, tid, self.sim.now)
                self.sim.work_start(tid, task.slots)

    def done(self, tid: str) -> None:
        task = self.ledger.tasks.get(tid)
        for a in task.allocations if task else ():
            inst = self.instances.get(a.agent_id)
            if inst is not None and inst.owner == tid:
                self.sim.cloud.hand_to(inst, None, self.sim.now)
        self.started.discard(tid)
        release_task(self.ledger, tid, self.sim.now, finished=True)
        self.dirty()

    def lost(self, inst: SimInstance) -> bool:
        aid = self.machine_of.pop(inst.iid, None)
        if aid is None:
            return False
        self.instances.pop(aid, None)
        self.launching.discard(aid)
        for tid in agent_lost(self.ledger, aid, self.sim.now):
            self.sim.work_stop(tid)
            self.started.discard(tid)
        self.dirty()
        return True
