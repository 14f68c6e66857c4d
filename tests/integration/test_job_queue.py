"""Issue #49: `corral exec ID task.yaml`, `corral queue ID` and `corral cancel ID JOB` on the
local cloud (the real API, workers and beat; each machine a real agent process).

SkyPilot's job queue (``sky exec``, ``sky queue``, ``sky cancel``; its documented semantics in
docs/source/reference/job-queue.rst and its tests in tests/smoke_tests/test_cluster_job.py,
``test_job_queue`` and ``test_multi_echo``) is the model: a task exec'd on a cluster queues
behind what runs there (PENDING), runs when its turn comes, ends by its exit code; job 1 is the
launch's own run; ``sky cancel`` cancels a pending job and kills a running one. What differs,
and why, is in docs/cli.md (a job-mode request ends once its queue is empty: it has no
cluster to keep).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.services.settings import default_machines_dir

from harness import System, run_cli, wait_for

pytestmark = pytest.mark.integration

CORRAL = str(Path(sys.executable).parent / "corral")


@pytest.fixture(scope="module")
def system(make_module_system: Callable[..., System]) -> Iterator[System]:
    system = make_module_system()
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    yield system


def _waiting_job(tmp_path: Path, flag: Path, name: str = "first", nodes: int = 1) -> Path:
    """A job whose run waits until ``flag`` exists, then exits 0."""
    task = tmp_path / f"{name}-launch.yaml"
    task.write_text(
        f"name: {name}\nnum_nodes: {nodes}\n"
        "resources: {cloud: local, instance_type: cpu-2}\n"
        f"run: |\n  while [ ! -f {flag} ]; do sleep 0.1; done\n  echo {name} done\n"
    )
    return task


def _launch(system: System, task: Path) -> str:
    done = system.cli("launch", str(task), "--detach")
    assert done.returncode == 0, done.stderr
    rid = done.stdout.strip().splitlines()[-1]
    system.wait_state(rid, {"RUNNING"}, 90)
    return rid


def _queue(system: System, rid: str) -> dict[int, dict[str, Any]]:
    done = system.cli("queue", rid, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["count"] == len(doc["jobs"]) and doc["request_id"] == rid
    return {int(j["id"]): j for j in doc["jobs"]}


def _job(system: System, rid: str, number: int) -> dict[str, Any]:
    return _queue(system, rid)[number]


def _wait_job(
    system: System, rid: str, number: int, states: set[str], timeout_s: float = 60
) -> None:
    wait_for(
        lambda: _job(system, rid, number)["state"] in states,
        timeout_s,
        f"job {number} of {rid} to reach {states}",
        logs=system.home / "logs",
    )


def test_a_task_execd_queues_behind_the_running_job_and_both_end_by_their_codes(
    system: System, tmp_path: Path
) -> None:
    first_flag, second_flag = tmp_path / "first.flag", tmp_path / "second.flag"
    rid = _launch(system, _waiting_job(tmp_path, first_flag))
    exec_file = tmp_path / "second.yaml"
    exec_file.write_text(
        "name: second\nenvs: {FROM_FILE: file-value}\n"
        "setup: echo this setup is not run\n"
        f"run: |\n  echo task=$SKYPILOT_TASK_ID val=$FROM_FILE flag=$FROM_FLAG\n"
        f"  while [ ! -f {second_flag} ]; do sleep 0.1; done\n  exit 3\n"
    )
    queued = system.cli("exec", rid, str(exec_file), "-d", "--env", "FROM_FLAG=flag-value")
    assert queued.returncode == 0, queued.stderr
    assert f"job 2 on request {rid}: queued" in queued.stdout
    assert "setup is not run by exec" in queued.stderr  # noticed, not silently dropped

    # A third, followed to its end: its output and its exit code are the command's.
    third = tmp_path / "third.yaml"
    third.write_text("name: third\nrun: echo third says hi; exit 5\n")
    follower = subprocess.Popen(
        [CORRAL, "exec", rid, str(third)],
        env={**system.env, "CORRAL_API_URL": system.api_url},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: 3 in _queue(system, rid), 30, "job 3 to be queued")
        jobs = _queue(system, rid)
        assert jobs[1]["state"] == "RUNNING" and jobs[1]["name"] == "first"
        assert jobs[2]["state"] == "PENDING" and jobs[2]["name"] == "second"
        assert jobs[3]["state"] == "PENDING"
        time.sleep(2.0)  # ten heartbeats: the nodes are busy, the jobs still wait
        jobs = _queue(system, rid)
        assert [jobs[n]["state"] for n in (1, 2, 3)] == ["RUNNING", "PENDING", "PENDING"]

        first_flag.touch()
        _wait_job(system, rid, 2, {"RUNNING"})
        # The node takes job 2 as soon as its run ends; job 1's end rides with its next
        # heartbeat (within a beat): wait for it rather than race it.
        _wait_job(system, rid, 1, {"SUCCEEDED", "FAILED"}, timeout_s=10)
        jobs = _queue(system, rid)
        assert jobs[1]["state"] == "SUCCEEDED" and jobs[1]["exit_code"] == 0
        assert jobs[3]["state"] == "PENDING"  # one at a time
        assert system.request(rid)["state"] == "RUNNING"  # outliving its run: jobs are queued

        second_flag.touch()
        _wait_job(system, rid, 2, {"FAILED", "SUCCEEDED", "CANCELLED"})
        jobs = _queue(system, rid)
        assert jobs[2]["state"] == "FAILED" and jobs[2]["exit_code"] == 3
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 5, err
    assert "third says hi" in out
    final = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 60)
    assert final["state"] == "SUCCEEDED" and final["exit_code"] == 0  # its run's (job 1)
    jobs = _queue(system, rid)
    assert [(jobs[n]["state"], jobs[n]["exit_code"]) for n in (1, 2, 3)] == [
        ("SUCCEEDED", 0), ("FAILED", 3), ("FAILED", 5),
    ]  # fmt: skip
    assert all(j["started_at"] <= j["ended_at"] for j in jobs.values())
    said = system.get(f"/v1/execs/{jobs[2]['execs'][0]}").json()["output"]
    assert f"_{rid}_2 val=file-value flag=flag-value" in said  # SkyPilot's task id: job 2
    assert "this setup is not run" not in said
    table = system.cli("queue", rid)
    assert table.returncode == 0
    for word in ("ID", "SUBMITTED", "DURATION", "STATE", "EXIT", "second", "FAILED"):
        assert word in table.stdout, table.stdout


def test_cancel_a_pending_job_and_a_running_one_on_every_node(
    system: System, tmp_path: Path
) -> None:
    """SkyPilot's tests/smoke_tests/test_cluster_job.py::test_job_queue: `sky cancel` of the
    running job lets the pending one behind it run (there two jobs share the GPUs at once; a
    Corral request's nodes run one at a time, docs/cli.md); a cancelled pending job never runs."""
    flag = tmp_path / "go.flag"
    rid = _launch(system, _waiting_job(tmp_path, flag, "two-nodes", nodes=2))
    marks = tmp_path / "marks"
    marks.mkdir()
    runner = tmp_path / "runner.yaml"
    runner.write_text(
        "name: runner\nnum_nodes: 2\n"
        f"run: |\n  touch {marks}/started-$SKYPILOT_NODE_RANK\n  sleep 60\n"
        f"  touch {marks}/finished-$SKYPILOT_NODE_RANK\n"
    )
    waiter = tmp_path / "waiter.yaml"
    waiter.write_text(f"name: waiter\nrun: touch {marks}/waiter-ran\n")
    never = tmp_path / "never.yaml"
    never.write_text(f"name: never\nrun: touch {marks}/never-ran\n")
    for task in (runner, waiter, never):
        done = system.cli("exec", rid, str(task), "--detach")
        assert done.returncode == 0, done.stderr

    cancelled = system.cli("cancel", rid, "4", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert [j["id"] for j in json.loads(cancelled.stdout)["cancelled"]] == [4]
    assert _job(system, rid, 4)["state"] == "CANCELLED"

    flag.touch()
    _wait_job(system, rid, 2, {"RUNNING"})
    wait_for(
        lambda: {p.name for p in marks.iterdir()} >= {"started-0", "started-1"},
        30, "the runner on both nodes",
    )  # fmt: skip
    assert _job(system, rid, 3)["state"] == "PENDING"
    done = system.cli("cancel", rid, "2")
    assert done.returncode == 0 and f"job 2 of request {rid}: CANCELLED" in done.stdout
    _wait_job(system, rid, 3, {"SUCCEEDED", "FAILED", "CANCELLED"}, 40)
    # Killed on both nodes: the request ends without the 60 s sleep; the waiter ran after it,
    # the cancelled pending job never did.
    final = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 40)
    assert final["state"] == "SUCCEEDED"
    assert {p.name for p in marks.iterdir()} == {"started-0", "started-1", "waiter-ran"}
    jobs = _queue(system, rid)
    assert [jobs[n]["state"] for n in (1, 2, 3, 4)] == [
        "SUCCEEDED", "CANCELLED", "SUCCEEDED", "CANCELLED",
    ]  # fmt: skip
    assert "cancelled by" in str(jobs[2]["reason"]) and jobs[2]["num_nodes"] == 2

    again = system.cli("cancel", rid, "2")
    assert again.returncode == 1 and "already ended (CANCELLED)" in again.stderr
    unknown = system.cli("cancel", rid, "99")
    assert unknown.returncode == 2 and "no job 99" in unknown.stderr
    ended = system.cli("exec", rid, str(waiter))
    assert ended.returncode == 2 and "a job needs it RUNNING" in ended.stderr


def test_cancel_all_and_a_request_ended_under_its_queue(system: System, tmp_path: Path) -> None:
    flag = tmp_path / "never.flag"
    rid = _launch(system, _waiting_job(tmp_path, flag, "held"))
    later = tmp_path / "later.yaml"
    later.write_text("run: sleep 30\n")
    for _ in range(2):
        assert system.cli("exec", rid, str(later), "-d").returncode == 0
    every = json.loads(system.cli("cancel", rid, "--all", "--json").stdout)
    assert sorted(j["id"] for j in every["cancelled"]) == [1, 2, 3]
    # Job 1 is the launch's run: cancelled, the run is stopped; nothing is queued behind it.
    final = system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 40)
    assert final["exit_code"] not in (None, 0)
    assert {j["state"] for j in _queue(system, rid).values()} == {"CANCELLED"}

    # A request taken down under its queue: its jobs that had not ended are CANCELLED.
    rid = _launch(system, _waiting_job(tmp_path, flag, "downed"))
    assert system.cli("exec", rid, str(later), "-d").returncode == 0
    assert system.cli("terminate", rid).returncode == 0
    system.wait_state(rid, {"TERMINATED"}, 60)
    job = _job(system, rid, 2)
    assert job["state"] == "CANCELLED" and "TERMINATED before it ran" in job["reason"]


