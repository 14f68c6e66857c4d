"""ops/structure_counts.py (issue #48's counts) on this tree: each count is there with what it
found, the provider features are declared (no ``getattr`` probe left), and one direct launch
is measured: how many times its task is validated from a dict between submit and RUNNING."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_driver import Driver

from corral.services.runtime import requests
from corral.shared.config.task import Task
from corral.shared.lifecycle import RequestState

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "ops" / "structure_counts.py"
NAMES = {
    "machine_record_types",
    "lifecycles",
    "task_validate_sites",
    "cas_retry_loops",
    "backoff_formulas",
    "redis_clients",
    "cloud_lists",
    "getattr_features",
    "process_group_kill_modules",
    "retry_pauses_by_hand",
    "services_lines",
}


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("structure_counts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure_counts"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_script_prints_every_count_with_what_it_found() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--root", str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counts = json.loads(out)
    assert set(counts) == NAMES
    for name, entry in counts.items():
        assert isinstance(entry["count"], int) and entry["count"] >= 0, name
        if name != "services_lines":
            assert entry["count"] == len(entry["where"]), name
    assert counts["services_lines"]["count"] > 10_000
    assert counts["lifecycles"]["count"] >= 1  # the request's table at least
    assert "services/queues/redis_conn.py" in counts["redis_clients"]["where"]


def test_no_provider_feature_is_probed_with_getattr() -> None:
    assert _script().count(REPO)["getattr_features"] == {"count": 0, "where": []}


def test_each_rule_finds_what_it_describes(tmp_path: Path) -> None:
    """The rules on a small tree written here: what each must find, and what it must not."""
    (tmp_path / "services" / "providers" / "moon").mkdir(parents=True)
    (tmp_path / "services" / "providers" / "moon" / "provider.py").write_text("")
    (tmp_path / "services" / "providers" / "base.py").write_text(
        "class Provider:\n    def describe(self) -> list[Seen]: ...\n"
    )
    (tmp_path / "shared").mkdir()
    (tmp_path / "workers").mkdir()
    (tmp_path / "shared" / "m.py").write_text(
        "from pydantic import BaseModel\n"
        "class Seen(BaseModel):\n    provider_id: str\n"  # the port's answer: left out
        "class Base(BaseModel):\n    provider_id: str | None = None\n"
        "class Leaf(Base):\n    x: int\n"  # counted (Base is its base: not)
        "class Points(BaseModel):\n    machine_id: str\n"  # points at a machine: not
        "T_TRANSITIONS: dict[S, frozenset[S]] = {}\n"
        "MOON_CLOUDS = ('moon',)\n"
        "OTHER_CLOUDS = MOON_CLOUDS\n"
        "RULE_CLOUDS = tuple(RULES)\n"  # a format's words from another table: not
        "UNIT = 2**30\nTINY = 2.0**-20\n"
        "def wait(n):\n    return 0.001 * 2**n\n"
    )
    (tmp_path / "services" / "r.py").write_text(
        "import redis\n"
        "def go(provider, deps):\n"
        "    getattr(provider, 'can_fly', False)\n"
        "    getattr(deps.provider('moon'), 'nodes', None)\n"
        "    getattr(other, 'x', None)\n"  # not a provider
        "    for i in range(3):\n        pass\n"
        "    raise WriteConflict('lost')\n"
        "c = redis.Redis.from_url('redis://')\n"
    )
    (tmp_path / "services" / "k.py").write_text(
        "import os, time\n"
        "def stop(pid, n):\n"
        "    os.killpg(pid, 9)\n"
        "    time.sleep(backoff_s(1.0, n))\n"  # a retry's pause by hand
        "    raise RetryLater(backoff_s(0.5, n), n + 1)\n"  # and its queue's
        "    time.sleep(uniform(0, backoff_s(1.0, n)))\n"  # a drawn pause (a CAS loop's): not
        "    time.sleep(pause)\n"  # asked of the helper: not
    )
    counts = _script().count(tmp_path)
    where = {name: entry["where"] for name, entry in counts.items()}
    assert where["machine_record_types"] == ["shared/m.py:Leaf"]
    assert where["lifecycles"] == ["shared/m.py:T_TRANSITIONS"]
    assert where["cloud_lists"] == ["shared/m.py:MOON_CLOUDS", "shared/m.py:OTHER_CLOUDS"]
    assert where["backoff_formulas"] == ["shared/m.py:17"]
    assert [w.rsplit(":", 1)[1] for w in where["getattr_features"]] == ["can_fly", "nodes"]
    assert where["cas_retry_loops"] == ["services/r.py:go"]
    assert where["redis_clients"] == ["services/r.py"]
    assert where["process_group_kill_modules"] == ["services/k.py"]
    assert where["retry_pauses_by_hand"] == ["services/k.py:4", "services/k.py:5"]
    assert counts["services_lines"]["count"] == 9 + 2 + 7  # r.py, base.py, k.py


def test_the_script_counts_a_git_revision() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--rev", "HEAD"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert set(json.loads(out)) == NAMES


def test_one_direct_launch_validates_its_task_once(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measured figure behind ``task_validate_sites``: validations of a task from a dict,
    from the submit's own parse (the API's and the queue's door parse the document so) to
    RUNNING. 3 on main at c5be811, 2 at 750f74b; issue #48's target, 1 (the submit's: the steps
    after it take the typed task the submit kept, services/runtime/typed_task.py)."""
    parsed: list[Any] = []
    original = Task.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Task], obj: Any, *args: Any, **kwargs: Any) -> Task:
        if isinstance(obj, dict):
            parsed.append(obj)
        return original(cls, obj, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Task, "model_validate", classmethod(counting))
    document = {"name": "svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
    rid = requests.submit(driver.deps, Task.model_validate(document)).id
    driver.run()
    req = driver.deps.store.get_request(rid)
    assert req is not None and req.state == RequestState.RUNNING
    print(f"task validations in one direct launch: {len(parsed)}")
    assert len(parsed) == 1
