"""services/runtime/typed_task.py: a request's task typed once and carried (issue #48). The
stored form stays the dict; a process hands back the Task it holds while the request's dict is
unchanged, parses again when it changed, keeps a bounded number, and the submit's own Task
stands for its stored form (they read the same: checked over every example task)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from runtime_driver import Driver

from corral.services.runtime import requests, stopping, typed_task
from corral.shared.config.task import Task
from corral.shared.records import LaunchRequest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every Task parsed from a dict from here on."""
    typed_task.forget_all()
    seen: list[Any] = []
    original = Task.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Task], obj: Any, *args: Any, **kwargs: Any) -> Task:
        if isinstance(obj, dict):
            seen.append(obj)
        return original(cls, obj, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Task, "model_validate", classmethod(counting))
    return seen


def _request(rid: str, task: dict[str, Any]) -> LaunchRequest:
    return LaunchRequest.new(rid, task, now=1.0)


def test_a_request_read_again_gets_the_task_already_typed(parses: list[Any]) -> None:
    doc = {"name": "a", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    first = typed_task.task_of(_request("r-typed-1", doc))
    # The same request read again from Redis: a new record, an equal dict.
    again = _request("r-typed-1", json.loads(json.dumps(doc)))
    assert typed_task.task_of(again) is first
    assert len(parses) == 1


def test_a_rewritten_task_is_typed_again(parses: list[Any]) -> None:
    doc = {"name": "a", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    before = typed_task.task_of(_request("r-typed-2", doc))
    rewritten = {**doc, "resources": {**doc["resources"], "autostop": "10m"}}
    after = typed_task.task_of(_request("r-typed-2", rewritten))
    assert after is not before and after.autostop() is not None and before.autostop() is None
    assert len(parses) == 2


def test_the_memo_is_bounded(parses: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typed_task, "MEMO_SIZE", 2)
    docs = {f"r-b{n}": {"name": f"t{n}"} for n in range(3)}
    for rid, doc in docs.items():
        typed_task.task_of(_request(rid, doc))
    typed_task.task_of(_request("r-b2", docs["r-b2"]))  # kept
    assert len(parses) == 3
    typed_task.task_of(_request("r-b0", docs["r-b0"]))  # the oldest went first
    assert len(parses) == 4


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_submits_task_reads_as_its_stored_form_does(path: Path) -> None:
    """What :func:`typed_task.remember` rests on: a checked task and its stored form parsed
    again are one value (and store the same JSON)."""
    task = Task.model_validate(yaml.safe_load(path.read_text()))
    stored = task.model_dump(mode="json", exclude_none=True, by_alias=True)
    again = Task.model_validate(stored)
    assert again == task
    assert again.model_dump(mode="json", exclude_none=True, by_alias=True) == stored


def test_the_stored_task_is_the_dict_it_was(driver: Driver, parses: list[Any]) -> None:
    """The Redis form does not change: the record holds the task's JSON as before."""
    document = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    task = Task.model_validate(document)
    rid = requests.submit(driver.deps, task).id
    raw = driver.deps.store.get_request(rid)
    assert raw is not None
    assert raw.task == task.model_dump(mode="json", exclude_none=True, by_alias=True)
    assert typed_task.task_of(raw) is task  # the submit's own, no parse
    assert len(parses) == 1


def test_corral_autostop_rewrites_the_task_and_the_next_read_sees_it(
    driver: Driver, parses: list[Any]
) -> None:
    document = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    rid = requests.submit(driver.deps, Task.model_validate(document)).id
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and typed_task.task_of(req).autostop() is None
    policy = Task.model_validate({"resources": {"autostop": {"idle_minutes": 5}}}).autostop()
    assert policy is not None
    stopping.set_autostop(driver.deps, rid, policy)
    req = driver.deps.store.get_request(rid)
    assert req is not None
    held = typed_task.task_of(req).autostop()
    assert held is not None and held.to_json() == policy.to_json()