def test_on_a_services_nodes_job_1_is_the_first_execd_and_cancel_kills_it(
    system: System, tmp_path: Path
) -> None:
    """A service has no run of its own: its first exec'd job is job 1 (as on a SkyPilot
    cluster launched without one), and `cancel ID 1` kills that job, not the service."""
    svc = tmp_path / "svc.yaml"
    svc.write_text(
        "name: svc\nworkload_type: service\nresources: {cloud: local, instance_type: cpu-2}\n"
    )
    rid = _launch(system, svc)
    marks = tmp_path / "svc-marks"
    marks.mkdir()
    job = tmp_path / "svc-job.yaml"
    job.write_text(f"run: |\n  touch {marks}/started\n  sleep 60\n  touch {marks}/finished\n")
    later = tmp_path / "svc-later.yaml"
    later.write_text("run: exit 6\n")
    try:
        for task in (job, later):
            assert system.cli("exec", rid, str(task), "-d").returncode == 0
        wait_for(lambda: (marks / "started").exists(), 30, "job 1 on the service's node")
        done = system.cli("cancel", rid, "1")
        assert done.returncode == 0, done.stderr
        _wait_job(system, rid, 2, {"FAILED"}, 40)  # ran once job 1 was killed
        jobs = _queue(system, rid)
        assert (jobs[1]["state"], jobs[2]["exit_code"]) == ("CANCELLED", 6)
        assert not (marks / "finished").exists()
        assert system.request(rid)["state"] == "RUNNING"  # the service itself runs on
    finally:
        system.cli("terminate", rid)


