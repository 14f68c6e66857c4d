"""Every lifecycle (a request's, and the one machine lifecycle that a request's instances, pool
machines and pool agents all move along): every edge allowed, every non-edge refused."""

from __future__ import annotations

import inspect
import itertools
import re
from enum import StrEnum

import pytest

from corral.shared import lifecycle
from corral.shared.lifecycle import (
    INSTANCE_STATES,
    INSTANCE_TRANSITIONS,
    MACHINE_TRANSITIONS,
    POOL_WORDS,
    REQUEST_TRANSITIONS,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_MACHINE_STATES,
    TERMINAL_REQUEST_STATES,
    AgentStatus,
    IllegalTransition,
    InstanceState,
    MachineState,
    MachineStatus,
    RequestState,
    check_move,
    is_transition,
)
from corral.shared.placement import Placement
from corral.shared.scheduling.det_ledger import DetAgent
from corral.shared.scheduling.ledger import PoolMachine
from corral.shared.scheduling.pooled import split_older_entries

TABLES = {
    "request": (REQUEST_TRANSITIONS, RequestState, TERMINAL_REQUEST_STATES, RequestState.PENDING),
    "machine": (
        MACHINE_TRANSITIONS,
        MachineState,
        TERMINAL_MACHINE_STATES,
        MachineState.REQUESTED,
    ),
}


def _pairs(kind: str, edges: bool) -> list[tuple[str, StrEnum, StrEnum]]:
    table, states, _, _ = TABLES[kind]
    return [
        (kind, a, b)
        for a, b in itertools.product(states, states)
        if a != b and (b in table[a]) == edges
    ]


EDGES = [pair for kind in TABLES for pair in _pairs(kind, True)]
NON_EDGES = [pair for kind in TABLES for pair in _pairs(kind, False)]


@pytest.mark.parametrize(("kind", "src", "dst"), EDGES, ids=lambda v: str(v))
def test_every_edge_is_allowed(kind: str, src: StrEnum, dst: StrEnum) -> None:
    table = TABLES[kind][0]
    assert check_move(table, "rec-1", src, dst, kind) is True
    assert is_transition(table, src, dst)


@pytest.mark.parametrize(("kind", "src", "dst"), NON_EDGES, ids=lambda v: str(v))
def test_every_non_edge_is_refused(kind: str, src: StrEnum, dst: StrEnum) -> None:
    table = TABLES[kind][0]
    with pytest.raises(IllegalTransition) as caught:
        check_move(table, "rec-1", src, dst, kind)
    assert (caught.value.record_id, caught.value.from_state, caught.value.to_state) == (
        "rec-1",
        src.value,
        dst.value,
    )
    assert not is_transition(table, src, dst)


def test_the_generated_cases_are_not_empty() -> None:
    # 11 request and 8 machine states: their ordered pairs of distinct states.
    assert len(EDGES) + len(NON_EDGES) == 11 * 10 + 8 * 7
    # requests: base, stop/start, waiting; machines: a request's node's 16, and the pools'
    # four moves into and out of RETIRING
    assert len(EDGES) == 17 + 6 + 5 + 16 + 4


def test_the_instance_names_are_the_machine_lifecycle() -> None:
    """A request's node is a machine: its older names are the one machine lifecycle's."""
    assert InstanceState is MachineState and INSTANCE_TRANSITIONS is MACHINE_TRANSITIONS
    assert TERMINAL_INSTANCE_STATES == TERMINAL_MACHINE_STATES
    # A request's node never retires (only a pool's machine does): its states are the rest.
    assert set(INSTANCE_STATES) == set(MachineState) - {MachineState.RETIRING}


# What a pool's machine and a Determined pool's agent could do before their lifecycles became
# the one machine lifecycle, as (from, to) pairs of their words: every one of them holds, and
# nothing else but the one noted below.
MACHINE_WORD_EDGES = {
    ("launching", "up"),
    ("launching", "retiring"),
    ("launching", "reaping"),
    ("up", "retiring"),
    ("up", "reaping"),
    ("retiring", "reaping"),
}
AGENT_WORD_EDGES = {("launching", "up"), ("up", "reaping")}
# Newly allowed: an agent still on its way may be reaped (the machine lifecycle lets any machine
# be stopped while it comes up). Determined's ledger never asks for it: it reaps idle agents
# that are up only (det_ledger.py's reap moves an agent that is UP).
AGENT_WORD_EDGES_ADDED = {("launching", "reaping")}
WORD_CASES = [
    ("machine", MachineStatus, MACHINE_WORD_EDGES),
    ("agent", AgentStatus, AGENT_WORD_EDGES | AGENT_WORD_EDGES_ADDED),
]


