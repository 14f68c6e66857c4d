"""The `corral` runtime commands end to end: the real console script against the real API
(`corral run api --port 0`, a subprocess) over a real redis-server. No worker runs, so
requests stay PENDING unless a test cancels them. The Python client's errors, pools and
clusters are tried against the same API; the CLI's habits (status --watch, completion of
request ids, version) too.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import yaml

from corral.services.client import (
    ApiUnreachable,
    Client,
    Conflict,
    Impossible,
    InvalidTask,
    NoApiAddress,
    NotFound,
    Unauthorized,
    WaitTimeout,
)
from corral.services.settings import Settings
from corral.services.state.store import Store

from harness import at_once

pytestmark = pytest.mark.integration

CORRAL = str(Path(sys.executable).parent / "corral")
REPO = Path(__file__).resolve().parents[2]
TOKEN = "cli-test-token-9f2e"
ID = re.compile(r"^r-[0-9a-f]+$")
T = TypeVar("T")
TASK = "name: cli-hello\nresources:\n  cloud: local\n  instance_type: cpu-2\nrun: echo hi\n"


@dataclass
class Api:
    url: str
    home: Path
    log: Path
    redis_url: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without any CORRAL_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(extra)
    return env


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The next line the process prints ("" if none within ``timeout_s``). It reads the pipe a
    byte at a time, below Python's buffer: a buffered readline could take two lines off the
    pipe, and the next select would then wait for a third that never comes."""
    assert proc.stdout is not None
    fd, line = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line.decode()


