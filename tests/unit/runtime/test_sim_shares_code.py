"""The simulator decides with the very functions the workers call, not copies of them.

Both sides run under a profiler that records every function code object entered: the runtime's
steps (admission and a zone attempt of a direct request, a machine-pool pass, a Determined pass)
through the driver, exactly as the Celery tasks call them, and a simulated day. The decision
functions must be reached by both, as the same code objects (a copy, even a verbatim one, has
its own code object and would not be found). Pass timings and plumbing are free to differ."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
from runtime_driver import SMALL_POOL, SMALL_POOL_WORKLOAD, Driver

from corral.services.runtime import requests
from corral.services.runtime.pooled.registry import apply_pool
from corral.shared import (
    blocking,
    budgets,
    failover,
    failover_plan,
    machine_walk,
    planner,
    reservations,
    routing,
)
from corral.shared.config.task import Task
from corral.shared.scheduling import det_ledger, determined, ledger, machine_pools, pool_passes
from corral.shared.sim.run import run_policy
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import generate, load_workload

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "sim"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# What decides: the planner, a failover step, the blocked-scope memory, a pooled machine's
# walk, routing, both pool passes with the schedulers and ledger steps under them, and the
# budget check.
DECIDERS: dict[str, Callable[..., Any]] = {
    "planner.plan": planner.plan,
    "failover_plan.plan_step": failover_plan.plan_step,  # the walk's one decision
    "failover.next_step": failover.next_step,
    "blocking.is_blocked": blocking.is_blocked,
    # A pooled machine's zone walk over the same blocks (issue #48 item 2).
    "machine_walk.MachineWalk.next": machine_walk.MachineWalk.next,
    "routing.route_with_plan": routing.route_with_plan,  # routing.route wraps it
    "pool_passes.machine_pool_pass": pool_passes.machine_pool_pass,
    "machine_pools.schedule": machine_pools.schedule,
    "ledger.commit": ledger.commit,
    "pool_passes.determined_pass": pool_passes.determined_pass,
    "determined.schedule_pools": determined.schedule_pools,
    "det_ledger.commit_det": det_ledger.commit_det,
    "det_ledger.grow": det_ledger.grow,
    "budgets.Gate.admit": budgets.Gate.admit,
    "reservations.reservation_of": reservations.reservation_of,
    "reservations.targets_reservation": reservations.targets_reservation,  # a type's market
}


@contextmanager
def entered() -> Iterator[dict[int, CodeType]]:
    """Every Python function code object entered while the block runs, by identity (code
    objects compare equal when their bytecode is: a verbatim copy would pass for the real one)."""
    seen: dict[int, CodeType] = {}

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            seen[id(frame.f_code)] = frame.f_code

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _reached(seen: dict[int, CodeType]) -> set[str]:
    return {name for name, fn in DECIDERS.items() if seen.get(id(fn.__code__)) is fn.__code__}


WORKLOAD = {**SMALL_POOL_WORKLOAD, "labels": {"team": "a"}}


def _runtime(driver: Driver, tmp_path: Path) -> set[str]:
    import yaml

    budgets_file = tmp_path / "budgets.yaml"
    budgets_file.write_text(yaml.safe_dump({"budgets": [{"name": "b", "pool": "small",
                                                         "usd_per_hour": 1000}]}))  # fmt: skip
    driver.deps.settings.budgets_file = budgets_file
    master = yaml.safe_load((FIXTURES / "pools" / "master-local.yaml").read_text())
    apply_pool(driver.deps, name="small", kind="machine_pool", file_name="p.yaml", spec=SMALL_POOL,
               cloud="local")  # fmt: skip
    apply_pool(driver.deps, name="det", kind="master_config", file_name="m.yaml", spec=master,
               cloud="local")  # fmt: skip
    driver.queue.clear()
    direct = {"name": "d", "run": "true", "resources": {"cloud": "local"}}
    trial = {"run": "true", "labels": {"t": "x"}, "resources": {"resource_pool": "compute"}}
    with entered() as seen:
        for task in (direct, WORKLOAD, {**trial, "resources": {**trial["resources"], "slots": 1}}):
            requests.submit(driver.deps, Task.model_validate(task))
        for _ in range(12):  # admissions, the direct request's attempt, both pool passes
            if driver.queue:
                driver.step()
    return _reached(seen)


def _simulator() -> set[str]:
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    scenario = scenario.model_copy(update={"duration_s": 3 * 3600.0})
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    workload.budgets = load_budgets_example()
    workload.arrivals = generate(workload.templates, workload.weights, 40, 5, 3 * 3600.0)
    with entered() as seen:
        run_policy(scenario, workload, "corral")
    return _reached(seen)


def load_budgets_example() -> tuple[budgets.Budget, ...]:
    return budgets.load_budgets(EXAMPLES / "budgets.yaml")


def test_the_simulator_and_the_workers_reach_the_same_decision_functions(
    driver: Driver, tmp_path: Path
) -> None:
    runtime = _runtime(driver, tmp_path)
    simulator = _simulator()
    assert runtime == set(DECIDERS), f"the runtime steps missed {set(DECIDERS) - runtime}"
    assert simulator == set(DECIDERS), f"the simulator missed {set(DECIDERS) - simulator}"


def test_a_simulator_with_a_copied_decider_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check can fail: the failover plan's module compiled again from its own source (a
    verbatim copy) and put in the simulator's hands is not the function the workers call."""
    from corral.shared.sim import direct

    copy = types.ModuleType("copied_failover_plan")
    monkeypatch.setitem(sys.modules, "copied_failover_plan", copy)
    source = inspect.getsource(failover_plan)
    exec(compile(source, "copied_failover_plan.py", "exec"), copy.__dict__)
    for name in ("plan_step", "Snapshot", "WaitPolicy", "Attempt", "Fail", "WaitUntil"):
        monkeypatch.setattr(direct, name, getattr(copy, name))
    reached = _simulator()
    assert "failover_plan.plan_step" not in reached
    assert "planner.plan" in reached