def test_a_member_of_another_project_sees_no_queue_and_a_viewer_cannot_change_it(
    system: System, tmp_path: Path
) -> None:
    flag = tmp_path / "iso.flag"
    for project in ("jq-team", "jq-other"):
        system.cli("projects", "add", project)
    launched = system.cli(
        "launch", str(_waiting_job(tmp_path, flag, "iso")), "--detach", "--project", "jq-team"
    )
    assert launched.returncode == 0, launched.stderr
    rid = launched.stdout.strip().splitlines()[-1]
    system.wait_state(rid, {"RUNNING"}, 90)
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    tokens = {}
    for name, project, role in (
        ("jq-other", "jq-other", "member"),
        ("jq-viewer", "jq-team", "viewer"),
    ):
        token_file = tmp_path / f"{name}.token"
        args = ["users", "add", name, "--token-file", str(token_file), "--role", role]
        added = system.cli(*args, "--project", project)
        assert added.returncode == 0, added.stderr
        tokens[name] = {**env, "CORRAL_API_TOKEN": token_file.read_text().strip()}
    task = tmp_path / "probe.yaml"
    task.write_text("run: echo hi\n")
    try:
        other = tokens["jq-other"]
        assert run_cli(["queue", rid], other, 60).returncode == 2  # not found, as unknown
        assert run_cli(["exec", rid, str(task), "-d"], other, 60).returncode == 2
        assert run_cli(["cancel", rid, "1"], other, 60).returncode == 2
        viewer = tokens["jq-viewer"]
        assert run_cli(["queue", rid, "--json"], viewer, 60).returncode == 0
        refused = run_cli(["cancel", rid, "1"], viewer, 60)
        assert refused.returncode == 2, refused.stderr
        assert _job(system, rid, 1)["state"] == "RUNNING"
    finally:
        flag.touch()
        system.wait_state(rid, {"SUCCEEDED"}, 60)


