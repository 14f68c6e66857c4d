"""The node agent's wheel stands alone: unpacked into an empty folder, the agent imports with
the standard library and nothing installed (``python -S``: no site-packages), the one backoff
formula it shares with the control plane (shared/backoff.py) carried inside it."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

from corral.services.providers.agent_wheel import AGENT_SHARED_MODULES, build_agent_wheel


def test_the_agent_imports_from_its_wheel_alone(tmp_path: Path) -> None:
    _, wheel = build_agent_wheel()
    with zipfile.ZipFile(io.BytesIO(wheel)) as whl:
        whl.extractall(tmp_path)
        names = set(whl.namelist())
    assert {f"corral/shared/{m}.py" for m in AGENT_SHARED_MODULES} <= names
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import corral.services.agent.core, corral.services.agent.node, corral.shared.backoff;"
        "assert corral.shared.backoff.__file__.startswith(sys.argv[1]);"
        "print(sorted(m for m in sys.modules if m.startswith('corral')))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "corral.shared.backoff" in done.stdout


def test_the_agents_backoff_is_the_one_formula() -> None:
    """The heartbeat's pause while the link is down: the formula it wrote out before
    (``heartbeat_s * 2 ** min(failures - 1, 8)``, at most a third of the TTL), drawn as before."""
    from corral.services.agent.heartbeat import HeartbeatMixin

    class Beat(HeartbeatMixin):
        def __init__(self, failures: int) -> None:
            self._link_failures = failures
            self.heartbeat_s = 2.0
            self.heartbeat_ttl_s = 600.0

    import random

    for failures in range(0, 40):
        random.seed(failures)
        got = Beat(failures)._beat_delay()
        random.seed(failures)
        cap = max(2.0, 600.0 / 3)
        want = (
            2.0
            if not failures
            else min(cap, 2.0 * 2 ** min(failures - 1, 8)) * random.uniform(0.5, 1.0)
        )
        assert got == want
