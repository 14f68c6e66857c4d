"""The compatibility files that the local cloud can run (``# launch: yes`` in their header,
tests/fixtures/compat/), each launched with `corral launch FILE` on a real installation (API,
workers, beat, the local cloud's node agents) and followed to its end: it succeeds, and the
launch says the same notices that validate and plan say (tests/unit/test_compat_files.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from compat_files import LOCAL_CLOUD, Case, cases, noticed
from harness import System, whole_system

LAUNCHED = [c for c in cases() if c.launch]


@pytest.fixture(scope="module")
def system(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("compat-home")
    with whole_system(home, redis_server.url, LOCAL_CLOUD) as system:
        yield system


def test_a_handful_of_files_launch() -> None:
    assert 3 <= len(LAUNCHED) <= 6, [c.path.name for c in LAUNCHED]


@pytest.mark.parametrize("case", LAUNCHED, ids=lambda c: f"{c.fmt}/{c.path.stem}")
def test_the_file_runs_on_the_local_cloud_with_its_notices(system: System, case: Case) -> None:
    # The API's first submit loads the clouds' SDKs, seconds on a busy machine: a try that
    # timed out is tried again under the same key, so the file launches once.
    for _ in range(3):
        done = system.cli(
            "launch", str(case.path), "--idempotency-key", f"compat-{case.path.stem}", timeout=240
        )
        if "cannot reach the Corral API" not in done.stderr:
            break
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert noticed(done.stderr, case.path) == case.notices, done.stderr
