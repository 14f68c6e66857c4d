"""Ray's ``request_resources`` reaches Corral on a head started as Corral starts it (issue #45).

Ray 2.60's ``ray.autoscaler.sdk.request_resources`` sends its bundles through autoscaler v2's
GCS call only when the head runs v2 (Ray's own launcher turns it on); on any other head it
writes them, a JSON list of resource dicts, to the GCS internal-KV key
``autoscaler_resource_request`` for Ray's v1 monitor (ray/autoscaler/_private/commands.py).
Corral's heads run Ray's monitor without a config, so the request landed in the v1 key, which
the head's reporter (services/agent/ray_demand.py) did not read: nothing launched, and
requested nodes were reaped as idle. Here a real Ray head (the tests' Ray venv), a driver that
calls ``request_resources(bundles=[...])`` and then clears it, and the reporter's report: the
bundles are the cluster's constraints (what the autoscaler holds capacity for,
shared/autoscaler/ray_report.py), and none once cleared.

Translated from Ray's python/ray/tests/test_autoscaler.py (testRequestBundlesAccountsForHeadNode
and friends: a standing request of bundles, replaced by the next call, cleared by an empty
one), read through the head's GCS instead of Ray's v1 monitor.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REPORTER = REPO / "services" / "agent" / "ray_demand.py"
DRIVER = """\
import json, sys
import ray
from ray.autoscaler.sdk import request_resources
from ray.autoscaler.v2.utils import is_autoscaler_v2

ray.init(address=sys.argv[1], log_to_driver=False)
request_resources(bundles=json.loads(sys.argv[2]))
print(json.dumps({"v2": is_autoscaler_v2(fetch_from_server=True)}))
"""


def _marked(mark: str) -> list[int]:
    """The processes whose environment carries ``mark`` (the head's, inherited by its
    daemons); never any other Ray on this host."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if mark.encode() in Path(entry.path, "environ").read_bytes():
                found.append(int(entry.name))
    return found


@pytest.fixture
def ray_head() -> Iterator[tuple[Path, str]]:
    from ray_venv import ray_python

    python, how = ray_python()
    if python is None:
        pytest.skip(f"Ray cannot be installed here: {how}")
    port = free_port()
    temp_dir = Path("/tmp") / f"crr-{port}"  # short: Ray's socket paths must fit 107 bytes
    mark = f"CORRAL_TEST_RAY_HEAD={port}"
    env = {
        **os.environ,
        "PATH": f"{python.parent}:{os.environ['PATH']}",
        "CORRAL_TEST_RAY_HEAD": str(port),
    }
    env.pop("RAY_enable_autoscaler_v2", None)  # started as Corral's heads are: no v2
    start = [
        str(python.parent / "ray"), "start", "--head", f"--port={port}", "--num-cpus=0",
        "--include-dashboard=false", f"--object-store-memory={80 * 1024 * 1024}",
        f"--temp-dir={temp_dir}", "--disable-usage-stats", "--include-log-monitor=false",
    ]  # fmt: skip
    started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=240)
    try:
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        yield python, f"127.0.0.1:{port}"
    finally:  # SIGTERM (Ray's daemons shut down on it), SIGKILL what is left after 15 s
        for sig, grace_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            for pid in _marked(mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace_s
            while _marked(mark) and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _request(python: Path, gcs: str, bundles: list[dict[str, float]], tmp: Path) -> bool:
    """Call request_resources from a driver; whether the head runs autoscaler v2."""
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    ran = subprocess.run(
        [str(python), str(driver), gcs, json.dumps(bundles)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return bool(json.loads(ran.stdout.strip().splitlines()[-1])["v2"])


def _constraints(python: Path, gcs: str, tmp: Path) -> list[dict[str, object]]:
    out = tmp / "demand.json"
    ran = subprocess.run(
        [str(python), str(REPORTER), "--gcs", gcs, "--out", str(out), "--once"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and out.exists(), ran.stderr[-3000:]
    report = json.loads(out.read_text())["ray"]
    return sorted(report["constraints"], key=lambda c: json.dumps(c, sort_keys=True))


def test_request_resources_on_a_head_without_autoscaler_v2_is_the_clusters_constraint(
    ray_head: tuple[Path, str], tmp_path: Path
) -> None:
    python, gcs = ray_head
    assert _constraints(python, gcs, tmp_path) == []  # nothing requested yet
    v2 = _request(python, gcs, [{"CPU": 1}, {"CPU": 1}, {"CPU": 2, "GPU": 1}], tmp_path)
    assert not v2  # the v1 path: the bundles went to the internal-KV key
    assert _constraints(python, gcs, tmp_path) == [
        {"resources": {"CPU": 2.0, "GPU": 1.0}, "count": 1},
        {"resources": {"CPU": 1.0}, "count": 2},
    ]
    # The next call replaces the request; an empty one clears it.
    _request(python, gcs, [{"CPU": 4}], tmp_path)
    assert _constraints(python, gcs, tmp_path) == [{"resources": {"CPU": 4.0}, "count": 1}]
    _request(python, gcs, [], tmp_path)
    assert _constraints(python, gcs, tmp_path) == []