def test_an_execd_task_with_a_workdir_runs_in_its_own_copy_on_every_node(
    system: System, tmp_path: Path
) -> None:
    """As `sky exec` (SkyPilot's sky/execution.py ``exec``: it syncs the workdir and skips
    setup and file_mounts), a task exec'd with a ``workdir`` runs that workdir's files: here a
    script the launch's workdir does not have, on both nodes, the job ending by its exit code.
    Where SkyPilot syncs into the cluster's one ~/sky_workdir, Corral unpacks each such job's
    workdir into a folder of its own (docs/cli.md): the launch's run (job 1), still running
    when the job is queued, keeps its files, and a later job without a workdir runs in them."""
    flag = tmp_path / "wd.flag"
    launch_wd, job_wd, marks = tmp_path / "launch-wd", tmp_path / "job-wd", tmp_path / "wd-marks"
    for folder in (launch_wd, job_wd, marks):
        folder.mkdir()
    (launch_wd / "keep.txt").write_text("launch\n")
    (job_wd / "keep.txt").write_text("job\n")
    (job_wd / "sub").mkdir()
    (job_wd / "sub" / "new.sh").write_text(
        f'touch {marks}/ran-$SKYPILOT_NODE_RANK\necho "new script on $SKYPILOT_NODE_RANK"\nexit 7\n'
    )
    launch = tmp_path / "wd-launch.yaml"
    launch.write_text(
        f"name: wd-launch\nnum_nodes: 2\nworkdir: {launch_wd}\n"
        "resources: {cloud: local, instance_type: cpu-2}\n"
        f"run: |\n  while [ ! -f {flag} ]; do sleep 0.1; done\n"
        '  test "$(cat keep.txt)" = launch || exit 8\n'
        "  test ! -e sub/new.sh || exit 9\n"
    )
    rid = _launch(system, launch)
    job = tmp_path / "wd-job.yaml"
    job.write_text(
        f"name: wd-job\nnum_nodes: 2\nworkdir: {job_wd}\n"
        f"file_mounts: {{/data: {job_wd}}}\nsetup: echo no setup\n"
        "run: |\n"
        '  test "$(cat keep.txt)" = job || exit 10\n'
        '  test "$(cat ~/sky_workdir/keep.txt)" = launch || exit 11\n'
        "  bash sub/new.sh\n"
    )
    after = tmp_path / "wd-after.yaml"
    after.write_text(
        "name: wd-after\nrun: |\n  pwd\n"
        '  test "$(cat keep.txt)" = launch || exit 12\n  test ! -e sub || exit 13\n'
    )
    queued = system.cli("exec", rid, str(job), "-d")
    assert queued.returncode == 0, queued.stderr
    assert "file_mounts are not copied by exec" in queued.stderr
    assert "setup is not run by exec" in queued.stderr
    assert "not cloned by exec" not in queued.stderr  # synced, so not noticed
    assert system.cli("exec", rid, str(after), "-d").returncode == 0
    # The local cloud: the control plane copied the job's bundle beside each of its machines'
    # folders (as a launch's), 0600; they go with the machines.
    beside = list(default_machines_dir(system.home).glob("*.job-*.bundle"))
    assert len(beside) == 2 and all(p.stat().st_mode & 0o077 == 0 for p in beside), beside
    time.sleep(1.0)  # some heartbeats: the launch's run still runs, its files as they were
    assert _job(system, rid, 2)["state"] == "PENDING"
    assert not list(marks.iterdir())

    flag.touch()
    _wait_job(system, rid, 3, {"SUCCEEDED", "FAILED", "CANCELLED"}, 90)
    jobs = _queue(system, rid)
    assert [(jobs[n]["state"], jobs[n]["exit_code"]) for n in (1, 2, 3)] == [
        ("SUCCEEDED", 0), ("FAILED", 7), ("SUCCEEDED", 0),
    ], [(j["reason"], j["state"]) for j in jobs.values()]  # fmt: skip
    assert {p.name for p in marks.iterdir()} == {"ran-0", "ran-1"}  # on every node
    said = system.get(f"/v1/execs/{jobs[2]['execs'][1]}").json()["output"]
    assert "new script on 1" in said
    said = system.get(f"/v1/execs/{jobs[3]['execs'][0]}").json()["output"]
    assert said.strip().endswith("sky_workdir"), said  # the launch's workdir
    system.wait_state(rid, {"SUCCEEDED"}, 60)
    wait_for(lambda: not any(p.exists() for p in beside), 60, "the bundles to go")