@pytest.fixture(scope="module")
def api(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("api-home")
    log = home / "api.log"
    # The local cloud alone (no worker runs anyway): the API would otherwise load the other
    # clouds' SDKs as it starts, CPU taken from the first commands.
    env = _env(
        CORRAL_REDIS_URL=redis_server.url, CORRAL_API_TOKEN=TOKEN, CORRAL_HOME=str(home),
        CORRAL_CLOUDS='["local"]',
    )  # fmt: skip
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [CORRAL, "run", "api", "--port", "0"],
            stdout=subprocess.PIPE, stderr=log_file, env=env, text=True,
        )  # fmt: skip
    try:
        line = _read_line(proc, 60)
        match = re.fullmatch(r"api listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, f"unexpected first line {line!r}; log:\n{log.read_text()}"
        yield Api(match.group(1), home, log, redis_server.url)
    finally:
        proc.terminate()
        proc.wait(15)


def corral(
    api: Api | None,
    *args: str,
    token: str | None = TOKEN,
    home: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run the console script against ``api`` (address and token from the environment)."""
    home = home or (api.home if api else None)
    assert home is not None
    base: dict[str, str] = {"CORRAL_HOME": str(home)}
    if api is not None:
        base["CORRAL_API_URL"] = api.url
    if token is not None:
        base["CORRAL_API_TOKEN"] = token
    return subprocess.run(
        [CORRAL, *args], capture_output=True, text=True, env=_env(**base, **env),
        timeout=60,
    )  # fmt: skip


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(TASK)
    return path


def _launch(api: Api, task_file: Path) -> str:
    result = corral(api, "launch", str(task_file), "--detach")
    assert result.returncode == 0, result.stderr
    request_id = result.stdout.strip()
    assert ID.match(request_id), result.stdout
    return request_id


def test_launch_prints_an_id_and_status_json_has_the_documented_shape(
    api: Api, task_file: Path
) -> None:
    request_id = _launch(api, task_file)
    result, listed = at_once(
        partial(corral, api, "status", request_id, "--json"),
        partial(corral, api, "status", "--json"),
    )
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view == {
        "id": request_id,
        "name": "cli-hello",
        "state": "PENDING",
        "user": "admin",  # the install's first token is the admin's
        "project": None,  # the admin submitted without --project
        "exit_code": None,
        "error": None,
        "attempts": [],
        "instances": [],
        "relaunches": 0,
        "restarts": 0,
        "runs": [],
        "cost_usd": 0,
        "endpoints": [],
        "ready": None,
        "waiting": None,  # set while it waits for capacity
        # set for a service with replicas (docs/services.md)
        "service_endpoint": None,
        "replicas_target": None,
        "qps": None,
        "replicas": None,
    }
    listing = json.loads(listed.stdout)
    assert request_id in [v["id"] for v in listing["requests"]]
    assert listing["count"] == len(listing["requests"])


def test_launch_with_an_idempotency_key_launches_once(api: Api, task_file: Path) -> None:
    first = corral(api, "launch", str(task_file), "--idempotency-key", "cli-once", "--json")
    again = corral(api, "launch", str(task_file), "--idempotency-key", "cli-once", "--json")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    with Client(api.url, TOKEN) as client:
        found = client.submission("cli-once")
    assert found is not None and found.received == 2
    assert found.request_id == json.loads(first.stdout)["id"]


def test_a_compute_config_path_is_sent_inline(api: Api, tmp_path: Path) -> None:
    (tmp_path / "cc.yaml").write_text("region: lab-east\nhead_node: {instance_type: cpu-2}\n")
    task = tmp_path / "task.yaml"
    task.write_text(TASK + "compute_config: cc.yaml\n")
    request_id = _launch(api, task)
    stored = Store(redis.Redis.from_url(api.redis_url), prefix="corral").get_request(request_id)
    assert stored is not None
    config = stored.task["compute_config"]
    assert (config["region"], config["head_node"]["instance_type"]) == ("lab-east", "cpu-2")


def test_an_invalid_compute_config_file_is_exit_2_naming_it(api: Api, tmp_path: Path) -> None:
    (tmp_path / "cc.yaml").write_text("region: lab-east\nhead_nod: {instance_type: cpu-2}\n")
    task = tmp_path / "task.yaml"
    task.write_text(TASK + "compute_config: cc.yaml\n")
    result = corral(api, "launch", str(task))
    assert result.returncode == 2
    assert f"{tmp_path / 'cc.yaml'}:2: head_nod: unknown field" in result.stderr


def test_an_invalid_file_is_exit_2_naming_file_line_and_field(api: Api, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  cloud: local\n  instanse_type: cpu-2\n")
    result = corral(api, "launch", str(bad))
    assert result.returncode == 2
    assert f"{bad}:3: resources.instanse_type: unknown field" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_an_impossible_task_is_exit_2(api: Api, tmp_path: Path) -> None:
    task = tmp_path / "big.yaml"
    task.write_text("resources:\n  cloud: local\n  accelerators: H100:64\nrun: 'true'\n")
    result = corral(api, "launch", str(task))
    assert result.returncode == 2, result.stderr
    assert "impossible" in result.stderr


def test_a_wrong_token_is_exit_2_and_never_printed(api: Api, task_file: Path) -> None:
    result = corral(api, "launch", str(task_file), token="wrong-token-value")
    assert result.returncode == 2
    assert "unauthorized" in result.stderr
    assert "wrong-token-value" not in result.stderr + result.stdout
    assert TOKEN not in api.log.read_text()
    # The message names the token that was refused: here the environment's.
    assert "the token in CORRAL_API_TOKEN" in result.stderr


def test_a_wrong_token_file_is_named_as_the_one_refused(
    api: Api, task_file: Path, tmp_path: Path
) -> None:
    home = tmp_path / "other-home"
    home.mkdir(mode=0o700)
    (home / "api-token").write_text("stale-token-of-another-up\n")
    result = corral(api, "launch", str(task_file), token=None, home=home)
    assert result.returncode == 2
    assert f"the token read from {home / 'api-token'}" in result.stderr
    assert "CORRAL_API_TOKEN" not in result.stderr
    assert "stale-token-of-another-up" not in result.stderr + result.stdout


def test_wait_times_out_with_exit_3_while_pending(api: Api, task_file: Path) -> None:
    started = time.monotonic()
    result = corral(api, "launch", str(task_file), "--wait", "--timeout", "1")
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - started >= 1
    lines = result.stdout.splitlines()
    assert ID.match(lines[0])
    assert sum("accepted: cli-hello" in line for line in lines) == 1  # each line once
    assert "still PENDING" in result.stderr


def test_wait_ends_with_exit_1_when_the_request_is_cancelled(api: Api, task_file: Path) -> None:
    proc = subprocess.Popen(
        [CORRAL, "launch", str(task_file), "--wait", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(CORRAL_HOME=str(api.home), CORRAL_API_URL=api.url, CORRAL_API_TOKEN=TOKEN),
    )  # fmt: skip
    request_id = _read_line(proc, 30).strip()
    assert ID.match(request_id)
    cancelled = corral(api, "terminate", request_id)
    assert cancelled.returncode == 0 and "CANCELLED" in cancelled.stdout
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1, stderr
    assert f"request {request_id}: CANCELLED" in stdout


def test_unknown_id_is_exit_2(api: Api) -> None:
    commands = (("status", "r-nope"), ("logs", "r-nope"), ("terminate", "r-nope"))
    results = at_once(*(partial(corral, api, *args) for args in commands))
    for args, result in zip(commands, results, strict=True):
        assert result.returncode == 2, args
        assert "r-nope" in result.stderr


def test_instances_and_logs_of_a_pending_request(api: Api, task_file: Path) -> None:
    request_id = _launch(api, task_file)
    instances, logs = at_once(
        partial(corral, api, "instances", "--request", request_id, "--json"),
        partial(corral, api, "logs", request_id, "--json"),
    )
    assert json.loads(instances.stdout) == {"instances": [], "count": 0}
    assert json.loads(logs.stdout) == {"request_id": request_id, "instance": None, "logs": ""}


def test_address_and_token_may_come_from_the_home_files(
    api: Api, task_file: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "api-url").write_text(api.url + "\n")
    (home / "api-token").write_text(TOKEN + "\n")
    result = corral(None, "launch", str(task_file), "-d", token=None, home=home)
    assert result.returncode == 0, result.stderr
    assert ID.match(result.stdout.strip())


def test_no_api_configured_is_exit_2(task_file: Path, tmp_path: Path) -> None:
    result = corral(None, "status", token=None, home=tmp_path)
    assert result.returncode == 2
    assert "no Corral API address: run `corral up` or set CORRAL_API_URL" in result.stderr


def test_api_down_is_exit_1_in_one_line(task_file: Path, tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{_free_port()}"
    result = corral(None, "launch", str(task_file), home=tmp_path, CORRAL_API_URL=down)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cannot reach the Corral API" in result.stderr
    assert "Traceback" not in result.stderr


# ---- the Python client against the same API -----------------------------------------------


def test_the_clients_errors_are_the_ones_the_cli_maps(api: Api, tmp_path: Path) -> None:
    with Client(api.url, TOKEN) as client:
        with pytest.raises(NotFound, match="r-nope"):
            client.status("r-nope")
        with pytest.raises(InvalidTask) as invalid:
            client.launch("resources:\n  cloud: local\n  instanse_type: cpu-2\n")
        [issue] = invalid.value.issues
        assert (issue["line"], issue["field"]) == (3, "resources.instanse_type")
        with pytest.raises(Impossible) as impossible:
            client.launch({"resources": {"cloud": "local", "accelerators": "H100:64"}})
        assert impossible.value.reasons
        pending = client.launch(TASK)  # no worker runs here: it stays PENDING
        with pytest.raises(WaitTimeout) as late:
            client.wait(pending.id, timeout_s=0.3)
        assert (late.value.request.id, late.value.request.state) == (pending.id, "PENDING")
    with Client(api.url, "wrong-token") as wrong, pytest.raises(Unauthorized):
        wrong.launch(TASK)
    with pytest.raises(ApiUnreachable):
        Client(f"http://127.0.0.1:{_free_port()}").health()
    with pytest.raises(NoApiAddress):
        Client.from_settings(Settings(home=tmp_path, api_url=None))


def test_pools_and_clusters_through_the_client(api: Api) -> None:
    spec = yaml.safe_load((REPO / "examples/pools/machine-pool.yaml").read_text())
    lab = (REPO / "examples/clusters/local-lab.yaml").read_text()
    with Client(api.url, TOKEN) as client:
        applied = client.apply_pool("client-pool", "machine_pool", spec, "machine-pool.yaml")
        assert (applied.name, applied.cloud, applied.replaced) == ("client-pool", "local", False)
        types = ["reserved-a100", "spot-a100", "ondemand-a100"]
        assert [t.machine_type for t in applied.machine_types or []] == types
        assert "client-pool" in [p.name for p in client.pools()]
        assert client.pool("client-pool").machine_types == applied.machine_types
        assert client.delete_pool("client-pool").deleted is True
        with pytest.raises(NotFound):
            client.pool("client-pool")

        made = client.create_cluster(lab, "local-lab.yaml", cloud="local", name="client-lab")
        assert (made.name, made.state, made.cloud) == ("client-lab", "active", "local")
        with pytest.raises(Conflict):
            client.create_cluster(lab, "local-lab.yaml", cloud="local", name="client-lab")
        assert "client-lab" in [c.name for c in client.clusters()]
        view = client.cluster("client-lab")
        assert view.nodes == [] and view.demand is None
        demand = client.set_demand("client-lab", "bundles: [{resources: {CPU: 2}, count: 3}]\n")
        assert demand.demand is not None and demand.demand["bundles"][0]["count"] == 3
        assert client.delete_cluster("client-lab").state == "down"


# ---- CLI habits: status --watch, completion, version ----------------------------------------


def test_status_watch_prints_each_change_until_the_request_ended(api: Api, task_file: Path) -> None:
    request_id = _launch(api, task_file)
    proc = subprocess.Popen(
        [CORRAL, "status", request_id, "--watch", "--interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(CORRAL_HOME=str(api.home), CORRAL_API_URL=api.url, CORRAL_API_TOKEN=TOKEN),
    )  # fmt: skip
    assert _read_line(proc, 30).startswith("--- ")  # a snapshot's time
    assert _read_line(proc, 30).split() == [request_id, "PENDING"]
    time.sleep(0.6)  # a few refreshes with nothing new: nothing printed
    assert corral(api, "terminate", request_id).returncode == 0
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert stdout.splitlines()[0].startswith("--- ")
    assert stdout.splitlines()[1].split() == [request_id, "CANCELLED"]
    assert "PENDING" not in stdout  # each state printed once

    watched = corral(api, "status", request_id, "--watch", "--json")  # ended: one line, done
    assert watched.returncode == 0, watched.stderr
    [line] = watched.stdout.splitlines()
    assert json.loads(line)["state"] == "CANCELLED"


def _complete(api_url: str, home: Path, words: str) -> list[str]:
    """The candidates bash is given when it asks ``corral`` to complete ``words``."""
    env = _env(
        CORRAL_HOME=str(home), CORRAL_API_URL=api_url, CORRAL_API_TOKEN=TOKEN,
        _CORRAL_COMPLETE="complete_bash", COMP_WORDS=words,
        COMP_CWORD=str(len(words.split()) - 1),
    )  # fmt: skip
    done = subprocess.run([CORRAL], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_request_ids_complete_in_the_shell(api: Api, task_file: Path, tmp_path: Path) -> None:
    request_id = _launch(api, task_file)
    down = f"http://127.0.0.1:{_free_port()}"
    status, why, other, unanswered = at_once(
        partial(_complete, api.url, api.home, "corral status r-"),
        partial(_complete, api.url, api.home, "corral why r-"),
        partial(_complete, api.url, api.home, "corral status x-"),
        partial(_complete, down, tmp_path, "corral status r-"),
    )
    assert request_id in status  # (logs and terminate take the same argument)
    assert request_id in why
    assert other == []
    assert unanswered == []  # no API answering: no candidates, and no error either


def test_version_names_the_dependencies_and_the_redis_server(api: Api, tmp_path: Path) -> None:
    # A home with the address `corral up` leaves there, password and all (nothing answers at
    # it), and one with none.
    up_home, bare = tmp_path / "up", tmp_path / "bare"
    up_home.mkdir()
    bare.mkdir()
    (up_home / "redis-url").write_text(f"redis://:hunter2@127.0.0.1:{_free_port()}/0\n")
    done, shown, down, unset = at_once(
        partial(corral, None, "version", "--json", home=bare, CORRAL_REDIS_URL=api.redis_url),
        partial(corral, None, "version", home=bare, CORRAL_REDIS_URL=api.redis_url),
        partial(corral, None, "version", home=up_home),
        partial(corral, None, "version", home=bare),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["corral"] == metadata.version("corral")
    for name in ("celery", "kombu", "redis", "pydantic", "fastapi", "boto3", "flower"):
        assert report["dependencies"][name] == metadata.version(name), name
    assert report["dependencies"]["google-cloud-compute"] == metadata.version(
        "google-cloud-compute"
    )
    server = redis.Redis.from_url(api.redis_url).info("server")["redis_version"]
    assert report["redis_server"] == {"url": api.redis_url, "version": server, "error": None}
    assert f"redis-server {server} at {api.redis_url}" in shown.stdout.splitlines()
    assert f"celery {metadata.version('celery')}" in " ".join(shown.stdout.split())

    # The address from the home, password masked; nothing answers there.
    assert down.returncode == 0, down.stderr
    assert "redis-server: no answer at redis://:***@127.0.0.1:" in down.stdout
    assert "hunter2" not in down.stdout + down.stderr
    assert "redis-server: none configured" in unset.stdout


def _launch_and_interrupt(
    api: Api, task_file: Path, *flags: str, second: bool = False, answer: str = ""
) -> tuple[subprocess.CompletedProcess[str], str]:
    """`corral launch` following a request (PENDING: no worker runs here), then Ctrl-C
    (SIGINT, as a terminal sends it); ``second``: another within the 2 s it offers, and
    ``answer`` on standard input to its question. The result and the request's id."""
    env = _env(CORRAL_HOME=str(api.home), CORRAL_API_URL=api.url, CORRAL_API_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [CORRAL, "launch", str(task_file), *flags], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    rid = _read_line(proc, 30).strip()
    assert ID.match(rid), rid
    time.sleep(0.5)  # following now
    proc.send_signal(2)
    if second:
        assert proc.stderr is not None
        deadline = time.monotonic() + 10
        seen = ""
        while "interrupted:" not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr.fileno()], [], [], 1)[0]:
                seen += os.read(proc.stderr.fileno(), 4096).decode()
        assert "interrupted:" in seen, seen
        proc.send_signal(2)  # within the 2 s the first one opened
        time.sleep(0.3)
    out, rest = proc.communicate(answer, timeout=30)
    stderr = (seen if second else "") + rest
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, stderr), rid


