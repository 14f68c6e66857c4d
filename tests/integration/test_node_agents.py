"""Node agents on cloud machines, each cloud played end to end: Corral launches on moto's EC2
(or the Compute API fake), the test takes the boot script the cloud received (RunInstances
UserData, the startup-script metadata) and runs it in a sandbox folder as the VM would, with
nothing but the system's Python on PATH. The agent installs itself from the API's wheel,
registers, runs the work and reports it through the API.

The AWS tests share one installation and one moto (``aws``; each test's requests are its own,
and what it left is taken down after it). Machines lost, reclaimed or cut off by an API outage
are test_node_recovery's, on installations of their own: moto keeps one EC2 for the whole
test process, and an installation terminates every Corral machine it does not own (a stray),
so no other AWS installation may run beside this module's."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from cloud_vms import (
    AWS_ENV,
    Fleet,
    Vm,
    aws_agents_system,
    aws_script,
    ec2_client,
    ec2_state,
    gcp_env,
    gcp_script,
    gcp_scripts,
    start_with_agents,
)
from fakes.aws_faults import FaultyMoto
from fakes.gcp_compute import FakeCompute
from harness import CORRAL, System, free_port, wait_for
from rendezvous import NAMES, RENDEZVOUS

pytestmark = pytest.mark.integration

AWS_TASK = {"resources": {"cloud": "aws", "instance_type": "m5.large", "region": "us-east-1"}}
GCP_TASK = {"resources": {"cloud": "gcp", "instance_type": "n2-standard-2"}}


@pytest.fixture
def vms(tmp_path: Path) -> Iterator[Callable[..., Vm]]:
    fleet = Fleet(tmp_path)
    yield fleet.boot
    fleet.kill_all()


def _no_secrets(script: str, system: System) -> None:
    assert len(script.encode()) < 16 * 1024
    assert system.token not in script  # never the admin token
    for value in AWS_ENV.values():
        if value != "us-east-1" and value != "true":
            assert f"={value}" not in script  # no cloud key


@pytest.fixture(scope="module")
def shared_aws(
    make_module_system: Callable[..., System],
) -> Iterator[tuple[System, FaultyMoto]]:
    with FaultyMoto() as moto:
        system = aws_agents_system(make_module_system, moto)
        # The Ray cluster test's autoscale worker, started with the others: its start-up
        # (seconds of CPU) overlaps theirs instead of slowing that test's CLI calls, and no
        # backlog of beat's autoscale ticks waits for it (it has no work without a cluster).
        system.start_worker("autoscale")
        yield system, moto


@pytest.fixture
def aws(
    shared_aws: tuple[System, FaultyMoto], vms: Callable[..., Vm]
) -> Iterator[tuple[System, FaultyMoto]]:
    """The module's AWS installation as a fresh one: after the test its requests and cluster
    are taken down and their machines gone (before the test's played machines are killed)."""
    yield shared_aws
    shared_aws[0].clear()


def test_aws_a_job_runs_on_its_agent_and_ends_by_its_exit_code(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm]
) -> None:
    system, moto = aws
    rid = system.submit(
        {**AWS_TASK, "name": "hello", "run": "echo hello from the vm rank=$CORRAL_NODE_RANK"}
    )
    # The failing run of the second part is launched beside it (its machine is played with
    # this one's, each request on a machine of its own).
    bad = system.submit({**AWS_TASK, "name": "bad", "run": "echo about to fail; exit 7"})
    script = aws_script(moto, rid)
    _no_secrets(script, system)
    follower = subprocess.Popen(
        [CORRAL, "logs", rid, "--follow"],
        env={**system.env, "CORRAL_API_URL": system.api_url},
        stdout=subprocess.PIPE,
        text=True,
    )
    bad_script = aws_script(moto, bad)
    # EC2 says running, but nothing registered yet: the machines are not up (2 s: four
    # reconcile passes at FAST_TIMERS' 0.5 s).
    time.sleep(2)
    assert system.request(rid)["state"] == "PROVISIONING"
    assert system.request(bad)["state"] == "PROVISIONING"
    vm = vms(script)
    vms(bad_script)
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "SUCCEEDED", done
    assert done["exit_code"] == 0
    out, _ = follower.communicate(timeout=30)  # it ends by itself once the request ended
    assert follower.returncode == 0 and "hello from the vm rank=0" in out
    logs = system.cli("logs", rid)
    assert logs.returncode == 0 and "hello from the vm rank=0" in logs.stdout, vm.log()
    # The machine is released, and its token died with its run.
    wait_for(lambda: _ec2_states(moto, rid) == {"terminated"}, 30, "the VM terminated")
    resp = httpx.post(f"{system.api_url}/v1/node/heartbeat", json={"activity": "idle", "ttl_s": 5},
                      headers={"Authorization": f"Bearer {vm.token}"})  # fmt: skip
    assert resp.status_code == 403, resp.text

    # A failing run ends FAILED with its exit code, its output kept.
    done = system.wait_state(bad, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "FAILED" and done["exit_code"] == 7, done
    assert "about to fail" in system.cli("logs", bad).stdout


def test_aws_a_job_queued_behind_the_run_over_the_http_link(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    """Issue #49's job queue on a cloud node (its agent reports through the API): the job
    waits for the run, job 1 reads as ended while job 2 runs (the run's end rides in the
    heartbeat), and the request ends after job 2, with its run's exit code."""
    system, moto = aws
    go, hold = tmp_path / "go", tmp_path / "hold"
    run = f"while [ ! -f {go} ]; do sleep 0.1; done; echo run over"
    rid = system.submit({**AWS_TASK, "name": "queued", "run": run})
    vms(aws_script(moto, rid))
    system.wait_state(rid, {"RUNNING"}, 90)
    job = tmp_path / "job.yaml"
    job.write_text(f"run: |\n  while [ ! -f {hold} ]; do sleep 0.1; done\n  exit 2\n")
    assert system.cli("exec", rid, str(job), "-d").returncode == 0

    def states() -> list[str]:
        return [j["state"] for j in json.loads(system.cli("queue", rid, "--json").stdout)["jobs"]]

    assert states() == ["RUNNING", "PENDING"]
    go.touch()
    wait_for(lambda: states() == ["SUCCEEDED", "RUNNING"], 60, "job 2 after the run")
    assert system.request(rid)["state"] == "RUNNING"
    hold.touch()
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 60)
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0
    jobs = json.loads(system.cli("queue", rid, "--json").stdout)["jobs"]
    assert [(j["state"], j["exit_code"]) for j in jobs] == [("SUCCEEDED", 0), ("FAILED", 2)]


def test_aws_an_execd_tasks_workdir_comes_through_the_api_for_its_node_only(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    """`corral exec ID task.yaml` with a workdir on a cloud node (as `sky exec` syncs it): the
    node's agent fetches the job's bundle with its node token (GET /v1/node/bundle?sha256=,
    served for jobs queued on that node only), unpacks it into ~/sky_workdir-job-2 as the
    job starts and runs the job there; the job ends by its exit code."""
    system, moto = aws
    go = tmp_path / "go"
    run = f"while [ ! -f {go} ]; do sleep 0.1; done; echo run over"
    rid = system.submit({**AWS_TASK, "name": "synced", "run": run})
    vm = vms(aws_script(moto, rid))
    system.wait_state(rid, {"RUNNING"}, 90)
    workdir = tmp_path / "job-wd"
    workdir.mkdir()
    (workdir / "only-here.sh").write_text("echo only-here in $PWD; exit 7\n")
    job = tmp_path / "wd-job.yaml"
    job.write_text(f"workdir: {workdir}\nrun: bash only-here.sh\n")
    assert system.cli("exec", rid, str(job), "-d").returncode == 0
    node = {"Authorization": f"Bearer {vm.token}"}
    with httpx.Client(base_url=system.api_url, headers=node, timeout=10) as c:
        queued = json.loads(system.cli("queue", rid, "--json").stdout)["jobs"][1]
        assert queued["state"] == "PENDING"
        stray = c.get("/v1/node/bundle", params={"sha256": "0" * 64})
        assert stray.status_code == 404  # not a bundle of a job queued here
    go.touch()

    def job_2() -> dict[str, object]:
        jobs = json.loads(system.cli("queue", rid, "--json").stdout)["jobs"]
        return dict(jobs[1])

    wait_for(lambda: job_2()["state"] in ("SUCCEEDED", "FAILED"), 60, "job 2 on the VM")
    got = job_2()
    assert (got["state"], got["exit_code"]) == ("FAILED", 7), got
    said = system.get(f"/v1/execs/{got['execs'][0]}").json()["output"]
    assert "only-here in " in said and said.strip().endswith("/sky_workdir-job-2"), said
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 60)
    assert done["state"] == "SUCCEEDED"


def test_aws_a_service_runs_until_terminated_and_a_node_token_is_its_own(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    system, moto = aws
    port = free_port()  # the service's own: its setup leaves a server listening there
    serve = f"python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"
    svc = system.submit({**AWS_TASK, "name": "svc", "setup": f"echo service set up; {serve}"})
    other = system.submit({**AWS_TASK, "name": "other", "setup": "echo other"})
    vm = vms(aws_script(moto, svc))
    vm_other = vms(aws_script(moto, other))
    system.wait_state(svc, {"RUNNING"}, 60)
    system.wait_state(other, {"RUNNING"}, 60)
    running = time.monotonic()
    wait_for(lambda: "service set up" in system.cli("logs", svc).stdout, 20, "the setup's output")

    # The node token acts on its own node only: the routes take no node id, and nothing
    # else accepts it.
    node = {"Authorization": f"Bearer {vm.token}"}
    with httpx.Client(base_url=system.api_url, headers=node, timeout=10) as c:
        assert (
            c.post("/v1/requests", json={"task": {"name": "x", "run": "true"}}).status_code == 401
        )
        assert c.post(f"/v1/requests/{other}/terminate").status_code == 401
        assert c.get(f"/v1/requests/{other}").status_code == 401  # nor read another's
        assert c.get("/v1/requests").status_code == 401
        assert c.get(f"/v1/requests/{other}/logs").status_code == 401
        assert c.post("/v1/pools", json={}).status_code in (401, 422)
        # An assignment's own log stream takes only ids handed to this node (issue #47).
        stray = c.post("/v1/node/logs", params={"offset": 0, "assignment": "x"}, content=b"x")
        assert stray.status_code == 404, stray.text
        # Registration takes the boot script's ticket, once: the work is not handed out again,
        # neither for the ticket (spent) nor for the token (not a ticket).
        again = c.post("/v1/node/register", json={})
        assert again.status_code == 401 and "work" not in again.text, again.text
        spent = c.post(
            "/v1/node/register", json={}, headers={"Authorization": f"Bearer {vm.ticket}"}
        )
        assert spent.status_code == 403 and "spent" in spent.text, spent.text
        assert "CORRAL_REQUEST_ID" not in spent.text and other not in spent.text
        forged = vm.token.rsplit(".", 1)[0] + ".AAAA"
        bad = c.get("/v1/node/assignments", headers={"Authorization": f"Bearer {forged}"})
        assert bad.status_code == 401
        theirs = vm_other.token.split(".")
        swapped = ".".join([*theirs[:4], *vm.token.split(".")[4:]])
        assert (
            c.get(
                "/v1/node/assignments", headers={"Authorization": f"Bearer {swapped}"}
            ).status_code
            == 401
        )
    time.sleep(max(0.0, running + 3 - time.monotonic()))  # 3 s RUNNING: several heartbeats
    assert system.request(svc)["state"] == "RUNNING"  # still up, still RUNNING
    assert vm.alive()

    # corral exec reaches the played VM through its agent (issue 24): output and exit code.
    ran = system.cli("exec", svc, "--", "echo on-the-vm $CORRAL_REQUEST_ID; exit 6")
    assert ran.returncode == 6 and f"on-the-vm {svc}" in ran.stdout, ran.stdout + ran.stderr
    theirs_exec = httpx.get(
        f"{system.api_url}/v1/node/execs", headers={"Authorization": f"Bearer {vm_other.token}"}
    )
    assert theirs_exec.json() == {"execs": []}  # another node's queue is its own

    # A task file exec'd over the cloud agent's HTTP link (issue #49): queued as job 1 of the
    # service's nodes (no run of its own), run by the agent with its job's own SkyPilot task
    # id, ended by its exit code; another node's token takes no job of it.
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: on-vm\nrun: echo job-on-vm $SKYPILOT_TASK_ID; exit 5\n")
    queued = system.cli("exec", svc, str(job_file), "-d")
    assert queued.returncode == 0 and "job 1 on request" in queued.stdout, queued.stderr
    theirs_job = httpx.get(
        f"{system.api_url}/v1/node/jobs/next", headers={"Authorization": f"Bearer {vm_other.token}"}
    )
    assert theirs_job.json() == {"job": None}
    wait_for(
        lambda: (
            json.loads(system.cli("queue", svc, "--json").stdout)["jobs"][0]["state"] == "FAILED"
        ),
        60,
        "the job on the VM",
    )
    job = json.loads(system.cli("queue", svc, "--json").stdout)["jobs"][0]
    assert job["exit_code"] == 5
    said = system.get(f"/v1/execs/{job['execs'][0]}").json()["output"]
    assert said.startswith("job-on-vm sky-") and said.strip().endswith(f"_{svc}_1")
    # The node's heartbeat carries what it uses: served per node.
    used = system.get(f"/v1/requests/{svc}/usage").json()["nodes"]
    assert used and "mem_percent" in used[0], used

    # corral attach over the cloud agent's HTTP link (docs/attach.md): stdin from a pipe is
    # the shell's script, its output and exit code come back.
    attached = subprocess.run(
        [CORRAL, "attach", svc],
        input="echo attached-$CORRAL_REQUEST_ID; exit 4\n",
        env={**system.env, "CORRAL_API_URL": system.api_url},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert attached.returncode == 4, attached.stdout + attached.stderr
    assert attached.stdout.splitlines() == [f"attached-{svc}"]
    # A session's node side answers its own node's token only; a forward to a port where
    # nothing listens ends with the node's word on it.
    with system.client() as c:
        opened = c.post(f"/v1/requests/{svc}/sessions", json={"kind": "forward", "port": 1})
        assert opened.status_code == 201, opened.text
        sid = opened.json()["id"]
        assert c.post(f"/v1/requests/{svc}/sessions", json={"kind": "forward"}).status_code == 422
    theirs = {"Authorization": f"Bearer {vm_other.token}"}
    with httpx.Client(base_url=system.api_url, headers=theirs, timeout=10) as c:
        assert c.get(f"/v1/node/sessions/{sid}").status_code == 404
        assert c.get(f"/v1/node/sessions/{sid}/input", params={"wait_s": 0}).status_code == 404
        assert c.post(f"/v1/node/sessions/{sid}/output", content=b"x").status_code == 404
    assert httpx.get(f"{system.api_url}/v1/sessions/{sid}/output", headers=node).status_code == 401
    with system.client() as c:
        ended: list[dict[str, object]] = []

        def forward_ended() -> bool:
            got = c.get(f"/v1/sessions/{sid}/output", params={"wait_s": 2}).json()
            ended.append(got)
            return bool(got["eof"])

        wait_for(forward_ended, 30, "the forward session to end")
        assert ended[-1]["exit_code"] == 1
        assert "nothing answers at 127.0.0.1:1 on the node" in str(ended[-1]["error"])

        # A forward reaches the task's own sockets only (issue #47 item 4): the service's
        # server answers; the control plane's API, listening on the same host, is refused.
        def forward(to: int) -> dict[str, object]:
            sid = c.post(
                f"/v1/requests/{svc}/sessions", json={"kind": "forward", "port": to}
            ).json()["id"]
            c.post(f"/v1/sessions/{sid}/input", content=b"GET / HTTP/1.0\r\n\r\n")
            c.post(f"/v1/sessions/{sid}/input", content=b"", params={"eof": "true"})
            got: dict[str, object] = {"data": b""}
            while True:
                part = c.get(f"/v1/sessions/{sid}/output", params={"wait_s": 2}).json()
                got = {**part, "data": got["data"] + base64.b64decode(part["data"])}  # type: ignore[operator]
                if part["eof"]:
                    return got

        wait_for(lambda: b"200" in forward(port)["data"], 30, "the service's own port")  # type: ignore[operator]
        api_port = int(system.api_url.rsplit(":", 1)[1].split("/")[0])
        refused = forward(api_port)
        assert refused["exit_code"] == 1 and "not this task's own port" in str(refused["error"])

    # Terminated: the VM goes, its agent is stopped as the shutdown would, its token expires.
    assert system.cli("terminate", svc).returncode == 0
    wait_for(lambda: system.request(svc)["state"] == "TERMINATED", 60, "the service terminated")
    vm.power_off()
    resp = httpx.get(f"{system.api_url}/v1/node/assignments", headers=node)
    assert resp.status_code == 403, resp.text
    assert system.request(other)["state"] == "RUNNING"


def _ec2_states(moto: FaultyMoto, request_id: str) -> set[str]:
    """The EC2 states of the request's machines (moto's state outlives one test's server)."""
    ec2 = ec2_client(moto.url)
    filters = [{"Name": "tag:corral-request", "Values": [request_id]}]
    pages = ec2.describe_instances(Filters=filters)["Reservations"]
    return {i["State"]["Name"] for r in pages for i in r["Instances"]}


def test_gcp_a_job_runs_on_its_agent_and_a_failing_one_fails(
    make_system: Callable[..., System], vms: Callable[[str], Vm]
) -> None:
    with FakeCompute(project="corral-test") as fake:
        system = start_with_agents(
            # The three machines are played one after the other, each boot script (the agent
            # installed from the API's wheel) run to its end: on a loaded host the last one's
            # agent registers long after its launch, and an agent already up may be starved
            # for seconds meanwhile. A 6 s heartbeat TTL took a registered, running node for
            # silent in CI (InstanceSilent); this test is about the runs, not the timeouts.
            make_system(env=gcp_env(fake), ATTEMPT_DEADLINE_S="120", HEARTBEAT_TIMEOUT_S="20")
        )
        # A job, a failing job and a service, launched and played side by side (each on a
        # machine of its own): their outcomes are each one's own.
        rid = system.submit({**GCP_TASK, "name": "hello", "run": "echo hello from gce"})
        bad = system.submit({**GCP_TASK, "name": "bad", "run": "echo failing; exit 3"})
        svc = system.submit({**GCP_TASK, "name": "svc", "setup": "echo serving on gce"})
        script = gcp_script(fake, rid)
        _no_secrets(script, system)
        scripts = [gcp_script(fake, bad), gcp_script(fake, svc)]
        time.sleep(2)  # four reconcile passes (FAST_TIMERS): nothing registered, not up
        for each in (rid, bad, svc):
            assert system.request(each)["state"] == "PROVISIONING"
        vms(script)
        _, vm = [vms(s) for s in scripts]
        done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 120)
        assert done["state"] == "SUCCEEDED", done
        done = system.wait_state(bad, {"SUCCEEDED", "FAILED"}, 120)
        assert done["state"] == "FAILED" and done["exit_code"] == 3, done

        # A service keeps running until terminated; its agent then stops (its token refused).
        system.wait_state(svc, {"RUNNING"}, 60)
        running = time.monotonic()
        assert "hello from gce" in system.cli("logs", rid).stdout
        time.sleep(max(0.0, running + 2 - time.monotonic()))  # 2 s RUNNING: several heartbeats
        assert system.request(svc)["state"] == "RUNNING" and vm.alive()
        assert system.cli("terminate", svc).returncode == 0
        system.wait_state(svc, {"TERMINATED"}, 60)
        wait_for(lambda: not vm.alive(), 30, "the service's agent to stop")
        assert "serving on gce" in system.cli("logs", svc).stdout


def test_aws_a_jobs_workdir_and_file_mounts_come_through_the_api_with_its_node_token(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    """Issue 24: a cloud machine gets the task's files from the API (GET /v1/node/bundle with
    its node token, sha256-checked), never with a cloud key or the admin token; run starts in
    ~/sky_workdir."""
    from corral.services.client import Client

    system, moto = aws
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "train.py").write_text("print('training from the workdir')\n")
    mounted = tmp_path / "cfg.txt"
    mounted.write_text("mounted-config\n")
    task = {
        **AWS_TASK,
        "name": "files",
        "workdir": str(project),
        "file_mounts": {"~/data/cfg.txt": str(mounted)},
        "run": "python3 pkg/train.py; cat ~/data/cfg.txt; pwd",
    }
    with Client(system.api_url, system.token) as client:
        rid = client.launch(task).id
    script = aws_script(moto, rid)
    _no_secrets(script, system)
    vm = vms(script)
    done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    assert done["state"] == "SUCCEEDED", vm.log()
    out = system.cli("logs", rid).stdout
    assert "training from the workdir" in out and "mounted-config" in out, out
    assert "/sky_workdir" in out
    # Another node's token (or none) gets no bundle.
    assert httpx.get(f"{system.api_url}/v1/node/bundle").status_code == 401


def test_aws_a_ray_cluster_nodes_run_the_launcher_steps_and_cluster_exec_reaches_them(
    aws: tuple[System, FaultyMoto], vms: Callable[[str], Vm], tmp_path: Path
) -> None:
    """Issue 22 on a cloud machine: a Ray cluster file with `provider: aws` (the launcher's
    steps only, no Ray on the played VM): the head's agent gets the file mounts through the API,
    runs setup and start commands in Ray's order with Ray's variables, and `cluster exec`
    reaches it through the agent, with the command's exit code."""
    import yaml

    system, moto = aws  # its autoscale worker started with the module's installation
    data = tmp_path / "data.txt"
    data.write_text("mounted-on-the-cloud-head\n")
    cluster = {
        "cluster_name": "aws-lab",
        "provider": {"type": "aws", "region": "us-east-1"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "m5.large"}, "resources": {"CPU": 0}},
        },
        "file_mounts": {"~/mounted/data.txt": str(data)},
        "initialization_commands": ["echo init-first"],
        "setup_commands": ['echo "setup on $RAY_NODE_TYPE_NAME"'],
        "head_start_ray_commands": ['echo "ray would start on the head ($RAY_CLOUD_INSTANCE_ID)"'],
    }
    path = tmp_path / "aws-lab.yaml"
    path.write_text(yaml.safe_dump(cluster))
    up = system.cli("cluster", "up", str(path))
    assert up.returncode == 0, up.stderr

    def head_id() -> str | None:  # of the API: a `corral cluster status` per look is a process
        view = system.get("/v1/clusters/aws-lab").json()
        return next((n["id"] for n in view["nodes"] if n["node_type"] == "head"), None)

    wait_for(head_id, 60, "the head to be launched", system.home / "logs")
    head = str(head_id())
    script = aws_script(moto, head)
    _no_secrets(script, system)
    vm = vms(script)
    system.wait_state(head, {"RUNNING"}, 90)
    ran = system.cli("cluster", "exec", "aws-lab", "--", "cat ~/mounted/data.txt; exit 4")
    assert ran.returncode == 4, (ran.stdout, ran.stderr, vm.log())
    assert ran.stdout == "mounted-on-the-cloud-head\n"
    log = system.cli("logs", head).stdout
    order = ["init-first", "setup on head", f"ray would start on the head ({head})"]
    assert all(step in log for step in order), log
    assert [log.index(step) for step in order] == sorted(log.index(step) for step in order)
    [vm_id] = [i["provider_id"] for i in system.request(head)["instances"] if i["provider_id"]]
    assert system.cli("cluster", "down", "aws-lab").returncode == 0
    wait_for(
        lambda: ec2_state(moto.url, vm_id) in {"shutting-down", "terminated"},
        60,
        "the head's VM to be terminated",
    )


