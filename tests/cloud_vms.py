"""Cloud machines played on this one, for the node-agent tests.

Corral launches on moto's EC2 or the Compute API fake; a test takes the boot script the cloud
received (RunInstances UserData, the startup-script metadata) and runs it in a folder of its
own as the VM would, with nothing but the system's Python on PATH. The agent installs itself
from the API's wheel, registers and reports through the API with its node token.

- :class:`Vm`: one played machine; :func:`aws_script` / :func:`gcp_script`: the boot script a
  request's launch sent.
- :class:`Player`: boots every machine a cloud is asked for, as it is asked (pools launch
  machines the test never names), optionally with a metadata service of the test's own.
- :class:`Metadata`: the instance metadata service a played machine reads its cloud's
  warnings from (EC2's IMDSv2 ``spot/instance-action``, Compute Engine's ``preempted``).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fakes.aws_faults import FaultyMoto
from fakes.gcp_compute import FakeCompute
from harness import System, wait_for

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def gcp_env(fake: FakeCompute) -> dict[str, str]:
    """The settings that point Corral at the Compute API fake, node agents on."""
    return {
        "CORRAL_CLOUDS": json.dumps(["gcp"]),
        "CORRAL_GCP_API_ENDPOINT": fake.url,
        "CORRAL_GCP_PROJECT": fake.project,
        "CORRAL_GCP_ANONYMOUS": "true",
        "CORRAL_NODE_HEARTBEAT_S": "0.5",
    }


@functools.cache
def ec2_client(endpoint_url: str, region: str = "us-east-1") -> Any:
    """One EC2 client per moto and region for the test process: tests ask EC2 ten times a
    second while they wait, and a new client each time is about 13 ms of CPU."""
    import boto3

    return boto3.client(
        "ec2",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


# Where a test's machine may be: the shipped catalog's regions (a pooled machine goes to the
# cheapest zone that offers its type, which the catalog's prices decide), us-east-1 first.
EC2_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "us-west-1",
    "ca-central-1",
    "eu-west-1",
    "eu-north-1",
    "ap-south-1",
    "eu-central-1",
    "eu-west-2",
    "eu-west-3",
    "ap-northeast-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-northeast-2",
    "ap-northeast-3",
    "eu-south-1",
    "eu-south-2",
    "ap-east-1",
    "af-south-1",
    "me-central-1",
    "me-south-1",
    "ap-southeast-3",
    "ap-southeast-4",
    "sa-east-1",
)
_found_in: dict[str, str] = {}


def ec2_state(endpoint_url: str, provider_id: str) -> str:
    """An EC2 machine's state as moto tells it, in whichever region it was launched."""
    from botocore.exceptions import ClientError

    known = _found_in.get(provider_id)
    for region in (known,) if known else EC2_REGIONS:
        try:
            found = ec2_client(endpoint_url, region).describe_instances(InstanceIds=[provider_id])[
                "Reservations"
            ]
        except ClientError as exc:
            if "InvalidInstanceID.NotFound" not in str(exc):
                raise
            continue
        _found_in[provider_id] = region
        return str(found[0]["Instances"][0]["State"]["Name"])
    raise AssertionError(f"{provider_id}: in none of {EC2_REGIONS} on moto")


