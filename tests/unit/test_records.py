"""Stored records: moves append history, JSON round-trips, the public shapes the CLI prints."""

from __future__ import annotations

import json
import typing

import pytest
from pydantic import ValidationError

from corral.shared.errors import ERRORS_BY_OUTCOME
from corral.shared.lifecycle import IllegalTransition, InstanceState, RequestState
from corral.shared.placement import Placement
from corral.shared.planner import Candidate
from corral.shared.records import (
    Attempt,
    AttemptOutcome,
    ChainStep,
    Instance,
    LaunchRequest,
    Transition,
)

WHERE = {
    "cloud": "aws",
    "region": "us-east-1",
    "zone": "us-east-1a",
    "instance_type": "p4d.24xlarge",
    "market": "spot",
}


def make_request() -> LaunchRequest:
    return LaunchRequest.new("req-1", {"run": "python train.py"}, now=100.0)


def make_instance(node_index: int = 0) -> Instance:
    return Instance.new(f"inst-{node_index}", "req-1", node_index, now=110.0, **WHERE)


def test_new_request_starts_pending_with_its_creation_in_history() -> None:
    req = make_request()
    assert req.state is RequestState.PENDING
    assert (req.created_at, req.updated_at, req.version) == (100.0, 100.0, 0)
    assert req.history == [
        Transition(from_state=None, to_state="PENDING", at=100.0, reason="submitted")
    ]


def test_moves_append_history_with_time_and_reason() -> None:
    req = make_request()
    assert req.move(RequestState.PROVISIONING, 101.5, "placed by fifo") is True
    assert req.move(RequestState.RUNNING, 160.0, "2/2 nodes up") is True
    assert req.state is RequestState.RUNNING
    assert req.updated_at == 160.0
    assert [(t.from_state, t.to_state, t.at, t.reason) for t in req.history[1:]] == [
        ("PENDING", "PROVISIONING", 101.5, "placed by fifo"),
        ("PROVISIONING", "RUNNING", 160.0, "2/2 nodes up"),
    ]


def test_same_state_move_records_nothing() -> None:
    req = make_request()
    req.move(RequestState.PROVISIONING, 101.0, "placed")
    assert req.move(RequestState.PROVISIONING, 200.0, "placed again (retried task)") is False
    assert len(req.history) == 2
    assert req.updated_at == 101.0


def test_illegal_move_raises_and_leaves_the_record_as_it_was() -> None:
    req = make_request()
    before = req.model_dump()
    with pytest.raises(IllegalTransition) as caught:
        req.move(RequestState.SUCCEEDED, 105.0, "nope")
    assert caught.value.record_id == "req-1"
    assert (caught.value.from_state, caught.value.to_state) == ("PENDING", "SUCCEEDED")
    assert req.model_dump() == before


def test_instance_moves_use_the_instance_table() -> None:
    inst = make_instance()
    assert inst.state is InstanceState.REQUESTED
    assert inst.move(InstanceState.RUNNING, 120.0, "agent heartbeat") is True
    assert inst.move(InstanceState.LOST, 300.0, "no heartbeat for 60 s") is True
    with pytest.raises(IllegalTransition) as caught:
        inst.move(InstanceState.RUNNING, 301.0, "came back")
    assert str(caught.value) == "instance inst-0: illegal transition LOST -> RUNNING"
    assert [t.to_state for t in inst.history] == ["REQUESTED", "RUNNING", "LOST"]
    assert inst.updated_at == 300.0
    assert not inst.is_terminal
    inst.move(InstanceState.TERMINATED, 310.0, "cloud lists nothing")
    assert inst.is_terminal


def test_terminal_requests() -> None:
    req = make_request()
    assert not req.is_terminal
    req.move(RequestState.CANCELLED, 101.0, "user cancelled")
    assert req.is_terminal


def test_json_round_trip_keeps_everything_including_unknown_fields() -> None:
    req = make_request()
    req.attempts.append(Attempt(attempt_id="a-1", started_at=101.0, **WHERE))
    req.attempts[0].finish("capacity", 102.0, "InsufficientInstanceCapacity: sold out")
    req.move(RequestState.PROVISIONING, 101.0, "placed")
    text = req.model_dump_json()
    again = LaunchRequest.model_validate_json(text)
    assert again == req
    assert again.state is RequestState.PROVISIONING
    # A field written by a newer version survives a read-modify-write by this one.
    newer = text[:-1] + ', "gang": {"size": 4}}'
    kept = LaunchRequest.model_validate_json(newer).model_dump()
    assert kept["gang"] == {"size": 4}