FULL_ZONE = """\
seed: 1
duration: 2h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g5.xlarge: {on_demand: 1}}}
"""
FULL_ZONE_WORKLOAD = """\
arrivals:
  - {at: 0s, every: 1s, count: 3, duration: 20m, task: {resources: {accelerators: A10G:1}}}
"""


def test_an_exhausted_chain_waits_by_the_same_rule_in_both(driver: Driver, tmp_path: Path) -> None:
    """An exhausted chain's wait-or-fail is :func:`corral.shared.waiting.decide_wait` in the
    runtime's failover step and in the simulator's launcher alike; what it waits on is
    :func:`~corral.shared.waiting.waits_on` in both, and whether a due retry is worth a walk
    (a block it waits on ended, or all were renewed) is
    :func:`~corral.shared.waiting.renewed_until` in both (the runtime through
    :func:`~corral.shared.waiting.still_blocked`, which adds the reason line)."""
    from corral.services.runtime import failover as runtime_failover
    from corral.shared import waiting
    from corral.shared.errors import CapacityError

    codes = {f.__name__: f.__code__ for f in (waiting.decide_wait, waiting.waits_on,
                                              waiting.renewed_until)}  # fmt: skip
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    task = {"name": "w", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    with entered() as runtime:
        requests.submit(driver.deps, Task.model_validate(task))
        driver.run()
        driver.fake.advance(3600.0)  # every block gone: reconcile's pass walks the chain
        runtime_failover.wake_due(driver.deps)
        driver.run()
    assert {n for n, c in codes.items() if runtime.get(id(c)) is c} == set(codes)
    (tmp_path / "s.yaml").write_text(FULL_ZONE)
    (tmp_path / "w.yaml").write_text(FULL_ZONE_WORKLOAD)
    with entered() as simulator:
        run_policy(load_scenario(tmp_path / "s.yaml"), load_workload(tmp_path / "w.yaml"), "corral")
    assert {n for n, c in codes.items() if simulator.get(id(c)) is c} == set(codes)


SPOT_LOSSES = """\
seed: 2
duration: 2h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0,
                  spot_price_usd_per_hour: 0.4}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g5.xlarge: {spot: 2, spot_preemptions_per_hour: 6}}}
"""
SPOT_WORKLOAD = """\
arrivals:
  - {at: 0s, duration: 1h, task: {resources: {accelerators: A10G:1, use_spot: true}}}
"""


def test_a_lost_machines_relaunch_is_decided_by_the_same_rule_in_both(
    driver: Driver, tmp_path: Path
) -> None:
    """Whether and where a request whose machine was lost goes again (``relaunch_limit``
    losses in a row, the zones it lost machines in last) is
    :func:`corral.shared.recovery.relaunch_after_loss` in the runtime's reconcile and in the
    simulator's launcher alike."""
    from corral.services.runtime import reconcile
    from corral.shared import recovery

    code = recovery.relaunch_after_loss.__code__
    task = {"name": "l", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    rid = requests.submit(driver.deps, Task.model_validate(task)).id
    driver.run()
    [inst] = driver.deps.store.list_instances(request_id=rid)
    with entered() as runtime:
        driver.fake.lose(inst.provider_id or "")
        reconcile.reconcile(driver.deps)
    assert runtime.get(id(code)) is code
    (tmp_path / "s.yaml").write_text(SPOT_LOSSES)
    (tmp_path / "w.yaml").write_text(SPOT_WORKLOAD)
    with entered() as simulator:
        sim = run_policy(
            load_scenario(tmp_path / "s.yaml"), load_workload(tmp_path / "w.yaml"), "corral"
        )
    assert sim.figures["recoveries"] > 0
    assert simulator.get(id(code)) is code


def test_a_release_frees_capacity_by_the_same_rule_in_both(driver: Driver, tmp_path: Path) -> None:
    """Which blocks an ended machine of ours lifts and which waiting requests it wakes are
    :func:`corral.shared.waiting.lifted_by_release` and
    :func:`~corral.shared.waiting.woken_by_release` in the runtime's termination and in the
    simulator's launcher alike."""
    from corral.services.runtime import termination
    from corral.shared import waiting
    from corral.shared.errors import CapacityError

    codes = {f.__name__: f.__code__ for f in (waiting.lifted_by_release,
                                              waiting.woken_by_release)}  # fmt: skip
    service = {"name": "s", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    held = requests.submit(driver.deps, Task.model_validate(service)).id
    driver.run()
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    waiter = requests.submit(driver.deps, Task.model_validate(service)).id
    driver.run()
    assert driver.deps.store.get_request(waiter).state == "WAITING"  # type: ignore[union-attr]
    with entered() as runtime:
        termination.terminate(driver.deps, held, None, "done with it", by_user=True)
        driver.run()
    assert {n for n, c in codes.items() if runtime.get(id(c)) is c} == set(codes)
    woken = driver.deps.store.get_request(waiter)
    assert woken is not None and woken.state == "RUNNING", woken
    assert "capacity freed in its chain" in woken.history[-2].reason
    (tmp_path / "s.yaml").write_text(FULL_ZONE)
    (tmp_path / "w.yaml").write_text(FULL_ZONE_WORKLOAD)
    with entered() as simulator:
        run_policy(load_scenario(tmp_path / "s.yaml"), load_workload(tmp_path / "w.yaml"), "corral")
    assert {n for n, c in codes.items() if simulator.get(id(c)) is c} == set(codes)


def test_a_pooled_machines_refusal_is_remembered_by_the_same_rule_in_both(
    driver: Driver, tmp_path: Path
) -> None:
    """What a pooled machine's refused launch blocks (for every later launch, pooled or
    direct) is :func:`corral.shared.machine_walk.failure_block` in the runtime's
    ``launch_pooled`` and in the simulator's pools alike, over the one block rule
    (:meth:`~corral.shared.placement.Block.for_error`)."""
    from corral.shared.errors import CapacityError
    from corral.shared.placement import Block

    codes = {f.__name__: f.__code__ for f in (machine_walk.failure_block,
                                              Block.for_error.__func__)}  # fmt: skip
    apply_pool(driver.deps, name="small", kind="machine_pool", file_name="p.yaml", spec=SMALL_POOL,
               cloud="local")  # fmt: skip
    driver.queue.clear()
    driver.fake.fail_next(CapacityError("lab-east-a sold out", code="X"), "lab-east-a")
    with entered() as runtime:
        requests.submit(driver.deps, Task.model_validate(WORKLOAD))
        driver.run(until=lambda: len(driver.fake.launched()) == 2)
    assert {n for n, c in codes.items() if runtime.get(id(c)) is c} == set(codes)
    assert [b.block.zone for b in driver.deps.blocks.active(driver.deps.now())] == ["lab-east-a"]
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    with entered() as simulator:
        run_policy(scenario, workload, "corral")
    assert {n for n, c in codes.items() if simulator.get(id(c)) is c} == set(codes)
