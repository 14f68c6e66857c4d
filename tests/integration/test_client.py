"""Corral used from programs, against one real installation (tests/harness.py: the API, a
scheduling and a provisioning worker and beat as processes, over the test's own
redis-server, launching onto the local cloud):

- another Celery application, a Celery() of its own in this process that loads no Corral
  code, sends ``corral.schedule.submit`` onto the ``schedule`` queue; the request runs, and
  the outcome (or the refusal) is read through the API under the idempotency key;
- the typed client launches, waits, follows logs and terminates.

The installation is started once for the module (its start is most of the cost).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from celery import Celery

from corral.services.client import (
    Client,
    ClientError,
    Impossible,
    InstanceRow,
    InvalidTask,
    RequestView,
    SubmissionView,
)
from corral.services.settings import default_machines_dir

from harness import CORRAL, LOCAL_ONLY, System, at_once, kill_agents, wait_for

pytestmark = pytest.mark.integration

LOCAL_CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"
SERVICE = {"name": "queued-svc", "resources": {"cloud": "local", "instance_type": "cpu-2"}}
INVALID_YAML = "name: typo\nresources:\n  cloud: local\n  instanse_type: cpu-2\n"
WARM_UP = {
    "name": "warm-up",
    "resources": {"cloud": "local", "instance_type": "cpu-2"},
    "run": "true",
}
T = TypeVar("T")
IMPOSSIBLE = {"resources": {"cloud": "local", "accelerators": "H100:64"}, "run": "true"}


@pytest.fixture(scope="module")
def system(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("client-home")
    # The local cloud alone: every test launches there, and each process of the installation
    # would otherwise load the other clouds' SDKs to find it has no credentials for them.
    system = System(home, redis_server.url, LOCAL_CLOUD, LOCAL_ONLY)
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_beat()
        with Client(system.api_url, system.token, timeout_s=120) as warm:
            # The API's first submit (imports, the catalog) takes seconds on a busy machine:
            # pay it here, not under the CLI's 10 s timeout in whichever test comes first.
            warm.wait(warm.launch(WARM_UP).id, timeout_s=120)
        yield system
    finally:
        system.stop(grace_s=0)
        kill_agents(system)


@pytest.fixture
def client(system: System) -> Iterator[Client]:
    with Client(system.api_url, system.token, timeout_s=30) as client:
        yield client


@pytest.fixture(scope="module")
def producer(system: System) -> Iterator[Celery]:
    """Another application's Celery: its own app, its own name, only the broker's address
    in common with Corral (and the task's name and queue, as documented)."""
    app = Celery("orders-service", broker=system.env["CORRAL_REDIS_URL"], set_as_current=False)
    yield app
    app.close()


def _send(producer: Celery, task: Any, key: str) -> None:
    producer.send_task("corral.schedule.submit", args=[task, key], queue="schedule")


def _outcome(client: Client, key: str, received: int = 1) -> SubmissionView:
    """The submission under ``key`` once the scheduling worker has taken ``received`` of
    its messages."""
    seen: list[SubmissionView] = []

    def taken() -> bool:
        found = client.submission(key)
        seen[:] = [found] if found is not None else []
        return found is not None and found.received >= received

    wait_for(taken, 30, f"{received} submission(s) under {key!r} to be taken")
    return seen[0]


def test_a_task_sent_from_another_celery_app_runs_and_a_duplicate_creates_nothing(
    client: Client, producer: Celery
) -> None:
    _send(producer, SERVICE, "order-1")
    accepted = _outcome(client, "order-1")
    assert accepted.state == "accepted" and accepted.refusal is None
    assert accepted.request_id is not None
    running = client.wait(accepted.request_id, timeout_s=60)
    assert running.state == "RUNNING" and running.name == "queued-svc"
    assert [i.state for i in running.instances] == ["RUNNING"]

    # The same message again, and another document under the same key: nothing is created.
    _send(producer, SERVICE, "order-1")
    _send(producer, {**SERVICE, "name": "other"}, "order-1")
    again = _outcome(client, "order-1", received=3)
    assert again.request_id == accepted.request_id
    mine = [r for r in client.list_requests() if r.name in ("queued-svc", "other")]
    assert [r.id for r in mine] == [accepted.request_id]
    texts = [e.text for e in client.events(accepted.request_id).events]
    assert sum(t.startswith("accepted:") for t in texts) == 1
    assert client.status(accepted.request_id).state == "RUNNING"

    client.terminate(accepted.request_id)
    wait_for(lambda: client.status(accepted.request_id).ended, 30, "the service to end")


def test_a_refused_document_on_the_queue_reads_as_the_api_refuses_it(
    client: Client, producer: Celery
) -> None:
    _send(producer, INVALID_YAML, "order-2")  # YAML text: its lines are known
    _send(producer, IMPOSSIBLE, "order-3")
    _send(producer, ["not", "a", "task"], "order-4")
    invalid, impossible, shapeless = (_outcome(client, f"order-{n}") for n in (2, 3, 4))
    with pytest.raises(InvalidTask) as by_api:
        client.launch(INVALID_YAML)
    assert invalid.state == "refused" and invalid.request_id is None
    assert invalid.refusal == by_api.value.detail  # the same check, the same words
    [issue] = by_api.value.issues
    assert (issue["line"], issue["field"]) == (4, "resources.instanse_type")
    with pytest.raises(Impossible) as impossible_by_api:
        client.launch(IMPOSSIBLE)
    assert impossible.refusal == impossible_by_api.value.detail
    assert shapeless.refusal is not None and shapeless.refusal["error"] == "invalid task"

    # The document fixed and sent again under the same key is accepted.
    _send(producer, INVALID_YAML.replace("instanse_type", "instance_type"), "order-2")
    fixed = _outcome(client, "order-2", received=2)
    assert fixed.state == "accepted" and fixed.request is not None
    assert fixed.request.name == "typo"
    client.terminate(str(fixed.request_id))


def test_the_client_launches_waits_follows_logs_and_terminates(
    client: Client, tmp_path: Path
) -> None:
    job = client.launch(
        {
            "name": "counted",
            "resources": {"cloud": "local", "instance_type": "cpu-2"},
            "run": "echo line-1; sleep 3; echo line-2",
        }
    )
    assert isinstance(job, RequestView) and job.state == "PENDING"
    progress: list[str] = []
    ran = client.wait(job.id, timeout_s=60, on_event=lambda e: progress.append(e.text))
    assert ran.state in ("RUNNING", "SUCCEEDED")
    assert progress[0] == "accepted: counted"
    pieces = list(client.follow_logs(job.id, interval_s=0.3))
    text = "".join(pieces)
    assert text.index("line-1") < text.index("line-2")
    if ran.state == "RUNNING":  # followed while it ran: the output came in parts
        assert len([p for p in pieces if p]) >= 2, pieces
    done = client.status(job.id)
    assert (done.state, done.exit_code) == ("SUCCEEDED", 0)

    task_file = tmp_path / "svc.yaml"
    task_file.write_text("name: from-file\nresources:\n  cloud: local\n  cpus: 2\n")
    service = client.launch(task_file, idempotency_key="svc-from-file")
    assert client.launch(task_file, idempotency_key="svc-from-file").id == service.id
    running = client.wait(service.id, timeout_s=60)
    assert running.state == "RUNNING"
    [row] = client.instances(request_id=service.id)
    assert isinstance(row, InstanceRow) and row.request_id == service.id
    assert row.id == running.instances[0].id and row.state == "RUNNING"
    stopping = client.terminate(service.id)
    assert stopping.id == service.id
    wait_for(lambda: client.status(service.id).state == "TERMINATED", 30, "the service to end")


def test_logs_follow_gives_each_line_of_a_two_node_job_once(system: System) -> None:
    """Issue 24: `corral logs -f` on a 2-node job printed "rank 0 step 1" six times between
    "output was replaced" markers. Each node is followed from its own offset: every line comes
    exactly once, prefixed by its node, while both nodes write at their own pace."""
    task = {
        "name": "two-ranks",
        "num_nodes": 2,
        "resources": {"cloud": "local", "instance_type": "cpu-2"},
        "run": 'for i in 1 2 3 4 5; do echo "rank $CORRAL_NODE_RANK step $i"; '
        "sleep 0.$((CORRAL_NODE_RANK * 3 + 4)); done",
    }
    with Client(system.api_url, system.token, timeout_s=30) as client:
        job = client.launch(task)
    follower = subprocess.Popen(
        [CORRAL, "logs", job.id, "--follow"],
        env={**system.env, "CORRAL_API_URL": system.api_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = follower.communicate(timeout=90)  # it ends by itself once the job ended
    assert follower.returncode == 0, err
    lines = [line for line in out.splitlines() if "step" in line]
    expected = [f"(node {r}) rank {r} step {i}" for r in (0, 1) for i in range(1, 6)]
    assert sorted(lines) == sorted(expected), out
    for rank in (0, 1):  # each node's lines in their own order
        mine = [line for line in lines if line.startswith(f"(node {rank})")]
        assert mine == [f"(node {rank}) rank {rank} step {i}" for i in range(1, 6)], out
    assert "replaced" not in out


def _cli(
    system: System,
    *args: str,
    cwd: Path | None = None,
    stdin: str | None = None,
    timeout_s: float = 90,
) -> subprocess.CompletedProcess[str]:
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    return subprocess.run(
        [CORRAL, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _down(system: System, request_id: str) -> None:
    """A test's cleanup: the request terminated through the API (no CLI process for it); one
    that ended already is refused, as `corral down` would be, and that is fine here."""
    with Client(system.api_url, system.token, timeout_s=30) as client, suppress(ClientError):
        client.terminate(request_id)


def test_launch_follows_a_job_to_its_end_and_exits_with_its_exit_code(
    system: System, tmp_path: Path
) -> None:
    """Issue 24: `corral launch` returned at RUNNING; SkyPilot's follows the job's output to the
    end. A job that exits 3 prints its output and exits 3; one that succeeds exits 0;
    --detach prints the id and returns at once."""
    failing = tmp_path / "fails.yaml"
    failing.write_text(
        "name: exits-3\nresources: {cloud: local, instance_type: cpu-2}\n"
        "run: 'echo first-line; sleep 2; echo last-line; exit 3'\n"
    )
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: ok\nresources: {cloud: local, instance_type: cpu-2}\nrun: echo fine\n")
    done, fine, detached = at_once(
        partial(_cli, system, "launch", str(failing)),
        partial(_cli, system, "launch", str(ok)),
        partial(_cli, system, "launch", str(ok), "--detach"),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.index("first-line") < done.stdout.index("last-line")
    assert done.stdout.count("last-line") == 1
    assert "FAILED" in done.stdout

    assert fine.returncode == 0 and "fine" in fine.stdout, fine.stdout + fine.stderr

    assert detached.returncode == 0 and detached.stdout.strip().startswith("r-"), detached


def test_terminate_takes_several_ids_and_down_all_takes_everything_down(system: System) -> None:
    # Launched through the API: the commands under test are terminate and down.
    svc = {"resources": {"cloud": "local", "instance_type": "cpu-2"}}  # no run: a service
    with Client(system.api_url, system.token, timeout_s=30) as client:
        ids = [client.launch(svc).id for _ in range(3)]
        for rid in ids:
            assert client.wait(rid, timeout_s=60).state == "RUNNING"
    two = _cli(system, "terminate", ids[0], ids[1], "--json")
    assert two.returncode == 0, two.stderr
    assert [v["id"] for v in json.loads(two.stdout)["requests"]] == ids[:2]
    gone = _cli(system, "terminate", ids[0], "r-nope")
    assert gone.returncode == 2 and "r-nope" in gone.stderr  # the known one still answered
    down = _cli(system, "down", "--all", "--json")
    assert down.returncode == 0, down.stderr
    assert ids[2] in [v["id"] for v in json.loads(down.stdout)["requests"]]
    with Client(system.api_url, system.token, timeout_s=30) as client:
        wait_for(lambda: all(client.status(rid).ended for rid in ids), 60, "all three to end")
    assert _cli(system, "down").returncode == 2  # neither ids nor --all


def test_a_services_port_answers_at_the_endpoint_status_prints(
    system: System, tmp_path: Path
) -> None:
    """Issue 24: a service's ports were ignored and it had no endpoint. On the local cloud the
    machine shares this host's network: the endpoint is 127.0.0.1:PORT, in `status --json`
    and the table, and the service answers there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    svc = tmp_path / "web.yaml"
    svc.write_text(
        "name: web\nworkload_type: service\n"
        f"resources: {{cloud: local, instance_type: cpu-2, ports: {port}}}\n"
        f"run: exec python3 -m http.server {port} --bind 127.0.0.1\n"
    )
    rid = _cli(system, "launch", str(svc)).stdout.split()[0]  # a service: back once RUNNING
    try:
        shown = json.loads(_cli(system, "status", rid, "--json").stdout)
        assert shown["state"] == "RUNNING"
        assert shown["endpoints"] == [f"127.0.0.1:{port}"]
        assert shown["instances"][0]["address"] == "127.0.0.1"
        assert f"127.0.0.1:{port}" in _cli(system, "status", rid).stdout

        def answers() -> bool:
            try:
                return httpx.get(f"http://{shown['endpoints'][0]}/", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, 30, "the service to answer at its endpoint")
    finally:
        _down(system, rid)


def test_workdir_and_file_mounts_reach_the_node_and_run_starts_in_the_workdir(
    system: System, tmp_path: Path
) -> None:
    """Issue 24: `workdir: .` was not synced (run started where `corral up` did) and file
    mounts were accepted and ignored. corral launch packs them (relative to where it runs),
    the node unpacks them into its own folder, and run starts in the workdir."""
    project = tmp_path / "project"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "src" / "deep" / "data.txt").write_text("nested-content\n")
    (project / ".git").mkdir()
    (project / ".git" / "junk").write_text("never shipped\n")
    weights = tmp_path / "weights.bin"
    weights.write_text("weights-content\n")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "a.yaml").write_text("lr: 0.1\n")
    (project / "job.yaml").write_text(
        "name: files\nworkdir: .\n"
        "resources: {cloud: local, instance_type: cpu-2}\n"
        f"file_mounts:\n  ~/weights.bin: {weights}\n  /etc/app/configs: {configs}\n"
        "run: |\n"
        "  cat src/deep/data.txt\n"
        "  test ! -e .git && echo no-git\n"
        "  basename $PWD\n"
        "  cat ~/weights.bin\n"
        "  cat /etc/app/configs/a.yaml 2>/dev/null || cat ~/etc/app/configs/a.yaml\n"
        "  test -f ~/weights.bin && test -f ~/etc/app/configs/a.yaml && echo in-its-folder\n"
        "  echo HOME=$HOME\n"
    )
    done = _cli(system, "launch", "job.yaml", cwd=project, timeout_s=120)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "nested-content" in out and "no-git" in out and "sky_workdir" in out
    assert "weights-content" in out and "lr: 0.1" in out
    # `~` and absolute targets land in the machine's own folder, which is its HOME: outside
    # Corral's home since issue #47 (item 4), removed with the machine as a VM's disk is.
    assert "in-its-folder" in out
    [home] = [line.split("=", 1)[1] for line in out.splitlines() if line.startswith("HOME=")]
    assert Path(home).parent == default_machines_dir(system.home)
    assert not Path(home).is_relative_to(system.home)


def test_a_git_workdir_is_cloned_at_its_ref(system: System, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "version.txt").write_text("first\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    subprocess.run([*git, "tag", "v1"], check=True)
    (repo / "version.txt").write_text("second\n")
    subprocess.run([*git, "commit", "-qam", "second"], check=True)
    job = tmp_path / "git.yaml"
    job.write_text(
        f"workdir: {{url: 'file://{repo}', ref: v1}}\n"
        "resources: {cloud: local, instance_type: cpu-2}\nrun: cat version.txt\n"
    )
    done = _cli(system, "launch", str(job))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first" in done.stdout and "second" not in done.stdout


def test_files_corral_cannot_ship_are_refused_naming_the_field(
    system: System, tmp_path: Path
) -> None:
    cases = [
        ("gs://bucket/key", "gs:// sources are not supported yet"),
        ("r2://bucket/key", "r2:// sources are not supported yet"),
        ("{name: data, mode: MOUNT}", "a storage mapping (mode: MOUNT or COPY) is not supported"),
        ("s3://", "expected s3://BUCKET[/KEY]"),
    ]
    jobs = [tmp_path / f"mounts-{n}.yaml" for n in range(len(cases))]
    for job, (source, _) in zip(jobs, cases, strict=True):
        job.write_text(
            "resources: {cloud: local, instance_type: cpu-2}\n"
            f"file_mounts: {{/data: {source}}}\nrun: 'true'\n"
        )
    refused = at_once(*(partial(_cli, system, "launch", str(job)) for job in jobs))
    for job, (_, said), done in zip(jobs, cases, refused, strict=True):
        assert done.returncode == 2, done.stderr
        assert f"{job}" in done.stderr and "file_mounts" in done.stderr, done.stderr
        assert said in done.stderr and "/data" in done.stderr, done.stderr
    job = tmp_path / "big.yaml"
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob").write_bytes(os.urandom(300_000))
    job.write_text(f"workdir: {big}\nresources: {{cloud: local, instance_type: cpu-2}}\n")
    env = {**system.env, "CORRAL_API_URL": system.api_url, "CORRAL_BUNDLE_MAX_BYTES": "100000"}
    done = subprocess.run(
        [CORRAL, "launch", str(job)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "over the limit of 100,000" in done.stderr, done.stderr


def test_exec_runs_a_command_on_a_running_node_and_returns_its_exit_code(system: System) -> None:
    """Issue 24: a way in. `corral exec ID -- CMD` goes through the machine's agent: the
    command runs with the task's environment, its output (stdout and stderr) streams back and
    its exit code is the command's."""
    rid = _service(
        system,
        "resources: {cloud: local, instance_type: cpu-2}\nenvs: {GREETING: hello-from-task}\n",
    )
    try:
        # Each exec is its own command on the node, with its own output and exit code.
        done, two, no_node = at_once(
            partial(
                _cli, system, "exec", rid, "--", 'echo "$GREETING"; echo to-stderr >&2; exit 5'
            ),
            partial(_cli, system, "exec", rid, "--", "echo", "two words"),
            partial(_cli, system, "exec", rid, "--node", "3", "--", "true"),
        )
        assert done.returncode == 5, done.stdout + done.stderr
        assert "hello-from-task" in done.stdout and "to-stderr" in done.stdout
        assert "two words" not in done.stdout
        assert two.returncode == 0 and "two words" in two.stdout
        assert "hello-from-task" not in two.stdout
        assert no_node.returncode == 2
    finally:
        _down(system, rid)


def _service(system: System, text: str) -> str:
    """A service (``text``: its YAML) launched on the local cloud, RUNNING: its request id.
    Launched through the API: the tests that use it are about what comes after."""
    with Client(system.api_url, system.token, timeout_s=30) as client:
        rid = client.launch(text).id
        assert client.wait(rid, timeout_s=60).state == "RUNNING"
    return rid


def test_attach_relays_a_shell_through_the_agent_and_returns_its_exit_code(system: System) -> None:
    """Issue 24: a way in. `corral attach ID` is a shell on the node relayed through the API
    and the agent (docs/attach.md). Without a terminal, stdin is the shell's script: its
    output comes back and its exit code is the command's."""
    rid = _service(
        system,
        "resources: {cloud: local, instance_type: cpu-2}\nenvs: {GREETING: hello-attach}\n",
    )
    # a larger stdin than one write, and its output back in order
    script = "".join(f"echo line-{i}\n" for i in range(5000))
    try:
        # Each attach is a shell of its own on the node: neither sees the other's lines.
        done, big, no_node = at_once(
            partial(_cli, system, "attach", rid, stdin='echo hi; echo "$GREETING"; exit 3\n'),
            partial(_cli, system, "attach", rid, stdin=script),
            partial(_cli, system, "attach", rid, "--node", "2"),
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert done.stdout.splitlines() == ["hi", "hello-attach"]
        assert big.returncode == 0, big.stderr
        assert big.stdout.splitlines() == [f"line-{i}" for i in range(5000)]
        assert no_node.returncode == 2
    finally:
        _down(system, rid)


def test_attach_with_a_terminal_gives_the_shell_a_pty_of_its_size(system: System) -> None:
    """With a terminal (a pty here, 40 rows by 120 columns), attach puts it in raw mode and
    the shell on the node gets a pty of that size, resized when the terminal is; its exit
    code is the command's."""
    import fcntl
    import select
    import struct
    import termios

    rid = _service(system, "resources: {cloud: local, instance_type: cpu-2}\n")
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [CORRAL, "attach", rid],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    try:
        # Typed once the shell's prompt is there (raw mode flushes what was typed before it).
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        os.write(master, b"stty size; tty\r")
        while b"/dev/pts/" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        assert b"40 120" in seen, seen
        # The terminal is resized (SIGWINCH; the CLI has no controlling terminal here, so the
        # test sends it): the node's pty follows.
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 132, 0, 0))
        proc.send_signal(signal.SIGWINCH)
        # Asked until the node's pty has the new size (the resize travels through the API and
        # the agent), rather than a fixed pause: once a second, each answer read as it comes.
        resized = len(seen)
        while b"50 132" not in seen[resized:] and time.monotonic() < deadline:
            os.write(master, b"stty size\r")
            asked = time.monotonic()
            while b"50 132" not in seen[resized:] and time.monotonic() - asked < 1:
                if select.select([master], [], [], 0.2)[0]:
                    seen += os.read(master, 65536)
        os.write(master, b"exit 7\r")
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert proc.wait(10) == 7, seen
        assert b"50 132" in seen, seen
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
        _down(system, rid)


def test_port_forward_reaches_a_services_port_on_the_node(system: System, tmp_path: Path) -> None:
    """Issue 24: `corral port-forward ID PORT` listens on a local port; each connection is
    relayed through the API to 127.0.0.1:PORT on the node by its agent."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "hello.txt").write_text("hello through the relay\n")
    rid = _service(
        system,
        "resources: {cloud: local, instance_type: cpu-2}\n"
        f"run: cd {tmp_path / 'site'} && exec python3 -m http.server {port} --bind 127.0.0.1\n",
    )
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    forward = subprocess.Popen(
        [CORRAL, "port-forward", rid, str(port), "--local-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        assert line.startswith("Forwarding 127.0.0.1:"), line + forward.stderr.read()
        local = int(line.split()[1].split(":")[1])
        assert local != port

        def answers() -> bool:
            try:
                got = httpx.get(f"http://127.0.0.1:{local}/hello.txt", timeout=10)
            except httpx.HTTPError:
                return False
            return got.status_code == 200 and got.text == "hello through the relay\n"

        wait_for(answers, 60, "the service to answer through the forwarded port")
        # several connections at once, each its own session
        blob = os.urandom(300_000)
        (tmp_path / "site" / "blob.bin").write_bytes(blob)

        def fetch(_: int) -> bytes:
            return httpx.get(f"http://127.0.0.1:{local}/blob.bin", timeout=30).content

        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(fetch, range(3))) == [blob] * 3
    finally:
        forward.terminate()
        forward.wait(10)
        _down(system, rid)


FAKE_DOCKER = """#!/usr/bin/env python3
# A stand-in for docker's CLI: records its argv, and runs what `docker exec` is given on the
# host (in -w's folder, the -e variables from its own environment, as docker passes them).
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[0] == "exec":
    rest, cwd = args[1:], None
    while rest[0].startswith("-"):
        if rest[0] in ("-i", "-t"):
            rest = rest[1:]
            continue
        if rest[0] == "-w":
            cwd = rest[1]
        rest = rest[2:]  # -w DIR, -e NAME
    if cwd:
        os.chdir(cwd)
    os.environ["IN_FAKE_CONTAINER"] = rest[0]
    os.execvp(rest[1], rest[1:])
if args[0] == "run":
    print("0123456789ab")
"""


def test_a_docker_image_runs_setup_and_run_in_its_container(system: System, tmp_path: Path) -> None:
    """Issue 24: `image_id: docker:<image>` was dropped. The node starts the container (the
    host's network, the workdir mounted at its own path) and setup and run go into it with
    docker exec; the container is removed at the end. Docker's engine is not on this machine:
    a fake `docker` first on the task's PATH records its argv and runs the command itself."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    calls = tmp_path / "docker-calls.jsonl"
    project = tmp_path / "project"
    project.mkdir()
    (project / "marker.txt").write_text("from-the-workdir\n")
    (project / "job.yaml").write_text(
        "workdir: .\n"
        "resources: {cloud: local, instance_type: cpu-2, image_id: 'docker:ubuntu:22.04'}\n"
        f"envs: {{PATH: '{bin_dir}:{os.environ['PATH']}', FAKE_DOCKER_LOG: '{calls}', "
        "SECRETISH: s3cr3t-value}\n"
        "setup: echo setup-in-$IN_FAKE_CONTAINER\n"
        "run: cat marker.txt; echo run-in-$IN_FAKE_CONTAINER; echo $SECRETISH; exit 4\n"
    )
    done = _cli(system, "launch", "job.yaml", cwd=project, timeout_s=120)
    assert done.returncode == 4, done.stdout + done.stderr
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    run, setup, job, rm = argvs
    name = run[run.index("--name") + 1]
    assert name.startswith("corral-")
    assert run[:2] == ["run", "-d"] and run[-3:] == ["ubuntu:22.04", "sleep", "infinity"]
    assert run[run.index("--network") + 1] == "host"
    mount = run[run.index("-v") + 1]
    workdir = mount.split(":")[0]
    assert mount == f"{workdir}:{workdir}" and workdir.endswith("sky_workdir")
    assert setup[0] == "exec" and setup[-3:-1] == ["bash", "-c"] and name in setup
    assert job[job.index("-w") + 1] == workdir
    assert job[job.index("SECRETISH") - 1] == "-e" and "s3cr3t" not in json.dumps(argvs)
    assert rm == ["rm", "-f", name]
    out = done.stdout
    assert f"setup-in-{name}" in out and f"run-in-{name}" in out
    assert "from-the-workdir" in out and "s3cr3t-value" in out


def test_exec_and_attach_reach_inside_a_services_container(system: System, tmp_path: Path) -> None:
    """With `docker:<image>`, corral exec and attach run in the task's container, where its
    setup ran (docker exec; -i for attach's stdin), not on the machine beside it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    calls = tmp_path / "docker-calls.jsonl"
    rid = _service(
        system,
        "resources: {cloud: local, instance_type: cpu-2, image_id: 'docker:ubuntu:22.04'}\n"
        f"envs: {{PATH: '{bin_dir}:{os.environ['PATH']}', FAKE_DOCKER_LOG: '{calls}'}}\n",
    )
    try:
        ran, attached = at_once(
            partial(_cli, system, "exec", rid, "--", "echo exec-in-$IN_FAKE_CONTAINER; exit 2"),
            partial(_cli, system, "attach", rid, stdin="echo attach-in-$IN_FAKE_CONTAINER\n"),
        )
        assert ran.returncode == 2 and "exec-in-corral-" in ran.stdout, ran.stdout + ran.stderr
        assert attached.returncode == 0, attached.stdout + attached.stderr
        assert attached.stdout.startswith("attach-in-corral-"), attached.stdout
        argvs = [json.loads(line) for line in calls.read_text().splitlines()]
        assert [a[0] for a in argvs] == ["run", "exec", "exec"]
        # The two ran at once, in either order: attach's is the one with stdin (-i), a shell.
        [shell] = [a for a in argvs[1:] if a[:2] == ["exec", "-i"]]
        assert shell[-1] == "bash"
    finally:
        _down(system, rid)


def test_a_docker_image_on_a_node_without_docker_fails_saying_so(
    system: System, tmp_path: Path
) -> None:
    """Never skipped silently: a node without docker ends its task at once, its log saying
    that docker is not installed on the node."""
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "bash").symlink_to("/bin/bash")
    job = tmp_path / "job.yaml"
    job.write_text(
        "resources: {cloud: local, instance_type: cpu-2, image_id: 'docker:ubuntu:22.04'}\n"
        f"envs: {{PATH: '{bare}'}}\nrun: echo never-on-the-host\n"
    )
    done = _cli(system, "launch", str(job))
    assert done.returncode != 0
    both = done.stdout + done.stderr
    assert "docker is not installed on the node" in both, both
    assert "never-on-the-host" not in both


def test_s3_file_mounts_are_copied_by_the_node_with_its_own_credentials(
    system: System, tmp_path: Path
) -> None:
    """Issue 24: s3:// sources in file_mounts were refused. The node's agent copies them
    before setup (a prefix as a folder, a key as a file) with the credentials the node has:
    here the task's envs pointing at moto's S3 server; Corral's own hold none for it."""
    import boto3

    from fakes.aws_faults import FaultyMoto

    with FaultyMoto() as moto:
        creds = {
            "AWS_ENDPOINT_URL": moto.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        s3 = boto3.client(
            "s3",
            endpoint_url=moto.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        s3.create_bucket(Bucket="corral-data")
        s3.put_object(Bucket="corral-data", Key="set/a.txt", Body=b"object-a\n")
        s3.put_object(Bucket="corral-data", Key="set/sub/b.txt", Body=b"object-b\n")
        s3.put_object(Bucket="corral-data", Key="model.bin", Body=b"weights-from-s3\n")
        envs = ", ".join(f"{k}: '{v}'" for k, v in creds.items())
        job = tmp_path / "s3.yaml"
        job.write_text(
            "resources: {cloud: local, instance_type: cpu-2}\n"
            f"envs: {{{envs}}}\n"
            "file_mounts:\n  /data: s3://corral-data/set\n  ~/model.bin: s3://corral-data/model.bin\n"
            "run: cat ~/data/a.txt ~/data/sub/b.txt ~/model.bin\n"
        )
        nothing = tmp_path / "s3-missing.yaml"
        nothing.write_text(
            "resources: {cloud: local, instance_type: cpu-2}\n"
            f"envs: {{{envs}}}\n"
            "file_mounts: {/data: s3://corral-data/nothing-here}\nrun: echo never-run\n"
        )
        done, missing = at_once(
            partial(_cli, system, "launch", str(job)), partial(_cli, system, "launch", str(nothing))
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "object-a\nobject-b\nweights-from-s3" in done.stdout
        both = missing.stdout + missing.stderr
        assert missing.returncode != 0 and "never-run" not in both
        assert "s3://corral-data/nothing-here: no such object" in both, both
