"""The one process-group stop (services/agent/pgroup.py), used by the agent, the local cloud's
provider and `corral up`'s supervisor: SIGTERM, a grace, SIGKILL to the whole group."""

from __future__ import annotations

import ast
import signal
import subprocess
import time
from pathlib import Path

from corral.services.agent.pgroup import group_alive, stop_group, stop_groups

ROOT = Path(__file__).resolve().parents[2]


def _spawn(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def _until(check: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_child_that_honours_sigterm_ends_by_it_within_the_grace() -> None:
    child = _spawn("sleep 60 & wait")
    assert stop_group(child, 30.0) == -signal.SIGTERM
    assert _until(lambda: not group_alive(child.pid))  # its background sleep went too


def test_a_child_that_ignores_sigterm_is_killed_with_its_group_after_the_grace(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "ready"
    child = _spawn(f"trap '' TERM; sleep 60 & touch {ready}; while true; do sleep 0.05; done")
    assert _until(ready.exists)  # its trap is set
    started = time.monotonic()
    assert stop_group(child, 0.3) == -signal.SIGKILL
    assert time.monotonic() - started >= 0.3
    assert _until(lambda: not group_alive(child.pid))


def test_term_false_waits_for_a_sigterm_already_sent() -> None:
    child = _spawn("sleep 60")
    child.send_signal(signal.SIGTERM)  # as the supervisor's terminate() sends it, once
    assert stop_group(child, 30.0, term=False) == -signal.SIGTERM


def test_groups_without_a_child_to_wait_on_are_stopped_together(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    soft = _spawn("sleep 60")
    hard = _spawn(f"trap '' TERM; touch {ready}; while true; do sleep 0.05; done")
    assert _until(ready.exists)
    stop_groups([soft.pid, hard.pid], 0.3, 0.02)
    assert soft.wait(10) == -signal.SIGTERM
    assert hard.wait(10) == -signal.SIGKILL


def test_os_killpg_is_called_in_one_module_only() -> None:
    """Every process-group signal goes through pgroup.py."""
    callers = set()
    for folder in ("shared", "services", "workers"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "killpg":
                    callers.add(path.relative_to(ROOT).as_posix())
    assert callers == {"services/agent/pgroup.py"}
