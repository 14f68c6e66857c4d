"""`corral why` of a request on its own machines (no pool): what was tried down its chain, why
each try failed, and what it waits for (issue #28: it used to say only "not_pooled")."""

from __future__ import annotations

from runtime_driver import Driver

from corral.services.runtime import requests
from corral.services.runtime.why import direct_why, named_blocks, why
from corral.services.state.blocks import RememberedBlock
from corral.shared.blocking import Block
from corral.shared.config.task import Task
from corral.shared.errors import CapacityError
from corral.shared.lifecycle import RequestState
from corral.shared.records import Attempt, ChainStep, LaunchRequest


def _step(zone: str) -> ChainStep:
    return ChainStep(
        cloud="local", region=zone[:-2], zone=zone, instance_type="gpu-a100-8", market="on_demand"
    )


def _request(state: RequestState, next_step: int) -> LaunchRequest:
    chain = [_step("lab-east-a"), _step("lab-east-b"), _step("lab-west-a")]
    req = LaunchRequest(id="r-1", task={}, state=state, created_at=0, updated_at=0, chain=chain)
    req.next_step = next_step
    req.attempts = [
        Attempt(
            attempt_id="a0", cloud="local", region="lab-east", zone="lab-east-a",
            instance_type="gpu-a100-8", market="on_demand", outcome="capacity",
            error="InsufficientCapacity: no gpu-a100-8 in lab-east-a", started_at=1, ended_at=2,
        ),
        Attempt(
            attempt_id="a1", cloud="local", region="lab-east", zone="lab-east-b",
            instance_type="gpu-a100-8", market="on_demand", outcome="quota",
            error="QuotaExceeded: lab-east", started_at=2, ended_at=3,
        ),
    ]  # fmt: skip
    return req


def test_provisioning_names_each_failed_try_and_the_candidate_it_tries_now() -> None:
    found = direct_why(_request(RequestState.PROVISIONING, 2), [])
    assert found["code"] == "provisioning"
    assert found["reason"] == (
        "it is trying candidate 3 of 3 (local/lab-west-a gpu-a100-8 on_demand) "
        "after 2 failed attempts"
    )
    assert [(t["zone"], t["outcome"]) for t in found["tried"]] == [
        ("lab-east-a", "capacity"),
        ("lab-east-b", "quota"),
    ]
    assert "QuotaExceeded" in found["tried"][1]["error"]


def test_a_blocked_scope_ahead_is_named_and_one_behind_is_not() -> None:
    ahead = Block(cloud="local", region="lab-west")
    behind = Block(cloud="local", zone="lab-east-a")
    found = direct_why(
        _request(RequestState.PROVISIONING, 2),
        [(ahead, 500.0, "capacity"), (behind, 400.0, "capacity")],
    )
    assert [b["scope"] for b in found["blocked"]] == [str(ahead)]
    assert found["blocked"][0]["until"] == 500.0
    assert found["reason"].endswith("; 1 blocked scope ahead")


def test_failed_and_pending_say_why_in_a_line() -> None:
    failed = _request(RequestState.FAILED, 3)
    failed.error = "every candidate failed"
    assert direct_why(failed, [])["reason"] == "every candidate failed"
    pending = direct_why(_request(RequestState.PENDING, 0), [])
    assert pending["code"] == "planning" and "scheduling worker" in pending["reason"]


def test_a_waiting_request_says_what_a_walk_made_now_would_decide(driver: Driver) -> None:
    # The walk's own plan (corral.shared.failover_plan.plan_step) from the request as stored and
    # the blocks in force: while every zone is blocked, it would wait again; once the blocks
    # have ended, it would try the first candidate.
    for zone in ("lab-east-a", "lab-east-b", "lab-west-a"):
        driver.fake.fail_next(CapacityError(f"{zone} sold out", code="X"), zone)
    task = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    rid = requests.submit(driver.deps, Task.model_validate(task)).id
    driver.run()
    found = why(driver.deps, rid)
    assert found["state"] == "WAITING"
    walk = found["next_walk"]
    assert walk["decision"] == "wait" and walk["because"] == "block_expiry"
    assert walk["reasons"][0] == "all 3 candidates failed or are blocked (3 tried)"
    assert walk["reasons"][1].startswith("waiting for capacity: retry 1 at ")
    driver.fake.advance(3600.0)  # every block gone
    walk = why(driver.deps, rid)["next_walk"]
    assert walk == {"decision": "attempt", "candidate": 0, "reasons": ["try candidate 1"]}
    # A request that does not wait has no walk to tell.
    assert "next_walk" not in direct_why(_request(RequestState.PROVISIONING, 2), [])


def test_a_pooled_reason_names_its_blocks_whole_and_why_lists_them_with_their_ends() -> None:
    # A pooled workload's reason names the blocks that cover its places, not their ends
    # (machine_walk.launch_blocked); `why` lists those in force with their ends as they are.
    # A block is named only as a whole item of the list: a region's block whose text starts
    # a zone's is not.
    zone = Block("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot")
    region = Block("aws", region="us-east-1")
    other = Block("aws", "us-west-2", "us-west-2a", "p4d.24xlarge", "spot")
    reason = f"needs 1 node(s): no new machine: its 2 places blocked ({zone}; {other}) until ..."
    remembered = [
        RememberedBlock(other, 900.0, "sold out for req-x", "capacity"),
        RememberedBlock(region, 800.0, "timeout", "timeout"),
        RememberedBlock(zone, 700.0, "sold out", "capacity"),
    ]
    listed = named_blocks(reason, remembered)
    assert [(b["scope"], b["until"]) for b in listed] == [(str(zone), 700.0), (str(other), 900.0)]
    assert listed[0]["kind"] == "capacity" and listed[0]["zone"] == "us-east-1a"
    assert all("reason" not in b for b in listed)  # what a refusal said is not told
    assert named_blocks("needs 1 node(s), 0 free to it", remembered) == []
