"""Issue 24's lifecycle items on the local cloud, against one real installation (the API, a
scheduling and a provisioning worker, beat; agents as local processes):

- autostop: a service whose agent reports idle for its (shortened) idle minutes ends; the local
  cloud cannot stop a machine, so it is torn down; a busy one stays;
- `corral stop` / `corral start` are refused on the local cloud, naming it (exit 2);
- a readiness probe: a service whose HTTP server starts late is not ready, then ready, and
  answers at its endpoint.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.services.client import Client, ClientError

from harness import System, wait_for, whole_system

pytestmark = pytest.mark.integration

LOCAL = {"cloud": "local", "instance_type": "cpu-2"}


@pytest.fixture(scope="module")
def system(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("lifecycle-home")
    cloud = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"
    with whole_system(home, redis_server.url, cloud) as system:
        yield system


def _down(system: System, request_id: str) -> None:
    """What `corral down ID` asks of the API, from this process (a `corral` process is most
    of a second of CPU; the commands this module checks run as the user runs them). A clean-up:
    a request that ended meanwhile is no failure."""
    with Client(system.api_url, system.token) as client, contextlib.suppress(ClientError):
        client.terminate(request_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_idle_service_ends_after_its_idle_minutes_and_a_busy_one_stays(
    system: System, tmp_path: Path
) -> None:
    """resources.autostop with 0.05 idle minutes (3 s): the idle service (setup only, nothing
    running) is torn down by beat's reconcile (the local cloud cannot stop a machine); one
    whose run is still going is not idle, so it stays. `launch -i N --down` sets it too.

    The command line's launch goes first, so its idle minutes pass while the other two's do
    (one wait for idleness, not two in a row)."""
    # The command line's spelling: `-i 0.05 --down` over a task without autostop.
    svc = tmp_path / "svc.yaml"
    svc.write_text(
        "name: cli-idle\nresources: {cloud: local, instance_type: cpu-2}\nsetup: 'true'\n"
    )
    got = system.cli("launch", str(svc), "--idle-minutes-to-autostop", "0.05", "--down", "-d")
    assert got.returncode == 0, got.stderr
    rid = got.stdout.split()[0]

    idle = system.submit(
        {
            "name": "idle",
            "resources": {**LOCAL, "autostop": {"idle_minutes": 0.05}},
            "setup": "echo set up",
        }
    )
    busy = system.submit(
        {
            "name": "busy",
            "workload_type": "service",
            "resources": {**LOCAL, "autostop": 0.05},
            "run": "sleep 120",
        }
    )
    system.wait_state(idle, {"RUNNING"}, 60)
    system.wait_state(busy, {"RUNNING"}, 60)
    done = system.wait_state(idle, {"TERMINATED", "FAILED"}, 60)
    assert done["state"] == "TERMINATED", done
    with system.client() as c:
        events = c.get(f"/v1/requests/{idle}/events").json()["events"]
    texts = [e["text"] for e in events]
    ran = next(e["at"] for e in events if e["text"].startswith("state: RUNNING"))
    why = next(e for e in events if "autostop: idle" in e["text"])
    assert "cannot stop a machine" in why["text"], texts
    assert why["at"] - ran >= 3.0, texts  # not before its idle minutes (0.05 = 3 s)
    assert system.request(busy)["state"] == "RUNNING"  # its run still goes: never idle
    _down(system, busy)

    done = system.wait_state(rid, {"TERMINATED", "FAILED"}, 60)
    assert done["state"] == "TERMINATED", done


def test_stop_and_start_are_refused_on_the_local_cloud(system: System) -> None:
    rid = system.submit({"name": "no-stop", "resources": LOCAL, "setup": "true"})
    system.wait_state(rid, {"RUNNING"}, 60)
    try:
        # The four commands at once (each is most of a second of start-up): every one is
        # refused, so none changes what the others see.
        commands = {
            "stop": ("stop", rid),
            "start": ("start", rid),
            "stop --json": ("stop", rid, "--json"),
            "unknown": ("stop", "no-such-request"),  # an unknown request: exit 2 too
        }
        with ThreadPoolExecutor(len(commands)) as pool:
            runs = {key: pool.submit(system.cli, *args) for key, args in commands.items()}
        for command in ("stop", "start"):
            got = runs[command].result()
            assert got.returncode == 2, (command, got.stdout, got.stderr)
            assert "the local cloud cannot stop a machine" in got.stderr, got.stderr
            assert "Traceback" not in got.stderr
        stopped = runs["stop --json"].result()
        assert stopped.returncode == 2
        assert "cannot stop" in json.loads(stopped.stdout)["error"]
        assert system.request(rid)["state"] == "RUNNING"
        assert runs["unknown"].result().returncode == 2
    finally:
        _down(system, rid)


def test_a_service_is_ready_only_once_its_readiness_probe_passes(system: System) -> None:
    """The HTTP server starts 4 s after the machine: RUNNING at once, not ready; ready once the
    agent's probe of /ready-path answers 200; then the endpoint answers."""
    port = _free_port()
    rid = system.submit(
        {
            "name": "probed",
            "workload_type": "service",
            "resources": {**LOCAL, "ports": port},
            "service": {
                "readiness_probe": {"path": "/", "initial_delay_seconds": 60, "timeout_seconds": 2}
            },
            "run": f"sleep 4; exec python3 -m http.server {port} --bind 127.0.0.1",
        }
    )
    try:
        first = system.wait_state(rid, {"RUNNING"}, 60)
        assert first["endpoints"] == [f"127.0.0.1:{port}"]
        assert first["ready"] is False, first
        # Looked at first: a loaded host's `corral status` can take seconds of the server's 4.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)  # nothing listens yet
        shown = system.cli("status", rid)
        assert "not ready" in shown.stdout, shown.stdout

        wait_for(lambda: system.request(rid)["ready"] is True, 60, "the probe to pass")
        with ThreadPoolExecutor(2) as pool:  # both looks at once: neither changes anything
            table = pool.submit(system.cli, "status", rid)
            as_json = pool.submit(system.cli, "status", rid, "--json")
        assert "(ready)" in table.result().stdout
        assert json.loads(as_json.result().stdout)["ready"] is True
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
    finally:
        _down(system, rid)
