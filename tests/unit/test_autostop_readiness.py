"""Autostop (SkyPilot's resources.autostop) and the readiness probe (service.readiness_probe):
every form SkyPilot's docs give, read as it means; the idle decision; the lifecycle's stop and
start edges."""

from __future__ import annotations

import json

import pytest

from corral.shared.autostop import (
    DEFAULT_IDLE_MINUTES,
    Action,
    Autostop,
    decide,
    idle_since_of,
    parse_autostop,
)
from corral.shared.config.task import Task
from corral.shared.configio import ConfigError, parse_text, validate_doc
from corral.shared.lifecycle import (
    INSTANCE_TRANSITIONS,
    REQUEST_TRANSITIONS,
    TERMINAL_REQUEST_STATES,
    IllegalTransition,
    InstanceState,
    RequestState,
    check_move,
)
from corral.shared.readiness import DEFAULT_INITIAL_DELAY_S, DEFAULT_TIMEOUT_S, parse_probe


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        (None, None),
        (False, None),
        (True, Autostop(DEFAULT_IDLE_MINUTES)),  # SkyPilot: "true: the default, 5 minutes"
        (10, Autostop(10)),
        ("10m", Autostop(10)),
        ("2h", Autostop(120)),
        ("1d", Autostop(1440)),
        ("15", Autostop(15)),
        (0.05, Autostop(0.05)),  # Corral's: fractional minutes
        ({"idle_minutes": 10}, Autostop(10)),
        ({"idle_minutes": 10, "down": True}, Autostop(10, down=True)),
        ({"down": True}, Autostop(DEFAULT_IDLE_MINUTES, down=True)),
        ({"idle_minutes": 3, "wait_for": "none"}, Autostop(3, wait_for="none")),
    ],
)
def test_autostop_reads_every_skypilot_form(written: object, expected: Autostop | None) -> None:
    assert parse_autostop(written) == expected


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("ten", "expected idle minutes"),
        (-1, ">= 0"),
        ({"idle_minutes": 5, "down": "yes"}, "autostop.down true or false"),
        ({"idle_minutes": 5, "hook": "git push"}, "hook is not supported"),
        ({"idle_minuts": 5}, "unknown autostop field(s) idle_minuts"),
        ({"wait_for": "ssh"}, "wait_for one of"),
    ],
)
def test_autostop_refuses_what_it_cannot_read(written: object, says: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_autostop(written)
    assert says in str(info.value)


def test_a_bad_autostop_in_a_task_file_names_the_field_and_line() -> None:
    text = "name: t\nresources:\n  cloud: local\n  autostop: {idle_minutes: soon}\n"
    with pytest.raises(ConfigError) as info:
        validate_doc(Task, parse_text(text, "task.yaml"))
    [issue] = info.value.issues
    assert issue.line == 4 and "resources.autostop" in issue.loc
    assert "expected idle minutes" in issue.message


def test_the_task_carries_its_autostop_and_probe() -> None:
    task = Task.model_validate(
        {
            "resources": {"ports": 8080, "autostop": {"idle_minutes": 10, "down": True}},
            "service": {"readiness_probe": "/health", "replicas": 2},
        }
    )
    assert task.autostop() == Autostop(10, down=True)
    probe = task.readiness_probe()
    assert probe is not None and probe.path == "/health"
    assert json.loads(probe.for_agent(8080))["url"] == "http://127.0.0.1:8080/health"


def test_decide_waits_for_the_idle_minutes_then_stops_or_tears_down() -> None:
    policy = Autostop(10)
    now = 10_000.0
    assert decide(None, policy, now, can_stop=True).action is Action.NONE  # busy or silent
    assert decide(now - 599, policy, now, can_stop=True).action is Action.NONE
    assert decide(now - 600, policy, now, can_stop=True).action is Action.STOP
    down = decide(now - 600, policy, now, can_stop=False)  # the local cloud, Kubernetes
    assert down.action is Action.DOWN and "cannot stop" in down.why
    assert decide(now - 600, Autostop(10, down=True), now, can_stop=True).action is Action.DOWN
    assert decide(now - 10**6, None, now, can_stop=True).action is Action.NONE  # no autostop


def test_idle_since_is_the_latest_of_every_node_and_none_while_one_is_busy() -> None:
    beats = [{"ts": 100.0, "idle_s": 30.0, "up_s": 90.0}, {"ts": 101.0, "idle_s": 11.0}]
    assert idle_since_of(beats) == 90.0
    assert idle_since_of([beats[0], {"ts": 101.0, "idle_s": None}]) is None  # one is busy
    assert idle_since_of([beats[0], None]) is None  # one is silent
    assert idle_since_of([]) is None
    # wait_for: none counts from the agent's start, whatever runs.
    assert idle_since_of([{"ts": 100.0, "idle_s": None, "up_s": 90.0}], wait_for="none") == 10.0


def test_readiness_probe_reads_both_skypilot_forms() -> None:
    short = parse_probe("/health")
    assert short is not None
    assert (short.path, short.initial_delay_s, short.timeout_s) == (
        "/health",
        DEFAULT_INITIAL_DELAY_S,
        DEFAULT_TIMEOUT_S,
    )
    full = parse_probe(
        {
            "path": "/v1/models",
            "post_data": {"model_name": "model"},
            "initial_delay_seconds": 30,
            "timeout_seconds": 5,
        }
    )
    assert full is not None
    assert (full.post_data, full.initial_delay_s, full.timeout_s) == (
        {"model_name": "model"},
        30,
        5,
    )
    for bad, says in [
        ("health", "starting with /"),
        ({"path": "/x", "timeout_seconds": -1}, "timeout_seconds"),
        ({"path": "/x", "period": 3}, "unknown readiness_probe field(s) period"),
        (7, "a path or a mapping"),
    ]:
        with pytest.raises(ValueError) as info:
            parse_probe(bad)
        assert says in str(info.value)


def test_stop_and_start_are_edges_of_the_tables() -> None:
    R, i = RequestState, InstanceState
    assert check_move(REQUEST_TRANSITIONS, "r", R.RUNNING, R.STOPPED)
    assert check_move(REQUEST_TRANSITIONS, "r", R.STOPPED, R.STARTING)
    assert check_move(REQUEST_TRANSITIONS, "r", R.STARTING, R.RUNNING)
    assert check_move(REQUEST_TRANSITIONS, "r", R.STARTING, R.STOPPED)  # the cloud refused
    assert check_move(REQUEST_TRANSITIONS, "r", R.STOPPED, R.TERMINATED)
    with pytest.raises(IllegalTransition):
        check_move(REQUEST_TRANSITIONS, "r", R.STOPPED, R.RUNNING)  # only through a start
    with pytest.raises(IllegalTransition):
        check_move(REQUEST_TRANSITIONS, "r", R.PROVISIONING, R.STOPPED)
    assert R.STOPPED not in TERMINAL_REQUEST_STATES
    assert check_move(INSTANCE_TRANSITIONS, "i", i.RUNNING, i.STOPPED)
    assert check_move(INSTANCE_TRANSITIONS, "i", i.STOPPED, i.RUNNING)
    assert check_move(INSTANCE_TRANSITIONS, "i", i.STOPPED, i.TERMINATING)
