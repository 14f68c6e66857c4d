"""Dollar budgets in a pool pass: a placement that would break one is held back with its name,
the room goes to the next in line, and spend accrues per period."""

from __future__ import annotations

from corral.shared.budgets import Budget, BudgetSpend, accrue
from corral.shared.scheduling.ledger import PoolLedger, add_workload
from corral.shared.scheduling.model import MachineTypeState, PartitionState, Workload
from corral.shared.scheduling.pool_passes import Costing, PassKnobs, machine_pool_pass

TYPES = (MachineTypeState(machine_type="a100", partitions=(PartitionState(name="p", size=4),)),)


def _workload(wid: str, team: str, at: float) -> Workload:
    return Workload(workload_id=wid, labels={"team": team}, group_order=("a100",), submitted_at=at)


def test_a_budget_holds_back_its_team_and_lets_the_next_one_in() -> None:
    ledger = PoolLedger(pool="train")
    for wid, team, at in (("r1", "research", 1), ("r2", "research", 2), ("p1", "prod", 3)):
        add_workload(ledger, _workload(wid, team, at))
    budget = Budget.model_validate(
        {"name": "research", "pool": "train", "selector": "team=research", "usd_per_hour": 40}
    )
    after, plan = machine_pool_pass(
        ledger, TYPES, 100.0, PassKnobs(), rebalance=False,
        new_id=lambda n, w, i: f"m-{w}-{i}", costing=Costing((budget,), {"a100": 32.77}),
    )  # fmt: skip
    placed = {p.workload_id for p in plan.placements}
    assert placed == {"r1", "p1"}  # r2 would lift research to 65.54 USD/h
    note = after.notes["r2"]
    assert note.code == "over_budget" and note.budget == "research"
    assert "budget 'research'" in note.reason and "32.77 of 40.00 USD/h" in note.reason
    assert after.budget_spend["research"].rate_usd_per_hour == 32.77
    # Without the budget the same pass places all three.
    _, free = machine_pool_pass(
        ledger, TYPES, 100.0, PassKnobs(), rebalance=False, new_id=lambda n, w, i: f"m{w}{i}"
    )
    assert {p.workload_id for p in free.placements} == {"r1", "r2", "p1"}


def test_spend_accrues_and_a_new_period_starts_afresh() -> None:
    budget = Budget.model_validate(
        {"name": "b", "pool": "x", "usd_per_period": 100, "period": "1h"}
    )
    start = {
        "b": BudgetSpend(period_start=0.0, spent_usd=10.0, rate_usd_per_hour=60.0, updated_at=0.0)
    }
    half = accrue(start, [budget], {"b": 60.0}, 1800.0)["b"]
    assert round(half.spent_usd, 6) == 40.0  # 10 + 60 USD/h for half an hour
    nxt = accrue({"b": half}, [budget], {"b": 60.0}, 3600.0 + 600.0)["b"]
    assert nxt.period_start == 3600.0 and round(nxt.spent_usd, 6) == 10.0  # only since 1h