def test_gcp_two_nodes_start_once_both_addresses_are_known_and_rendezvous_over_tcp(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    """Issue 45: each node's agent registers with the address it reaches the API from and asks
    the API for its launch's (GET /v1/node/peers) until every node has one; only then do setup
    and run start, with SkyPilot's SKYPILOT_NODE_IPS (one a line, the head first). Node 0 boots
    alone first and waits; node 1 boots; rank 1 then reaches rank 0 at the first line's address
    (test_skypilot_env.py's rendezvous, here through the HTTP link)."""
    out = tmp_path / "seen"
    out.mkdir()
    script = tmp_path / "rendezvous.py"
    script.write_text(RENDEZVOUS)
    names = json.dumps(NAMES)
    fleet = Fleet(tmp_path / "vms")
    with FakeCompute(project="corral-test") as fake:
        system = start_with_agents(
            # 20 s: node 0's agent is up while node 1 installs its own, as in the GCP job test.
            make_system(env=gcp_env(fake), ATTEMPT_DEADLINE_S="90", HEARTBEAT_TIMEOUT_S="20")
        )
        try:
            rid = system.submit(
                {
                    **GCP_TASK,
                    "name": "pair",
                    "num_nodes": 2,
                    "envs": {"OUT": str(out), "NAMES": names, "PORT": str(free_port())},
                    "run": f'python3 {script} "$OUT" "$PORT" "$NAMES"',
                }
            )
            label = {"corral-request": rid}
            wait_for(lambda: len(gcp_scripts(fake, **label)) == 2, 60, "both inserts")
            first, second = gcp_scripts(fake, **label)
            head = fleet.boot(first)
            wait_for(lambda: "waiting for the other 1 node(s)" in head.log(), 60, "node 0 waits")
            time.sleep(1.0)  # two of its heartbeats: it still waits, its run not started
            assert not list(out.iterdir())
            fleet.boot(second)
            done = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 120)
            assert done["state"] == "SUCCEEDED", (done, head.log())
        finally:
            fleet.kill_all()
    assert (out / "answer.txt").read_text() == "ack hello from 1"
    [zone] = {i["zone"] for i in done["instances"]}
    for rank in (0, 1):
        seen = json.loads((out / f"run-{rank}.json").read_text())
        assert seen["SKYPILOT_NODE_RANK"] == str(rank)
        assert seen["SKYPILOT_NODE_IPS"] == "127.0.0.1\n127.0.0.1"  # the API is on loopback
        assert seen["SKYPILOT_NUM_NODES"] == "2"
        info = json.loads(seen["SKYPILOT_CLUSTER_INFO"])
        assert (info["cloud"], info["cluster_name"], info["zone"]) == ("GCP", rid, zone)