@pytest.mark.parametrize(("kind", "words", "edges"), WORD_CASES, ids=lambda v: str(v)[:8])
def test_pool_words_move_along_the_machine_lifecycle(
    kind: str, words: type[StrEnum], edges: set[tuple[str, str]]
) -> None:
    assert {w.value for w in words} <= set(POOL_WORDS)
    for a, b in itertools.product(words, words):
        record = (
            PoolMachine(machine_id="m-1", machine_type="t", partition="p", created_at=0.0)
            if kind == "machine"
            else DetAgent(agent_id="m-1", pool="p", slots=1, created_at=0.0)
        )
        record.status = a
        if a == b:
            assert record.move(b) is False
        elif (a.value, b.value) in edges:
            assert record.move(b) is True and record.status == b
            assert is_transition(MACHINE_TRANSITIONS, POOL_WORDS[a], POOL_WORDS[b])
        else:
            with pytest.raises(IllegalTransition) as caught:
                record.move(b)
            assert str(caught.value) == f"{kind} m-1: illegal transition {a} -> {b}"
            assert record.status == a
            assert not is_transition(MACHINE_TRANSITIONS, POOL_WORDS[a], POOL_WORDS[b])


@pytest.mark.parametrize("kind", TABLES)
def test_same_state_is_a_no_op_not_a_transition(kind: str) -> None:
    table, states, _, _ = TABLES[kind]
    for state in states:
        assert check_move(table, "rec-1", state, state) is False
        assert not is_transition(table, state, state)


@pytest.mark.parametrize("kind", TABLES)
def test_table_covers_every_state_and_terminals_have_no_way_out(kind: str) -> None:
    table, states, terminals, _ = TABLES[kind]
    assert set(table) == set(states)
    assert {s for s, nxt in table.items() if not nxt} == set(terminals)