def test_unknown_state_is_refused() -> None:
    text = make_request().model_dump_json().replace('"state":"PENDING"', '"state":"UP"')
    with pytest.raises(ValidationError):
        LaunchRequest.model_validate_json(text)


def test_attempt_outcomes_cover_every_provider_outcome() -> None:
    allowed = set(typing.get_args(AttemptOutcome))
    assert set(ERRORS_BY_OUTCOME) <= allowed
    assert {"ok", "blocked"} <= allowed
    with pytest.raises(ValidationError):
        Attempt(attempt_id="a", started_at=1.0, outcome="sold-out", **WHERE)


def test_attempt_finish() -> None:
    att = Attempt(attempt_id="a-1", started_at=10.0, **WHERE)
    assert (att.outcome, att.ended_at) == (None, None)
    att.finish("ok", 12.5)
    assert (att.outcome, att.error, att.ended_at) == ("ok", None, 12.5)


def test_request_to_public_shape() -> None:
    req = make_request()
    req.attempts.append(Attempt(attempt_id="a-1", started_at=101.0, **WHERE))
    req.attempts[0].finish("quota", 102.0, "VcpuLimitExceeded: limit 0")
    second = {**WHERE, "zone": "us-east-1b", "market": "on_demand"}
    req.attempts.append(Attempt(attempt_id="a-2", started_at=103.0, **second))
    inst = make_instance()
    inst.provider_id = "i-0abc"
    assert req.to_public([inst]) == {
        "id": "req-1",
        "name": req.task.get("name"),
        "state": "PENDING",
        "user": None,
        "project": None,
        "exit_code": None,
        "error": None,
        "waiting": None,
        "attempts": [
            {**WHERE, "outcome": "quota", "error": "VcpuLimitExceeded: limit 0"},
            {**second, "outcome": None, "error": None},
        ],
        "instances": [
            {
                "id": "inst-0",
                "provider_id": "i-0abc",
                "pid": None,
                "address": None,
                "state": "REQUESTED",
                "machine_type": None,
                "exit_code": None,
                "price_usd_per_hour": None,
                **WHERE,
            }
        ],
        "endpoints": [],
    }
    assert req.to_public()["instances"] == []


def test_instance_to_public_keys_in_cli_order() -> None:
    inst = make_instance(1)
    inst.pid = 4242
    public = inst.to_public()
    assert list(public) == [
        "id",
        "provider_id",
        "pid",
        "address",
        "cloud",
        "region",
        "zone",
        "instance_type",
        "market",
        "machine_type",
        "state",
        "exit_code",
        "price_usd_per_hour",
    ]
    assert (public["id"], public["pid"], public["state"]) == ("inst-1", 4242, "REQUESTED")


def _candidate() -> Candidate:
    return Candidate(
        place=Placement("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot"),
        accelerators={"A100": 8},
        vcpus=96,
        memory_gib=1152,
        price_usd_per_hour=9.8,
        num_nodes=2,
    )


def test_chain_steps_are_typed_and_stored_as_the_planner_candidate_json() -> None:
    cand = _candidate()
    req = make_request()
    req.chain = [ChainStep.of(cand)]
    stored = json.loads(req.model_dump_json())
    assert stored["chain"] == [cand.to_dict()]  # the JSON written before the chain was typed
    back = LaunchRequest.model_validate_json(req.model_dump_json())
    assert back.chain[0].zone == "us-east-1a"
    assert back.chain[0].accelerators == {"A100": 8}
    assert back.chain[0].where() == "aws us-east-1/us-east-1a"
    assert Placement.of(back.chain[0]) == Placement.of(cand.to_dict())


def test_chain_step_keeps_fields_it_does_not_know() -> None:
    entry = {**_candidate().to_dict(), "chosen": True}
    req = LaunchRequest.model_validate({**make_request().model_dump(mode="json"), "chain": [entry]})
    assert json.loads(req.model_dump_json())["chain"] == [entry]


def test_chain_step_without_a_zone_is_refused() -> None:
    entry = {k: v for k, v in _candidate().to_dict().items() if k != "zone"}
    with pytest.raises(ValidationError, match="zone"):
        LaunchRequest.model_validate({**make_request().model_dump(mode="json"), "chain": [entry]})