def test_ctrl_c_in_launch_says_the_request_keeps_going_and_how_to_stop_it(
    api: Api, task_file: Path
) -> None:
    done, rid = _launch_and_interrupt(api, task_file)
    assert done.returncode == 130, done.stderr
    assert f"request {rid} keeps going (PENDING)" in done.stderr
    assert f"corral terminate {rid}" in done.stderr
    assert "Traceback" not in done.stderr
    assert corral(api, "status", rid, "--json").stdout.count('"PENDING"') == 1


def test_a_second_ctrl_c_within_2_s_offers_to_terminate(api: Api, task_file: Path) -> None:
    kept, kept_id = _launch_and_interrupt(api, task_file, second=True, answer="n\n")
    assert kept.returncode == 130, kept.stderr
    assert f"Terminate request {kept_id}?" in kept.stderr and "keeps going" in kept.stderr
    assert json.loads(corral(api, "status", kept_id, "--json").stdout)["state"] == "PENDING"

    stopped, stopped_id = _launch_and_interrupt(api, task_file, second=True, answer="y\n")
    assert stopped.returncode == 130, stopped.stderr
    assert f"terminating request {stopped_id}" in stopped.stderr
    state = json.loads(corral(api, "status", stopped_id, "--json").stdout)["state"]
    assert state == "CANCELLED"


def test_down_on_interrupt_terminates_at_the_first_ctrl_c(api: Api, task_file: Path) -> None:
    done, rid = _launch_and_interrupt(api, task_file, "--down-on-interrupt")
    assert done.returncode == 130, done.stderr
    assert f"terminating request {rid}" in done.stderr
    assert json.loads(corral(api, "status", rid, "--json").stdout)["state"] == "CANCELLED"