@pytest.mark.parametrize("kind", TABLES)
def test_every_state_is_reachable_and_can_reach_an_end(kind: str) -> None:
    table, states, terminals, initial = TABLES[kind]
    reached = {initial}
    frontier = [initial]
    while frontier:
        for nxt in table[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(states)
    for state in states:
        seen, todo = {state}, [state]
        while todo:
            for nxt in table[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen & set(terminals), f"{state} can never end"


@pytest.mark.parametrize(
    ("src", "dst", "allowed"),
    [
        (RequestState.SUCCEEDED, RequestState.RUNNING, False),  # a finished job stays finished
        (RequestState.FAILED, RequestState.PENDING, False),
        (RequestState.CANCELLED, RequestState.PROVISIONING, False),
        (RequestState.PENDING, RequestState.RUNNING, False),  # must be provisioned first
        (RequestState.PENDING, RequestState.SUCCEEDED, False),
        (RequestState.RUNNING, RequestState.CANCELLED, False),  # a running one is terminated
        (RequestState.PENDING, RequestState.TERMINATED, False),  # a waiting one is cancelled
        (RequestState.RUNNING, RequestState.PROVISIONING, True),  # relaunch after a lost node
        (RequestState.PROVISIONING, RequestState.FAILED, True),  # chain exhausted
        (RequestState.RUNNING, RequestState.TERMINATED, True),
        (RequestState.PREEMPTED, RequestState.PENDING, True),
        (RequestState.PROVISIONING, RequestState.WAITING, True),  # exhausted: wait for capacity
        (RequestState.WAITING, RequestState.PROVISIONING, True),  # its retry is due
        (RequestState.WAITING, RequestState.FAILED, True),  # its max_wait passed
        (RequestState.WAITING, RequestState.CANCELLED, True),
        (RequestState.WAITING, RequestState.RUNNING, False),  # only a walk of the chain runs it
        (RequestState.WAITING, RequestState.PENDING, False),
    ],
)
def test_important_request_moves(src: RequestState, dst: RequestState, allowed: bool) -> None:
    assert is_transition(REQUEST_TRANSITIONS, src, dst) is allowed


@pytest.mark.parametrize(
    ("src", "dst", "allowed"),
    [
        (InstanceState.TERMINATED, InstanceState.RUNNING, False),
        (InstanceState.FAILED, InstanceState.RUNNING, False),
        (InstanceState.LOST, InstanceState.RUNNING, False),  # a reappearing node is a duplicate
        (InstanceState.TERMINATING, InstanceState.RUNNING, False),
        (InstanceState.REQUESTED, InstanceState.TERMINATED, True),  # a job that exited at once
        (InstanceState.TERMINATED, InstanceState.TERMINATING, False),
        (InstanceState.REQUESTED, InstanceState.RUNNING, True),
        (InstanceState.RUNNING, InstanceState.LOST, True),
        (InstanceState.LOST, InstanceState.TERMINATING, True),  # clean up what is left
        (InstanceState.RUNNING, InstanceState.TERMINATED, True),  # it exited by itself
    ],
)
def test_important_instance_moves(src: InstanceState, dst: InstanceState, allowed: bool) -> None:
    assert is_transition(INSTANCE_TRANSITIONS, src, dst) is allowed


def test_illegal_transition_names_record_and_states() -> None:
    with pytest.raises(IllegalTransition) as caught:
        check_move(
            REQUEST_TRANSITIONS, "r-42", RequestState.SUCCEEDED, RequestState.RUNNING, "request"
        )
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == "request r-42: illegal transition SUCCEEDED -> RUNNING"
    assert caught.value.kind == "request"


def test_every_edge_has_a_reason_comment() -> None:
    """Each `State.X,` line inside the tables carries a `# why` comment."""
    source = inspect.getsource(lifecycle)
    for table_name in ("REQUEST_TRANSITIONS", "MACHINE_TRANSITIONS"):
        start = source.index(f"{table_name}:")
        body = source[start : source.index("\n}\n", start)]
        edge_lines = [ln for ln in body.splitlines() if re.match(r"\s+\w+(State|Status)\.\w+,", ln)]
        total_edges = sum(len(v) for v in getattr(lifecycle, table_name).values())
        assert len(edge_lines) == total_edges, table_name
        bare = [ln.strip() for ln in edge_lines if not re.search(r"#\s*\S", ln)]
        assert not bare, f"{table_name} edges without a reason: {bare}"


def test_pool_machines_move_along_their_table() -> None:
    machine = PoolMachine(machine_id="m-1", machine_type="gpu", partition="p", created_at=0.0)
    assert machine.status == MachineStatus.LAUNCHING
    assert machine.move(MachineStatus.UP) is True
    assert machine.move(MachineStatus.UP) is False  # already there: a no-op
    assert machine.move(MachineStatus.REAPING) is True
    with pytest.raises(IllegalTransition, match=r"^machine m-1: illegal transition reaping -> up$"):
        machine.move(MachineStatus.UP)
    assert machine.status == MachineStatus.REAPING


def test_agents_move_along_their_table_and_keep_their_json() -> None:
    agent = DetAgent(agent_id="a-1", pool="gpu", slots=8, created_at=0.0)
    agent.move(AgentStatus.UP)
    with pytest.raises(IllegalTransition, match="agent a-1: illegal transition up -> launching"):
        agent.move(AgentStatus.LAUNCHING)
    stored = agent.model_dump(mode="json")
    assert stored["status"] == "up" and "provider_id" not in stored  # the machine table's
    assert DetAgent.model_validate(stored) == agent
    # An entry stored before the machine table (its cloud id and place flat in it) still
    # reads: those fields are taken out for the store to move into the table, never written.
    at = Placement("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot")
    entries = {"a-1": {**stored, "provider_id": "i-1", **at.fields()}}
    assert split_older_entries(entries) == {"a-1": {"provider_id": "i-1", **at.fields()}}
    assert entries == {"a-1": stored}
    assert DetAgent.model_validate(entries["a-1"]).model_dump(mode="json") == stored
    launching = {"a-2": {**stored, "provider_id": None, "cloud": None}}  # not up: nothing
    assert split_older_entries(launching) == {} and launching == {"a-2": stored}