class Vm:
    """A cloud machine played on this one: its boot script run in its own folder."""

    def __init__(self, root: Path, script: str, metadata_url: str = "off") -> None:
        self.root = root
        self._member: int | None = None  # a process of the machine last seen running
        root.mkdir(parents=True)
        (root / "boot.sh").write_text(script)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(root),
            "CORRAL_NODE_ROOT": str(root),
            "CORRAL_NODE_METADATA_URL": metadata_url,
        }
        self.proc = subprocess.Popen(
            ["bash", str(root / "boot.sh")],
            env=env,
            cwd=root,
            start_new_session=True,
            stdout=(root / "boot.out").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.proc.wait(120)
        assert self.proc.returncode == 0, (root / "boot.out").read_text()

    @property
    def token(self) -> str:
        """The node token once the agent registered (the boot script's ticket before)."""
        return (self.root / "node-token").read_text()

    @property
    def ticket(self) -> str:
        """The one-time enrollment ticket the boot script carried."""
        script = (self.root / "boot.sh").read_text()
        return script.split("token=", 1)[1].split(None, 1)[0].strip("'")

    @property
    def node(self) -> str:
        """``cloud/attempt/rank``: the node its token names."""
        cloud, attempt, rank = self.token.split(".")[2:5]
        return f"{cloud}/{attempt}/{rank}"

    def log(self) -> str:
        path = self.root / "node.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def boot_again(self) -> None:
        """The stopped machine is started: its boot script runs again in the same folder (its
        disk kept the node token the agent wrote), as cloud-init's per-boot copy or Compute
        Engine's startup script does."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.root),
            "CORRAL_NODE_ROOT": str(self.root),
            "CORRAL_NODE_METADATA_URL": "off",
        }
        boots = len(list(self.root.glob("boot*.out")))
        out = self.root / f"boot-{boots + 1}.out"
        self.proc = subprocess.Popen(
            ["bash", str(self.root / "boot.sh")],
            env=env,
            cwd=self.root,
            start_new_session=True,
            stdout=out.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.proc.wait(120)
        assert self.proc.returncode == 0, out.read_text()
        self._member = None

    def power_off(self) -> None:
        """The machine goes: its agent is told to stop, as a shutdown would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        wait_for(lambda: not self.alive(), 20, "the played machine's processes to end")

    def crash(self) -> None:
        """The machine dies at once: no last report, no log shipped."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        wait_for(lambda: not self.alive(), 20, "the played machine's processes to die")

    def alive(self) -> bool:
        """Whether a process of the machine still runs. Its agent, started by the boot script
        with nohup, is an orphan: once ended, it is a zombie until init reaps it, and an init
        may do so only every few seconds (about every 2 s on the CI machine). A zombie runs
        nothing: it is not counted, so a wait for the machine to stop ends when it stops."""
        pgid = self.proc.pid
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        # The member seen running last time is looked at first: a look at every process is
        # tens of milliseconds on a busy machine, and waits ask ten times a second.
        if self._member is None or not _runs_in(self._member, pgid):
            self._member = next((p for p in _pids() if _runs_in(p, pgid)), None)
        return self._member is not None


def _pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def _runs_in(pid: int, pgid: int) -> bool:
    """Whether the process runs in the group (a zombie, ended, not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # After the command's closing parenthesis: its state, its parent's pid, its group.
    state, _parent, group = stat.rsplit(b")", 1)[-1].split()[:3]
    return int(group) == pgid and state not in (b"Z", b"X")  # X: dead, as it goes


class Fleet:
    """Every machine a test played; all of them killed at its end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.vms: list[Vm] = []

    def boot(self, script: str, metadata_url: str = "off") -> Vm:
        vm = Vm(self.root / f"vm-{len(self.vms)}", script, metadata_url)
        self.vms.append(vm)
        return vm

    def kill_all(self) -> None:
        for vm in self.vms:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(vm.proc.pid, signal.SIGKILL)
            # Shown by pytest only when the test failed: what each played machine's agent said.
            print(f"--- {vm.root.name} node.log (last 2,000 characters) ---\n{vm.log()[-2000:]}")


def aws_scripts(moto: FaultyMoto, **tags: str) -> list[str]:
    """The UserData of every RunInstances EC2 took whose instance tags include ``tags``, in
    the order sent (a resend with the same ClientToken counts once)."""
    seen: dict[str, str] = {}
    for r in moto.requests("RunInstances"):
        if r.fault is not None or "UserData" not in r.params:
            continue
        found = r.tags()
        if all(found.get(k) == v for k, v in tags.items()):
            key = r.params.get("ClientToken") or str(len(seen))
            seen.setdefault(key, base64.b64decode(r.params["UserData"]).decode())
    return list(seen.values())


def aws_script(moto: FaultyMoto, request_id: str) -> str:
    """The boot script of the request's last launch on EC2 (waiting for it)."""
    wait_for(lambda: bool(aws_scripts(moto, **{"corral-request": request_id})), 60,
             "the launch to reach EC2")  # fmt: skip
    return aws_scripts(moto, **{"corral-request": request_id})[-1]


def gcp_scripts(fake: FakeCompute, **labels: str) -> list[str]:
    out = []
    for insert in list(fake.inserts):
        body = insert["body"]
        if all(body.get("labels", {}).get(k) == v for k, v in labels.items()):
            items = body.get("metadata", {}).get("items", [])
            script = next((i["value"] for i in items if i["key"] == "startup-script"), None)
            if script is not None and script not in out:
                out.append(str(script))
    return out


def gcp_script(fake: FakeCompute, request_id: str) -> str:
    wait_for(lambda: bool(gcp_scripts(fake, **{"corral-request": request_id})), 60,
             "the insert to reach the Compute API")  # fmt: skip
    return gcp_scripts(fake, **{"corral-request": request_id})[-1]


class Player:
    """Boots every machine EC2 is asked for, as it is asked (a pool launches machines the test
    never names): a thread looks at the recorded RunInstances ten times a second."""

    def __init__(self, moto: FaultyMoto, fleet: Fleet, metadata_url: str = "off") -> None:
        self.moto = moto
        self.fleet = fleet
        self.metadata_url = metadata_url
        self.played: dict[str, Vm] = {}  # boot script -> its machine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vm-player", daemon=True)

    def __enter__(self) -> Player:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for script in aws_scripts(self.moto, **{"corral-managed": "true"}):
                if script not in self.played:
                    self.played[script] = self.fleet.boot(script, self.metadata_url)

    def vm_of(self, node_prefix: str) -> list[Vm]:
        """The played machines whose node (``cloud/attempt/rank``) starts with the prefix."""
        return [vm for vm in list(self.played.values()) if vm.node.startswith(node_prefix)]


class Metadata:
    """An instance metadata service for played machines: EC2's IMDSv2 (a PUT for a session
    token, then ``/latest/meta-data/spot/instance-action``, 404 until a notice is posted) and
    Compute Engine's ``/computeMetadata/v1/instance/preempted`` (``FALSE`` until preempted)."""

    def __init__(self) -> None:
        self.spot_action: dict[str, Any] | None = None
        self.preempted = False
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                if self.path == "/latest/api/token":
                    self._send(200, b"imds-session-token")
                else:
                    self._send(404)

            def do_GET(self) -> None:
                outer.calls += 1
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") != "imds-session-token":
                        self._send(401)
                    elif outer.spot_action is None:
                        self._send(404)
                    else:
                        self._send(200, json.dumps(outer.spot_action).encode())
                elif self.path == "/computeMetadata/v1/instance/preempted":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        self._send(403)
                    else:
                        self._send(200, b"TRUE" if outer.preempted else b"FALSE")
                else:
                    self._send(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def interrupt_spot(self) -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        self.spot_action = {"action": "terminate", "time": when}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def aws_agents_system(make_system: Callable[..., System], moto: FaultyMoto) -> System:
    """An installation on moto's EC2 alone whose machines boot the node agent (a heartbeat
    every 0.5 s, silent after 6 s), started: the node-agent tests' own."""
    env = {
        **AWS_ENV,
        "CORRAL_CLOUDS": json.dumps(["aws"]),
        "CORRAL_AWS_ENDPOINT_URL": moto.url,
        "CORRAL_AWS_DEFAULT_IMAGE_ID": "ami-12c6146b",
        "CORRAL_NODE_HEARTBEAT_S": "0.5",
    }
    system = make_system(env=env, ATTEMPT_DEADLINE_S="60", HEARTBEAT_TIMEOUT_S="6")
    return start_with_agents(system)


# The played clouds' polls, shortened as FAST_TIMERS shortens the runtime's: the boot watch
# looks at EC2, the Compute API fake and the fake cluster every 0.5 s (boot_watch_interval_s'
# floor) rather than every 2 s, the rate-limit floor of a real cloud; an agent looks at its
# metadata for a spot notice or preemption every 0.5 s, not every 5 s. A test that names one of
# them (make_system's timers) keeps its own.
PLAYED_CLOUD_TIMERS = {"CLOUD_POLL_INTERVAL_S": "0.5", "NODE_NOTICE_POLL_S": "0.5"}


def start_with_agents(system: System) -> System:
    """API, workers and beat, with cloud machines booting the node agent against this API
    (the played clouds polled as PLAYED_CLOUD_TIMERS has it)."""
    for name, value in PLAYED_CLOUD_TIMERS.items():
        system.env.setdefault(f"CORRAL_TIMERS__{name}", value)
    # The machines reach the API here (the address is known before the API answers).
    system.env["CORRAL_NODE_API_URL"] = system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system
