"""Seeded property tests of the schedulers.

Machine pools: random pools (types, partitions, sizes, rules with quotas) and random streams
of workloads run pass after pass, with victims stopping, work finishing and new work coming.
After every committed plan: no partition over its size, no rule over its quota, no machine
booked twice, nobody placed where its rules shut it out. Every preemption frees at least what
its preemptor needs (it fits once its victims have stopped) and no more (without any one
victim it would not). The oracles here recompute rules with the selector module only.

Determined pools: no agent over its slots, zero-slot tasks aside; a started task fits a pool
it could ever fit. Many schedulers: four workers racing with compare-and-set never put a
partition over its size.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.shared.scheduling import (
    Agent,
    DetPoolSnapshot,
    DetScheduler,
    DetTask,
    MachineTypeState,
    PartitionState,
    Plan,
    PoolSnapshot,
    RuleSpec,
    SlotAllocation,
    Workload,
    apply_plan,
    can_ever_fit,
    release,
    schedule,
    schedule_pool,
)
from corral.shared.scheduling.machine_pools import queue, told_passed_over
from corral.shared.scheduling.model import DEFAULT_RULE_PRIORITY
from corral.shared.scheduling.partitions import PoolState
from corral.shared.scheduling.selectors import matches

# derandomize: the same examples on every run and machine; no example database on disk.
SEEDED = settings(derandomize=True, database=None, max_examples=150, deadline=None)
TYPES = ("t0", "t1", "t2")
SELECTORS = (
    "",
    "",
    "workload-type=job",
    "workload-type in (service,workspace)",
    "project=a",
    "!project",
    "project notin (a)",
)

RULE = st.builds(
    RuleSpec,
    selector=st.sampled_from(SELECTORS),
    priority=st.one_of(st.none(), st.integers(0, 3)),
    quota=st.one_of(st.none(), st.integers(0, 3)),
)
PARTITION = st.builds(
    PartitionState,
    name=st.sampled_from(("p", "q")),
    size=st.sampled_from((0, 1, 2, 2, 3, 3)),
    rules=st.one_of(st.just(()), st.lists(RULE, min_size=1, max_size=2).map(tuple)),
)


@st.composite
def machine_types(draw: Any) -> tuple[MachineTypeState, ...]:
    out = []
    for name in TYPES[: draw(st.integers(1, 3))]:
        partitions = draw(st.lists(PARTITION, min_size=1, max_size=2, unique_by=lambda p: p.name))
        market = draw(st.sampled_from(("reserved", "spot", "on_demand")))
        out.append(MachineTypeState(machine_type=name, market=market, partitions=tuple(partitions)))
    return tuple(out)


@st.composite
def workload(draw: Any, index: int) -> Workload:
    labels = draw(st.sampled_from(({}, {"project": "a"}, {"project": "b"})))
    order = draw(st.permutations(TYPES))[: draw(st.integers(1, 3))]
    return Workload(
        workload_id=f"w{index}",
        workload_type=draw(st.sampled_from(("job", "job", "service", "workspace"))),
        labels=labels,
        priority=draw(st.integers(0, 5)),
        preemptible=draw(st.sampled_from((None, True, True, False))),
        on_full=draw(st.sampled_from(("fallback", "preempt"))),
        num_nodes=draw(st.integers(1, 3)),
        group_order=tuple(order),
        submitted_at=float(index),
        enable_replacement=draw(st.booleans()),
        replacement_threshold_s=draw(st.sampled_from((0.0, 30.0))),
    )


@st.composite
def scenarios(draw: Any) -> tuple[tuple[MachineTypeState, ...], list[list[Workload]], int]:
    """A pool, the workloads arriving before each pass, and a seed for the events."""
    types = draw(machine_types())
    counter = itertools.count()
    waves = [
        [draw(workload(next(counter))) for _ in range(draw(st.integers(1, 5)))]
        for _ in range(draw(st.integers(2, 6)))
    ]
    return types, waves, draw(st.integers(0, 2**16))


# --------------------------------------------------------------------------- oracles
def first_rule(partition: PartitionState, w: Workload) -> tuple[int | None, bool]:
    """(index of the rule that decides, whether the workload may use the partition)."""
    if not partition.rules:
        return None, True
    for i, rule in enumerate(partition.rules):
        if matches(rule.selector, w.selector_labels()):
            allowed = (rule.priority is None or rule.priority > 0) and rule.quota != 0
            return i, allowed
    return None, False


def partitions(snap: PoolSnapshot) -> Iterator[tuple[str, PartitionState]]:
    for t in snap.machine_types:
        for p in t.partitions:
            yield t.machine_type, p


def check_state(snap: PoolSnapshot) -> None:
    """Sizes and quotas hold; every held machine belongs to a known workload."""
    workloads = {w.workload_id: w for w in snap.workloads}
    machines = Counter((m.machine_type, m.partition) for m in snap.machines)
    assert len({m.machine_id for m in snap.machines}) == len(snap.machines)
    for machine_type, p in partitions(snap):
        assert machines[(machine_type, p.name)] <= p.size, f"{machine_type}/{p.name} over size"
        per_rule: Counter[int | None] = Counter()
        for m in snap.machines:
            if (m.machine_type, m.partition) == (machine_type, p.name) and m.workload_id:
                per_rule[first_rule(p, workloads[m.workload_id])[0]] += 1
        for i, rule in enumerate(p.rules):
            if rule.quota is not None:
                assert per_rule[i] <= rule.quota, f"{machine_type}/{p.name} rule {i} over quota"


def check_plan(snap: PoolSnapshot, plan: Plan) -> None:
    """No double booking; placements fit what the snapshot allows."""
    idle = {m.machine_id for m in snap.machines if m.workload_id is None}
    by_id = {w.workload_id: w for w in snap.workloads}
    used: list[str] = []
    for placement in plan.placements:
        w = by_id[placement.workload_id]
        assert w.phase == "pending" and len(placement.nodes) == w.num_nodes
        for node in placement.nodes:
            assert node.machine_type in w.group_order
            p = next(
                p for t, p in partitions(snap) if (t, p.name) == (node.machine_type, node.partition)
            )
            assert first_rule(p, w)[1], f"{w.workload_id} placed where its rules shut it out"
            if node.machine_id is not None:
                assert node.machine_id in idle
                used.append(node.machine_id)
    for step in plan.replacements:
        w = by_id[step.workload_id]
        rank = {t: i for i, t in enumerate(dict.fromkeys(w.group_order))}
        assert w.phase == "running" and w.enable_replacement
        assert rank[step.bring_up.machine_type] < rank[step.retire_machine_type]
        assert step.steps()[0][0] == "bring_up"
        if step.bring_up.machine_id is not None:
            used.append(step.bring_up.machine_id)
    assert len(used) == len(set(used)), "a machine booked twice"
    assert not set(used) & {r.machine_id for r in plan.reaps}, "a machine used and reaped"
    for preemption in plan.preemptions:
        victim = by_id[preemption.workload_id]
        assert victim.phase == "running" and victim.is_preemptible()


# --------------------------------------------------------------------------- preemption probes
def _probe(after: PoolSnapshot, waiting: set[str], freed: set[str], hold: bool) -> Plan:
    """The pass after ``after`` once the victims in ``freed`` have stopped, with nothing
    preemptible and only the workloads in ``waiting`` able to be placed (the others keep
    their holds). ``hold``: whether those in ``waiting`` keep theirs."""
    snap = after
    for victim in freed:
        snap = release(snap, victim, 0.0, finished=True)

    def frozen(w: Workload) -> Workload:
        if w.phase == "running":
            return w.model_copy(update={"preemptible": False})
        if w.phase == "pending" and w.workload_id not in waiting:
            return w.model_copy(update={"group_order": ()})
        return w

    workloads = tuple(frozen(w) for w in snap.workloads)
    reservations = tuple(r for r in snap.reservations if hold or r.workload_id not in waiting)
    snap = snap.model_copy(update={"workloads": workloads, "reservations": reservations})
    return schedule(snap, 0.0, replacement_budget=0)


def _takes(plan: Plan, wid: str) -> Counter[tuple[str, str]] | None:
    for placement in plan.placements:
        if placement.workload_id == wid:
            return Counter((n.machine_type, n.partition) for n in placement.nodes)
    return None


def check_preemptions(snap: PoolSnapshot, plan: Plan, after: PoolSnapshot) -> None:
    """At least what is needed: once every victim of the plan has stopped, every preemptor
    is placed. No more: sparing any one of its victims leaves it unplaced (or, in preempt
    mode, on fewer nodes of its better groups); and it is placed exactly where room was held.

    The exact probes run only when the pass had one preemptor, started with no holds and
    replaced nothing: another preemptor's victims, a hold that lapses when its owner is placed
    later in the same pass, or a retired machine free room the decision could not see (the
    preemptor may then fit better)."""
    if any(w.phase == "stopping" for w in snap.workloads):
        return  # victims of earlier passes still stopping: the probes would be ambiguous
    victims_of: dict[str, set[str]] = {}
    for p in plan.preemptions:
        victims_of.setdefault(p.preempted_by, set()).add(p.workload_id)
    held: dict[str, Counter[tuple[str, str]]] = {x: Counter() for x in victims_of}
    for r in plan.reservations:
        if r.workload_id in held:
            held[r.workload_id][(r.machine_type, r.partition)] += r.count
    every_victim = {v for vs in victims_of.values() for v in vs}
    exact = len(victims_of) == 1 and not snap.reservations and not plan.replacements
    placed = _probe(after, set(victims_of), every_victim, hold=True)
    for preemptor in victims_of:
        takes = _takes(placed, preemptor)
        assert takes is not None, f"{preemptor} does not fit once its victims stopped"
        if exact:
            assert takes == held[preemptor], f"{preemptor} not placed where room was held"
    if not exact:
        return
    [(preemptor, victims)] = victims_of.items()
    wanted = _per_type(held[preemptor])
    for spared in victims:
        takes = _takes(_probe(after, {preemptor}, victims - {spared}, hold=False), preemptor)
        assert takes is None or _per_type(takes) != wanted, f"{spared} was not needed"


def _per_type(takes: Counter[tuple[str, str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (machine_type, _), n in takes.items():
        out[machine_type] += n
    return out


# --------------------------------------------------------------------------- the runs
def run(
    types: tuple[MachineTypeState, ...], waves: list[list[Workload]], seed: int
) -> Counter[str]:
    """Pass after pass, checking everything; how many preemptions and replacements it saw."""
    rng = random.Random(seed)
    told_rng = random.Random(seed + 1)  # the groups passed over: apart from the run's draws
    snap = PoolSnapshot(pool="p", versions={"p": 1}, machine_types=types)
    ids = itertools.count()
    now = 100.0
    seen: Counter[str] = Counter()
    for n, wave in enumerate([*waves, [], []]):
        if n >= len(waves):  # two quiet passes: waiting work is cancelled, room stays free
            kept = tuple(w for w in snap.workloads if w.phase != "pending")
            snap = snap.model_copy(update={"workloads": kept, "reservations": ()})
        snap = snap.model_copy(
            update={
                "workloads": snap.workloads
                + tuple(w.model_copy(update={"submitted_at": now + w.submitted_at}) for w in wave)
            }
        )
        knobs: dict[str, Any] = {
            "min_runtime_s": rng.choice((0.0, 0.0, 30.0)),
            "replacement_budget": rng.choice((0, 1, 2)),
            "replacement_guard_s": rng.choice((0.0, 50.0)),
        }
        plan = schedule(snap, now, **knobs)
        # Telling alike waiting workloads the same verdict changes no decision.
        fresh = schedule(snap, now, reuse_verdicts=False, **knobs)
        assert plan.placements == fresh.placements and plan.preemptions == fresh.preemptions
        assert plan.reservations == fresh.reservations
        assert plan.pending == fresh.pending  # the very words too
        # Groups passed over told as each answer is made (its answers kept from pass to
        # pass) say what telling them after the pass says.
        gone = {
            w.workload_id: told_rng.choice(("a until 10:00", "a until 10:00, b until 11:00"))
            for w in snap.workloads
            if w.phase in ("pending", "stopping") and told_rng.random() < 0.6
        }
        over = schedule(snap, now, passed_over=gone, **knobs)
        assert over.placements == plan.placements and over.preemptions == plan.preemptions
        assert over.pending == tuple(told_passed_over(plan.pending, gone))
        check_plan(snap, plan)
        after = apply_plan(snap, plan, now, lambda n, w: f"m{next(ids)}")
        check_state(after)
        check_preemptions(snap, plan, after)
        seen["preemptions"] += len(plan.preemptions)
        seen["replacements"] += len(plan.replacements)
        snap = after
        now += rng.choice((5.0, 40.0))
        for w in snap.workloads:  # victims stop; some running work finishes
            if w.phase == "stopping" and rng.random() < 0.7:
                snap = release(snap, w.workload_id, now)
            elif w.phase == "running" and rng.random() < 0.2:
                snap = release(snap, w.workload_id, now, finished=True)
        check_state(snap)
    return seen


@st.composite
def contended(draw: Any) -> tuple[tuple[MachineTypeState, ...], list[list[Workload]], int]:
    """Scenarios built to preempt: few machines, each wave more urgent than the last."""
    types, waves, seed = draw(scenarios())
    types = tuple(
        t.model_copy(
            update={
                "partitions": tuple(
                    p.model_copy(update={"size": max(1, p.size), "rules": p.rules[:1]})
                    for p in t.partitions
                )
            }
        )
        for t in types
    )
    waves = [
        [w.model_copy(update={"priority": w.priority + 3 * i, "preemptible": None}) for w in wave]
        for i, wave in enumerate(waves)
    ]
    return types, waves, seed


@st.composite
def replacing(draw: Any) -> tuple[tuple[MachineTypeState, ...], list[list[Workload]], int]:
    """Scenarios built to replace: open partitions, every workload willing to move up."""
    types, waves, seed = draw(scenarios())
    types = tuple(
        t.model_copy(
            update={"partitions": tuple(p.model_copy(update={"rules": ()}) for p in t.partitions)}
        )
        for t in types
    )
    update = {"enable_replacement": True, "replacement_threshold_s": 0.0}
    return types, [[w.model_copy(update=update) for w in wave] for wave in waves], seed


@SEEDED
@given(st.one_of(scenarios(), contended(), replacing()))
def test_machine_pool_passes_keep_every_invariant(scenario: Any) -> None:
    run(*scenario)


def test_the_generated_runs_do_preempt_and_replace() -> None:
    """The property above is not vacuous: its scenarios preempt and replace often."""
    total: Counter[str] = Counter()

    @settings(derandomize=True, database=None, max_examples=100, deadline=None)
    @given(st.one_of(contended(), replacing()))
    def count(scenario: Any) -> None:
        total.update(run(*scenario))

    count()
    assert total["preemptions"] >= 30 and total["replacements"] >= 3, total


def test_four_workers_racing_with_compare_and_set_never_overfill() -> None:
    """Four workers plan from whatever snapshot they last read; the committer takes a plan
    only if its versions are still current, else the worker reads again and recomputes."""
    rng = random.Random(7)
    types = (
        MachineTypeState(
            machine_type="gpu", partitions=(PartitionState(name="p", size=3, rules=()),)
        ),
    )
    store = PoolSnapshot(pool="p", versions={"p": 1}, machine_types=types)
    ids = itertools.count()
    reads = [store] * 4
    commits = conflicts = 0
    for tick in range(200):
        now = float(tick)
        if rng.random() < 0.5:
            w = Workload(
                workload_id=f"w{tick}",
                submitted_at=now,
                group_order=("gpu",),
                num_nodes=rng.choice((1, 1, 2)),
                priority=rng.randint(0, 3),
            )
            store = store.model_copy(update={"workloads": (*store.workloads, w)})
            store = store.model_copy(update={"versions": {"p": store.versions["p"] + 1}})
        running = [w for w in store.workloads if w.phase in ("running", "stopping")]
        if running and rng.random() < 0.3:
            store = release(store, rng.choice(running).workload_id, now, finished=True)
            store = store.model_copy(update={"versions": {"p": store.versions["p"] + 1}})
        worker = rng.randrange(4)
        plan = schedule(reads[worker], now)
        if plan.based_on == store.versions:
            store = apply_plan(store, plan, now, lambda n, w: f"m{next(ids)}")
            commits += 1
        else:
            conflicts += 1
        reads[worker] = store  # lost or won, the worker reads again
        assert sum(1 for m in store.machines if m.workload_id) <= 3
        assert len(store.machines) <= 3
    assert commits > 20 and conflicts > 20


# --------------------------------------------------------------------------- Determined
@st.composite
def det_pools(draw: Any) -> DetPoolSnapshot:
    fleet = tuple(
        Agent(agent_id=f"a{i}", slots=draw(st.sampled_from((0, 2, 4, 8))))
        for i in range(draw(st.integers(1, 4)))
    )
    free = {a.agent_id: a.slots for a in fleet}
    tasks = []
    for i in range(draw(st.integers(0, 10))):
        slots = draw(st.sampled_from((0, 1, 2, 4, 8, 16)))
        fields: dict[str, Any] = {
            "task_id": f"t{i}",
            "group_id": draw(st.sampled_from("ABC")),
            "slots": slots,
            "priority": draw(st.one_of(st.none(), st.integers(1, 99))),
            "preemptible": draw(st.booleans()),
            "submitted_at": float(i),
        }
        spot = next((a for a, n in free.items() if n >= slots and slots), None)
        if spot is not None and draw(st.booleans()):  # already running on one agent
            free[spot] -= slots
            fields |= {
                "allocations": (SlotAllocation(agent_id=spot, slots=slots),),
                "started_at": float(i),
            }
        tasks.append(DetTask(**fields))
    scheduler = DetScheduler(
        type=draw(st.sampled_from(("fair_share", "priority", "round_robin"))),
        fitting_policy=draw(st.sampled_from(("best", "worst"))),
        preemption=draw(st.booleans()),
    )
    return DetPoolSnapshot(pool="gpu", scheduler=scheduler, agents=fleet, tasks=tuple(tasks))


@SEEDED
@given(det_pools())
def test_determined_never_overbooks_an_agent(pool: DetPoolSnapshot) -> None:
    plan = schedule_pool(pool, 1000.0)
    by_id = {t.task_id: t for t in pool.tasks}
    released = {r.task_id for r in plan.releases}
    used: Counter[str] = Counter()
    for t in pool.tasks:
        for a in t.allocations:
            used[a.agent_id] += a.slots
    for start in plan.starts:
        t = by_id[start.task_id]
        assert not t.is_running() and sum(a.slots for a in start.allocations) == t.slots
        assert can_ever_fit(pool, t.slots).ok
        for a in start.allocations:
            used[a.agent_id] += a.slots
    for agent in pool.agents:
        assert used[agent.agent_id] <= agent.slots, f"{agent.agent_id} overbooked"
    for r in released:
        assert by_id[r].preemptible and by_id[r].is_running()
    if pool.scheduler.type == "round_robin" or (
        pool.scheduler.type == "priority" and not pool.scheduler.preemption
    ):
        assert not released
    started = {s.task_id for s in plan.starts}
    waiting = {p.task_id for p in plan.pending}
    assert started | waiting == {t.task_id for t in pool.tasks if not t.is_running()}
    assert not started & waiting


# --------------------------------------------------------------------------- the queue's order
@st.composite
def queue_cases(draw: Any) -> tuple[PoolSnapshot, bool]:
    """A pool whose machine types each have their own rules, or one whose machine types all
    share one list of partitions (the same rule objects, as a pool file's defaults give
    them), and waiting work, some of it asking for a machine type the pool lacks."""
    shared = draw(st.booleans())
    if shared:
        parts = tuple(draw(st.lists(PARTITION, min_size=1, max_size=2, unique_by=lambda p: p.name)))
        types = tuple(
            MachineTypeState(machine_type=t, market="spot", partitions=parts)
            for t in TYPES[: draw(st.integers(1, 3))]
        )
    else:
        types = draw(machine_types())
    waiting = []
    for i in range(draw(st.integers(1, 12))):
        w = draw(workload(i))
        order = draw(st.sampled_from((w.group_order, ("t9",), (), ("t9", *w.group_order))))
        submitted = float(draw(st.integers(0, 3)))  # ties, broken by id
        waiting.append(w.model_copy(update={"group_order": order, "submitted_at": submitted}))
    snap = PoolSnapshot(pool="p", machine_types=types, workloads=tuple(waiting))
    return snap, shared


def naive_queue(snap: PoolSnapshot) -> list[str]:
    """The queue's order as the module docstring states it, from the rules read one by one."""
    by_type = {t.machine_type: t for t in snap.machine_types}

    def rule_priority(p: PartitionState, w: Workload) -> int:
        if not p.rules:
            return DEFAULT_RULE_PRIORITY
        index, allowed = first_rule(p, w)
        if index is None or not allowed:
            return 0
        rule = p.rules[index]
        return DEFAULT_RULE_PRIORITY if rule.priority is None else rule.priority

    def best(w: Workload) -> int:
        found = [
            rule_priority(p, w)
            for t in w.group_order
            if t in by_type
            for p in by_type[t].partitions
        ]
        return max(found, default=0)

    waiting = [w for w in snap.workloads if w.phase == "pending"]
    waiting.sort(key=lambda w: (-best(w), -w.priority, w.submitted_at, w.workload_id))
    return [w.workload_id for w in waiting]


def test_the_queue_orders_as_its_rules_say() -> None:
    """Pools whose machine types all give a set of labels the same, and pools where they
    differ (the queue reads the two another way), both order as the oracle does."""
    seen: Counter[bool] = Counter()

    @SEEDED
    @given(queue_cases())
    def check(case: tuple[PoolSnapshot, bool]) -> None:
        snap, shared = case
        got = [w.workload_id for w in queue(PoolState(snap))]
        assert got == naive_queue(snap)
        seen[shared] += 1

    check()
    assert seen[True] >= 30 and seen[False] >= 30, seen
