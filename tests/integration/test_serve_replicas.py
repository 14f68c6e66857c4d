"""A SkyPilot service with ``service.replicas: 2`` on the local cloud (#45 item 5).

Real parts: redis-server, the API, the schedule and provision workers, beat (its serving pass,
services/runtime/serving.py), the local cloud's machines and their agents (each probing its
replica), and the API's load balancer (services/api/serve.py) relaying real HTTP. Each replica
serves its own ``SKYPILOT_SERVE_REPLICA_ID`` on its own ``CORRAL_SERVICE_PORT`` (the local
cloud's machines share this host's network).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.services.client import Client, ClientError

from harness import System, wait_for, whole_system

pytestmark = pytest.mark.integration

LOCAL = {"cloud": "local", "instance_type": "cpu-2"}
# A replica: answers every GET with its replica id, on the port Corral gives it.
SERVER = """exec python3 - <<'PY'
import http.server, os
ME = os.environ["SKYPILOT_SERVE_REPLICA_ID"].encode()
SICK = os.path.join(os.environ.get("SICK_DIR", "/nonexistent"), "sick-" + ME.decode())
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503 if os.path.exists(SICK) else 200)
        self.send_header("Content-Length", str(len(ME)))
        self.end_headers()
        self.wfile.write(ME)
    def log_message(self, *args):
        pass
port = int(os.environ["CORRAL_SERVICE_PORT"])
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
"""


@pytest.fixture(scope="module")
def system(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("serve-home")
    cloud = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"
    with whole_system(home, redis_server.url, cloud) as system:
        yield system


def _free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports free now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = int(s.getsockname()[1])
        if first + n > 65535:
            continue
        try:
            with contextlib.ExitStack() as stack:
                for port in range(first, first + n):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise AssertionError("no consecutive free ports")


def _service(port: int, name: str, policy: str = "round_robin") -> dict[str, Any]:
    return {
        "name": name,
        "workload_type": "service",
        "resources": {**LOCAL, "ports": port},
        "service": {
            "readiness_probe": {"path": "/", "initial_delay_seconds": 30, "timeout_seconds": 2},
            "replicas": 2,
            "load_balancing_policy": policy,
        },
        "run": SERVER,
    }


def _ready(system: System, rid: str, want: set[int]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(system.request(rid))
        ready = {r["replica"] for r in seen.get("replicas") or [] if r["ready"]}
        return ready == want

    wait_for(reached, 120, f"replicas {sorted(want)} of {rid} ready", logs=system.home / "logs")
    return seen


def _answers(system: System, endpoint: str, times: int) -> list[str]:
    headers = {"Authorization": f"Bearer {system.token}"}
    out = []
    with httpx.Client(timeout=10, headers=headers) as http:
        for _ in range(times):
            resp = http.get(endpoint)
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-corral-replica"] == resp.text  # the header names who answered
            out.append(resp.text)
    return out


def _down(system: System, rid: str) -> None:
    with Client(system.api_url, system.token) as client, contextlib.suppress(ClientError):
        client.terminate(rid)


def test_two_replicas_both_ready_and_the_endpoint_answers_from_both(system: System) -> None:
    port = _free_ports(2)
    rid = system.submit(_service(port, "two"))
    try:
        view = _ready(system, rid, {1, 2})
        assert view["replicas_target"] == 2
        endpoint = view["service_endpoint"]
        assert endpoint == f"{system.api_url}/v1/services/{rid}/"
        urls = sorted(r["url"] for r in view["replicas"])
        assert urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        # Round robin: in turn, so six calls see each replica three times.
        answers = _answers(system, endpoint, 6)
        assert sorted(answers) == ["1", "1", "1", "2", "2", "2"], answers
        # The CLI prints the endpoint (status --endpoint) and the replicas ready.
        shown = system.cli("status", rid, "--endpoint", str(port))
        assert shown.stdout.strip() == endpoint, shown.stdout + shown.stderr
        table = system.cli("status", rid)
        assert "2 of 2 replicas ready: 1, 2" in table.stdout, table.stdout
        # Without the API's token, no answer (the token is not passed on to the replicas).
        assert httpx.get(endpoint, timeout=10).status_code == 401
    finally:
        _down(system, rid)
    # The service's end ends its replicas.
    wait_for(
        lambda: system.request(f"{rid}-r2")["state"] in {"TERMINATED", "CANCELLED"},
        60,
        "replica 2 to end with its service",
    )


def test_a_replica_that_ends_is_taken_out_and_replaced(system: System) -> None:
    port = _free_ports(3)
    rid = system.submit(_service(port, "replaced"))
    try:
        _ready(system, rid, {1, 2})
        _down(system, f"{rid}-r2")  # replica 2's request ends (its machine terminated)
        view = _ready(system, rid, {1, 3})
        assert {r["replica"] for r in view["replicas"]} == {1, 3}
        assert set(_answers(system, view["service_endpoint"], 4)) == {"1", "3"}
        events = system.get(f"/v1/requests/{rid}/events").json()
        texts = " ".join(e["text"] if "text" in e else str(e) for e in events.get("events", []))
        assert "replica 3 launched" in texts, texts
    finally:
        _down(system, rid)


def test_queries_per_second_past_one_replicas_target_launch_a_second(system: System) -> None:
    """replica_policy with target_qps_per_replica 0.5 and no upscale delay: 40 requests in the
    minute (0.67 QPS) want ceil(0.67 / 0.5) = 2 replicas; the second one launches, and the
    endpoint then answers from both."""
    port = _free_ports(2)
    task = _service(port, "scaled")
    task["service"] = {
        "readiness_probe": {"path": "/", "initial_delay_seconds": 30, "timeout_seconds": 2},
        "replica_policy": {
            "min_replicas": 1,
            "max_replicas": 2,
            "target_qps_per_replica": 0.5,
            "upscale_delay_seconds": 0,
        },
        "load_balancing_policy": "round_robin",
    }
    rid = system.submit(task)
    try:
        view = _ready(system, rid, {1})
        assert view["replicas_target"] == 1
        assert set(_answers(system, view["service_endpoint"], 40)) == {"1"}
        view = _ready(system, rid, {1, 2})
        assert view["replicas_target"] == 2 and view["qps"] > 0.5
        assert set(_answers(system, view["service_endpoint"], 4)) == {"1", "2"}
    finally:
        _down(system, rid)


def test_a_replica_failing_its_probe_leaves_the_rotation_and_is_replaced(
    system: System, tmp_path: Path
) -> None:
    """Replica 2 answers 503 once its file appears: out of rotation at once, retired after
    failing for 10 s (its request cancelled) and replaced by replica 3."""
    port = _free_ports(3)
    task = _service(port, "sick")
    task["envs"] = {"SICK_DIR": str(tmp_path)}
    rid = system.submit(task)
    try:
        _ready(system, rid, {1, 2})
        (tmp_path / "sick-2").write_text("")
        view = _ready(system, rid, {1, 3})
        assert set(_answers(system, view["service_endpoint"], 4)) == {"1", "3"}
        wait_for(
            lambda: system.request(f"{rid}-r2")["state"] in {"TERMINATED", "CANCELLED"},
            60,
            "the failing replica's request to end",
        )
        events = system.get(f"/v1/requests/{rid}/events").json()
        assert "replica 2 retired: its readiness probe failed" in str(events), events
    finally:
        _down(system, rid)
