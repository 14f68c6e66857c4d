"""A real Corral installation for integration tests: the API, worker processes per role and
beat, started with the `corral` console script against the test's own redis-server."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from corral.services.providers.local.launcher import comm_name

from local_processes import is_agent, is_launcher
from zygote import Zygote

REPO = Path(__file__).resolve().parents[1]
CORRAL = str(Path(sys.executable).parent / "corral")
EXEC = os.environ.get("CORRAL_TEST_EXEC") == "1"  # every process exec'd, none forked
_ZYGOTE = Zygote()
atexit.register(_ZYGOTE.close)

FAST_TIMERS = {
    "HEARTBEAT_S": "0.2",
    "HEARTBEAT_TIMEOUT_S": "3",
    "RECONCILE_INTERVAL_S": "0.5",
    "ATTEMPT_DEADLINE_S": "15",
    "THROTTLE_BACKOFF_S": "0.1",
    "VISIBILITY_TIMEOUT_S": "20",
    "UNACKED_RESTORE_INTERVAL_S": "1",
    "BEAT_LOCK_TIMEOUT_S": "5",
    "BEAT_MAX_LOOP_INTERVAL_S": "0.5",
    "TERMINATE_GRACE_S": "2",
}

ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"})  # a request's last states
MACHINE_UP = frozenset({"REQUESTED", "RUNNING", "TERMINATING"})  # a machine that holds capacity

# The local cloud alone: without credentials AWS and GCP are left out of every route anyway,
# yet each API and worker process would import their SDKs to find that out (about 2 s of CPU
# per process for GCP's alone). Tests that exercise the other clouds name their own.
LOCAL_ONLY = {"CORRAL_CLOUDS": '["local"]'}


def one_zone_cloud(path: Path, capacity: int, boot_s: float = 0.0) -> Path:
    """Write a local cloud of one zone (lab-a) with room for ``capacity`` cpu-2 machines that
    take ``boot_s`` to boot; its path."""
    path.write_text(
        "instance_types:\n"
        "  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.10}\n"
        "regions:\n"
        "  - name: lab\n"
        "    zones:\n"
        f"      - {{name: lab-a, capacity: {{cpu-2: {capacity}}}, launch_delay_s: {boot_s}}}\n"
    )
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class System:
    """Processes of one Corral installation; everything it starts, it stops."""

    def __init__(
        self,
        home: Path,
        redis_url: str,
        local_cloud: Path,
        env: dict[str, str] | None = None,
        **timers: str,
    ) -> None:
        self.home = home
        self.token = "test-token-not-secret"
        self.env = dict(os.environ)
        self.env.update(
            {
                "CORRAL_HOME": str(home),
                "CORRAL_REDIS_URL": redis_url,
                "CORRAL_API_TOKEN": self.token,
                "CORRAL_LOCAL_CLOUD_FILE": str(local_cloud),
                "CORRAL_WORKER_CONCURRENCY": "2",
                # Tasks as the tests' user, so they may read and write the tests' folders;
                # the tests of tasks as users of their own set "own-user" (test_isolation.py).
                "CORRAL_LOCAL_TASKS_RUN_AS": "corral",
            }
        )
        self.env.update(env or {})
        for name, value in {**FAST_TIMERS, **timers}.items():
            self.env[f"CORRAL_TIMERS__{name.upper()}"] = str(value)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._api_url = ""
        self._api_pending = False  # started, not yet seen answering
        self._http: httpx.Client | None = None  # submit's and request's, kept open
        self._http_lock = threading.Lock()
        (home / "logs").mkdir(parents=True, exist_ok=True)

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start `corral ARGS` in a session of its own, its output in logs/NAME.log: forked
        from the zygote (tests/zygote.py: the imports done once), or, with CORRAL_TEST_EXEC=1,
        exec'd as `corral up` starts it."""
        path = self.home / "logs" / f"{name}.log"
        proc: Any
        if EXEC:
            with path.open("ab") as log:
                proc = subprocess.Popen(
                    [CORRAL, *args],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        else:
            proc = _ZYGOTE.spawn([CORRAL, *args], self.env, path)
        self.procs[name] = proc
        return proc  # type: ignore[no-any-return]

    def start_api(self, port: int | None = None) -> str:
        """Start the API on ``port`` (a free one by default; the same one to restart it) and
        return its address at once: it is waited for where it is first used (``api_url``,
        hence ``client``, ``cli``, ``submit``), so the workers and beat a test starts next
        load their modules while the API loads its own (each start-up is seconds of CPU)."""
        port = port or free_port()
        self._spawn("api", "run", "api", "--port", str(port))
        self._api_url = f"http://127.0.0.1:{port}"
        self._api_pending = True
        return self._api_url

    @property
    def api_url(self) -> str:
        """The API's address, once it answers ("" before any API was started)."""
        if self._api_pending:
            url = self._api_url
            wait_for(lambda: _ok(url), 60, "the API to answer", self.home / "logs")
            self._api_pending = False
        return self._api_url

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Stop one of the processes (a crash by default) and wait for it to be gone."""
        proc = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(10)

    def start_worker(
        self,
        role: str,
        name: str | None = None,
        concurrency: int = 2,
        metrics_port: int | None = None,
    ) -> subprocess.Popen[bytes]:
        name = name or f"{role}-{len([n for n in self.procs if n.startswith(role)])}"
        metrics = ["--metrics-port", str(metrics_port)] if metrics_port else []
        return self._spawn(
            name,
            "run",
            "worker",
            "--role",
            role,
            "--name",
            f"{name}@test",
            "--concurrency",
            str(concurrency),
            *metrics,
        )

    def start_beat(self, name: str = "beat") -> subprocess.Popen[bytes]:
        return self._spawn(name, "run", "beat")

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url, timeout=30, headers={"Authorization": f"Bearer {self.token}"}
        )

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(list(args), {**self.env, "CORRAL_API_URL": self.api_url}, timeout)

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call to the API on a client kept open: ``wait_state`` asks ten times a second,
        and a new client each time (its TLS context, its connection) cost the test process
        about 20 ms of CPU per ask, taken from the system under test. A connection the API
        dropped (a restart) is opened again once: for a read whatever failed, for a submit
        only a connection that was never made (a resent POST could create a second request)."""
        url = self.api_url
        retry_on = httpx.TransportError if method == "GET" else httpx.ConnectError
        for last in (False, True):
            with self._http_lock:  # tests submit from threads too
                if self._http is None:
                    self._http = self.client()
                http = self._http
            try:
                return http.request(method, url + path, **kwargs)
            except retry_on:
                with self._http_lock:
                    if self._http is http:
                        self._http = None
                http.close()
                if last:
                    raise
        raise AssertionError("unreachable")

    def get(self, path: str) -> httpx.Response:
        """``GET path`` of the API on the kept-open client (for a look repeated in a wait)."""
        return self._call("GET", path)

    def submit(self, task: dict[str, Any]) -> str:
        resp = self._call("POST", "/v1/requests", json={"task": task})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def request(self, request_id: str) -> dict[str, Any]:
        resp = self._call("GET", f"/v1/requests/{request_id}")
        assert resp.status_code == 200, resp.text
        data: dict[str, Any] = resp.json()
        return data

    def wait_state(
        self, request_id: str, states: set[str], timeout_s: float = 60
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> bool:
            seen.update(self.request(request_id))
            return seen["state"] in states

        try:
            wait_for(reached, timeout_s, f"{request_id} to reach {states}", logs=self.home / "logs")
        except pytest.fail.Exception as exc:
            last = {k: seen.get(k) for k in ("state", "error", "attempts")}
            raise pytest.fail.Exception(f"{exc} (last seen: {last})") from None
        return seen

    def take_all_down(self, timeout_s: float = 60) -> None:
        """Take every request down (`corral down --all`) and wait until each has ended and no
        machine is left up: the next test on an installation a module shares finds the local
        cloud's capacity free."""
        done = self._down_all()

        def ended() -> bool:
            requests = self.get("/v1/requests?limit=1000").json()["requests"]
            instances = self.get("/v1/instances").json()["instances"]
            return all(r["state"] in ENDED for r in requests) and all(
                i["state"] not in MACHINE_UP for i in instances
            )

        what = f"every request to end, machines and all (down: {done})"
        wait_for(ended, timeout_s, what, self.home / "logs")

    def _down_all(self) -> dict[str, int]:
        """What `corral down --all` does (test_client runs the command itself), through the
        API: a `corral` process per clean-up cost about half a second of CPU. The answers by
        status (a request that ends on its own meanwhile is refused with a 409)."""
        answers: dict[str, int] = {}
        for req in self.get("/v1/requests?limit=1000").json()["requests"]:
            if req["state"] not in ENDED:
                got = self._call("POST", f"/v1/requests/{req['id']}/terminate").status_code
                answers[str(got)] = answers.get(str(got), 0) + 1
        return answers

    def clear(self, timeout_s: float = 60) -> None:
        """Everything a test left on an installation a module shares, gone: clusters taken
        down, requests ended, pools deleted and no machine up. A pool refuses deletion while a
        workload holds it: it is asked again until none does."""
        for cluster in self.get("/v1/clusters").json()["clusters"]:
            self._call("DELETE", f"/v1/clusters/{cluster['name']}")
        down = self._down_all()

        def cleared() -> bool:
            requests = self.get("/v1/requests?limit=1000").json()["requests"]
            if any(r["state"] not in ENDED for r in requests):
                return False
            pools = self.get("/v1/pools").json()["pools"]
            for pool in pools:
                self._call("DELETE", f"/v1/pools/{pool['name']}")
            if pools or self.get("/v1/clusters").json()["clusters"]:
                return False
            instances = self.get("/v1/instances").json()["instances"]
            return all(i["state"] not in MACHINE_UP for i in instances)

        what = f"requests, pools, clusters and machines to be gone (down: {down})"
        wait_for(cleared, timeout_s, what, self.home / "logs")

    def stop(self, grace_s: float = 10) -> None:
        """SIGTERM every process, SIGKILL what is left after ``grace_s``. A test's teardown
        passes 0: nothing there has work to finish, and a Celery worker's warm shutdown
        takes seconds (every process group is SIGKILLed at once)."""
        if grace_s > 0:
            for proc in self.procs.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            if grace_s > 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(10)
        self.procs.clear()
        if self._http is not None:
            self._http.close()
            self._http = None


def run_cli(
    args: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`corral ARGS` run to its end, its outputs captured: forked from the zygote, or exec'd
    with CORRAL_TEST_EXEC=1."""
    if EXEC:
        return subprocess.run(
            [CORRAL, *args], env=env, capture_output=True, text=True, timeout=timeout
        )
    return _ZYGOTE.run([CORRAL, *args], env, timeout)


_PROBE = httpx.Client(timeout=1)  # one for every health probe (a client per probe costs ms)


def _ok(api_url: str) -> bool:
    try:
        return _PROBE.get(f"{api_url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False


T = TypeVar("T")


def at_once(*calls: Callable[[], T]) -> list[T]:
    """Independent calls (commands, mostly) made at the same time, their results in the order
    given. A `corral` command is a Python start-up (CPU), then a wait on the system (a job's
    run, a node's next beat): one after another they left the second core idle and their
    waits end to end. Each command keeps its own timeout, so none outlives the test."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [future.result() for future in [pool.submit(call) for call in calls]]


def wait_for(
    check: Callable[[], bool], timeout_s: float, what: str, logs: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = ""
    if logs is not None:
        for f in sorted(logs.glob("*.log"))[:12]:
            text = f.read_text(errors="replace")[-1500:]
            tail += f"\n--- {f.name} ---\n{text}"
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}{tail}")


def agent_pids(instance_ids: list[str]) -> list[int]:
    """Live agent processes on this machine of these local instances (their tasks' processes
    not counted)."""
    names = {comm_name(i) for i in instance_ids}
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or not is_agent(proc):
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            comm = (proc / "comm").read_text().strip()
        except OSError:
            continue
        if cmd and (comm in names or any(i in cmd for i in instance_ids)):
            pids.append(int(proc.name))
    return pids


def kill_agents(system: System) -> None:
    """Leave no local instance behind, whatever the test did."""
    home = str(system.home)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if (is_agent(proc) or is_launcher(proc)) and home.encode() in environ:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(proc.name), signal.SIGKILL)


@contextlib.contextmanager
def whole_system(home: Path, redis_url: str, cloud: Path) -> Iterator[System]:
    """An API, a schedule and a provision worker and beat on the local cloud ``cloud``: what
    a test module launching local work needs. Stopped, and its machines killed, at the end."""
    system = System(home, redis_url, cloud, LOCAL_ONLY)
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_beat()
        yield system
    finally:
        system.stop(grace_s=0)
        kill_agents(system)


class Up:
    """`corral up` as a user runs it, on a home of the test's own: its output collected."""

    def __init__(
        self,
        home: Path,
        local_cloud: Path = REPO / "tests/fixtures/localcloud/runtime.yaml",
        timers: dict[str, str] | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        timers = FAST_TIMERS if timers is None else timers
        env.update({f"CORRAL_TIMERS__{k}": v for k, v in timers.items()})
        env.update(settings or {})  # other CORRAL_* settings, named in full
        env.update({"CORRAL_HOME": str(home), "CORRAL_LOCAL_CLOUD_FILE": str(local_cloud)})
        env["CORRAL_LOCAL_TASKS_RUN_AS"] = "corral"  # as System's (the tests' folders)
        self.env = env
        self.proc = subprocess.Popen(
            [CORRAL, "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, pattern: str, timeout_s: float = 60) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for line in self.lines if (m := re.search(pattern, line))]
            return bool(found)

        wait_for(seen, timeout_s, f"`corral up` to print {pattern!r}:\n{self.output()}")
        return found[0]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(list(args), self.env, 120)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def processes_of(home: Path) -> list[int]:
    """Every process whose environment names this CORRAL_HOME (workers, agents, redis...)."""
    mark = f"CORRAL_HOME={home}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                mine = mark in (proc / "environ").read_bytes().split(b"\0")
                if mine and "Z" not in (proc / "stat").read_text().split()[2]:
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids
