"""Run a few lines of Python as another user of this machine (uid 65534, ``nobody``), the way
an attacker sharing the host would: through setpriv, with the system's own Python (a user
without access to a venv still has /usr/bin/python3). Only root can switch user; tests that
need it are skipped elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

OTHER_UID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def can_switch_user() -> bool:
    return os.getuid() == 0 and bool(shutil.which("setpriv")) and os.path.exists(SYSTEM_PYTHON)


needs_other_user = pytest.mark.skipif(
    not can_switch_user(), reason="needs root, setpriv and /usr/bin/python3 to act as uid 65534"
)


def argv(code: str, *args: str) -> list[str]:
    """The command that runs ``code`` (``sys.argv[1:]`` = ``args``) as uid 65534 with no
    supplementary groups."""
    return [
        "setpriv",
        f"--reuid={OTHER_UID}",
        f"--regid={OTHER_UID}",
        "--clear-groups",
        SYSTEM_PYTHON,
        "-c",
        code,
        *args,
    ]


def run_as_other(code: str, *args: str, timeout_s: float = 30) -> Any:
    """Run ``code`` as uid 65534; it prints one JSON document, which is returned."""
    done = subprocess.run(
        argv(code, *args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