def test_an_execd_workdir_is_bounded_and_its_bundle_is_the_requests_projects(
    system: System, tmp_path: Path
) -> None:
    """Bundle limits and project isolation as for launch (docs/security.md): a workdir over
    CORRAL_BUNDLE_MAX_BYTES is refused naming the file and the field (exit 2), and a job may
    name only a bundle kept for its request's project."""
    import gzip
    import hashlib
    import os

    flag = tmp_path / "lim.flag"
    rid = _launch(system, _waiting_job(tmp_path, flag, "lim"))
    try:
        big = tmp_path / "big-wd"
        big.mkdir()
        (big / "noise.bin").write_bytes(os.urandom(64 * 1024))
        task = tmp_path / "big.yaml"
        task.write_text(f"workdir: {big}\nrun: ls\n")
        env = {**system.env, "CORRAL_API_URL": system.api_url, "CORRAL_BUNDLE_MAX_BYTES": "4096"}
        refused = run_cli(["exec", rid, str(task), "-d"], env, 60)
        assert refused.returncode == 2, refused.stderr
        assert str(task) in refused.stderr and "workdir" in refused.stderr
        assert "CORRAL_BUNDLE_MAX_BYTES" in refused.stderr and "Traceback" not in refused.stderr

        assert system.cli("projects", "add", "wd-elsewhere").returncode == 0
        data = gzip.compress(b"not the request's project's", mtime=0)
        sha = hashlib.sha256(data).hexdigest()
        put = system._call("PUT", f"/v1/bundles/{sha}?project=wd-elsewhere", content=data)
        assert put.status_code == 201, put.text
        body = {"run": "ls", "bundle": {"sha256": sha, "size_bytes": len(data), "workdir": True}}
        named = system._call("POST", f"/v1/requests/{rid}/jobs", json=body)
        assert named.status_code == 422 and "not kept for the request's project" in named.text
        mounts = {**body["bundle"], "mounts": [{"target": "/d", "member": "mounts/0",
                                                 "is_dir": True}]}  # fmt: skip
        with_mounts = system._call("POST", f"/v1/requests/{rid}/jobs", json={**body,
                                   "bundle": mounts})  # fmt: skip
        assert with_mounts.status_code == 422 and "workdir only" in with_mounts.text
        assert set(_queue(system, rid)) == {1}
    finally:
        flag.touch()
        system.wait_state(rid, {"SUCCEEDED"}, 60)
