"""``corral.shared.costs``: a request's spend over its runs, and totals by user, project and the
cloud each run was on (a recovery run elsewhere counts there)."""

from __future__ import annotations

import pytest

from corral.shared.costs import cost_line, totals
from corral.shared.lifecycle import InstanceState
from corral.shared.records import Instance, LaunchRequest


def _node(
    rid: str, attempt: str, cloud: str, at: float, price: float | None, **moves: float
) -> Instance:
    inst = Instance.new(
        f"{attempt}-0",
        rid,
        0,
        at,
        attempt_id=attempt,
        cloud=cloud,
        region="r",
        zone="z",
        instance_type="t",
        market="on_demand",
        price_usd_per_hour=price,
    )
    for state, when in moves.items():
        inst.move(InstanceState[state], when, state.lower())
    return inst


def _request(rid: str, user: str | None, project: str | None) -> LaunchRequest:
    return LaunchRequest.new(rid, {"name": f"job-{rid}"}, 0.0, user=user, project=project, gpus=8)


def test_a_request_costs_every_run_and_totals_follow_each_runs_cloud() -> None:
    # alice's job: an hour on aws at $3.60 (lost), then 30 min on gcp at $2.00, still running.
    alice = cost_line(
        _request("r1", "alice", "team-a"),
        [
            _node("r1", "a1", "aws", 0.0, 3.6, RUNNING=1.0, LOST=3600.0),
            _node("r1", "a2", "gcp", 3600.0, 2.0, RUNNING=3601.0),
        ],
        now=5400.0,
    )
    bob = cost_line(
        _request("r2", "bob", "team-b"),
        [_node("r2", "b1", "aws", 0.0, 1.2, RUNNING=1.0, TERMINATED=1800.0)],
        now=5400.0,
    )
    never = cost_line(_request("r3", None, None), [], now=5400.0)  # waited, never ran
    doc = alice.to_dict(5400.0)
    assert doc["cost_usd"] == pytest.approx(4.6) and doc["runs"] == 2
    assert doc["clouds"] == ["aws", "gcp"] and doc["duration_s"] == pytest.approx(5400.0)
    assert (doc["user"], doc["project"], doc["gpus"], doc["name"]) == (
        "alice",
        "team-a",
        8,
        "job-r1",
    )
    assert never.cost_usd == 0 and never.to_dict(5400.0)["runs"] == 0

    sums = totals([alice, bob, never]).to_dict()
    assert sums["by_user"] == pytest.approx({"alice": 4.6, "bob": 0.6})
    assert sums["by_project"] == pytest.approx({"team-a": 4.6, "team-b": 0.6})
    assert sums["by_cloud"] == pytest.approx({"aws": 4.2, "gcp": 1.0})
    assert list(sums["by_cloud"]) == ["aws", "gcp"]  # the largest first
    assert sums["total_usd"] == pytest.approx(5.2) and sums["unpriced_runs"] == 0


def test_a_run_of_unknown_price_is_counted_apart_never_as_free() -> None:
    line = cost_line(
        _request("r4", "carol", "team-a"),
        [_node("r4", "c1", "local", 0.0, None, RUNNING=1.0)],
        now=60.0,
    )
    assert line.cost_usd is None and line.to_dict(60.0)["cost_usd"] is None
    sums = totals([line]).to_dict()
    assert sums["unpriced_runs"] == 1 and sums["total_usd"] == 0 and sums["by_user"] == {}
