"""SkyPilot's runtime environment on the local cloud (issue #45 item 2), through the whole
installation: API, workers, the local cloud's node agents.

SkyPilot's distributed examples rendezvous with ``--node_rank=$SKYPILOT_NODE_RANK
--master_addr=$(echo "$SKYPILOT_NODE_IPS" | head -n1)`` (SkyPilot's docs,
``docs/source/running-jobs/distributed-jobs.rst``); the values' formats are those of
``docs/source/running-jobs/environment-variables.rst``. Here a real two-node job does that
with plain TCP: rank 1 connects to the address on the first line of ``SKYPILOT_NODE_IPS``,
rank 0 answers, both exit 0 and the request SUCCEEDS; each node's setup and run record the
variables they saw, and the test checks them against the request as the API reports it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.services.client import Client

from harness import CORRAL, System, free_port, wait_for, whole_system
from rendezvous import NAMES, RENDEZVOUS

LOCAL_CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"


@pytest.fixture(scope="module")
def system(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("skyenv-home")
    with whole_system(home, redis_server.url, LOCAL_CLOUD) as system:
        yield system


def test_two_nodes_rendezvous_over_tcp_at_the_head_address_skypilot_gives(
    system: System, tmp_path: Path
) -> None:
    out = tmp_path / "seen"
    out.mkdir()
    script = tmp_path / "rendezvous.py"
    script.write_text(RENDEZVOUS)
    names = json.dumps(NAMES)
    record = f"{sys.executable} -c 'import json,os,sys; json.dump({{k: os.environ.get(k) for k in json.loads(sys.argv[2])}}, open(sys.argv[1], \"w\"))'"  # noqa: E501
    task = {
        "name": "rendezvous",
        "num_nodes": 2,
        "resources": {"cloud": "local", "instance_type": "cpu-2"},
        "envs": {"OUT": str(out), "NAMES": names, "PORT": str(free_port())},
        # SkyPilot's setup sees the addresses as well (its SKYPILOT_SETUP_* and the run's names)
        "setup": f'{record} "$OUT/setup-$SKYPILOT_NODE_RANK.json" "$NAMES"',
        "run": f'{sys.executable} {script} "$OUT" "$PORT" "$NAMES"',
    }
    with Client(system.api_url, system.token, timeout_s=60) as client:
        job = client.launch(task)
        wait_for(lambda: client.status(job.id).ended, 120, "the two-node job to end")
        done = client.status(job.id)
        logs = client.logs(job.id)
    assert (done.state, done.exit_code) == ("SUCCEEDED", 0), (done, logs)
    assert (out / "heard.txt").read_text() == "hello from 1"
    assert (out / "answer.txt").read_text() == "ack hello from 1"

    [node] = {(i.region, i.zone) for i in done.instances}  # one launch: one zone
    region, zone = node
    for stage in ("setup", "run"):
        for rank in (0, 1):
            seen = json.loads((out / f"{stage}-{rank}.json").read_text())
            assert seen["SKYPILOT_NODE_RANK"] == seen["SKYPILOT_SETUP_NODE_RANK"] == str(rank)
            assert seen["CORRAL_NODE_RANK"] == str(rank)
            # One IP a line, the head's first; every local machine is this host.
            assert seen["SKYPILOT_NODE_IPS"] == "127.0.0.1\n127.0.0.1"
            assert seen["SKYPILOT_SETUP_NODE_IPS"] == seen["SKYPILOT_NODE_IPS"]
            assert seen["SKYPILOT_NUM_NODES"] == seen["CORRAL_NUM_NODES"] == "2"
            assert seen["SKYPILOT_NUM_GPUS_PER_NODE"] == "0"  # cpu-2 has no accelerator
            pattern = rf"sky-\d{{4}}(-\d\d){{5}}-\d{{6}}_{re.escape(job.id)}_1"
            assert re.fullmatch(pattern, seen["SKYPILOT_TASK_ID"]), seen["SKYPILOT_TASK_ID"]
            assert json.loads(seen["SKYPILOT_CLUSTER_INFO"]) == {
                "cluster_name": job.id,
                "cloud": "Local",
                "region": region,
                "zone": zone,
            }
    ids = {json.loads((out / f"run-{r}.json").read_text())["SKYPILOT_TASK_ID"] for r in (0, 1)}
    assert len(ids) == 1  # one task: one id on every node
    assert "waiting for the other 1 node(s)" in logs or "node 0 of 2" in logs


def test_relative_mount_targets_land_in_the_workdir_and_job_recovery_none_restarts_nothing(
    system: System, tmp_path: Path
) -> None:
    """Issue 45 item 5, through `corral launch`: a relative file-mount target is under the
    node's workdir (SkyPilot's examples/using_file_mounts.yaml: "Relative paths are under
    ~/sky_workdir/"; both `relative_dir` and `./dotslash_relative_dir`), and `job_recovery:
    none` (SkyPilot's yaml-spec example) is accepted as no job_recovery: the failed run is not
    restarted."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('workdir-file')\n")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "a.yaml").write_text("lr: 0.1\n")
    weights = tmp_path / "weights.bin"
    weights.write_text("weights-content\n")
    (project / "job.yaml").write_text(
        "name: relative\nworkdir: .\n"
        "resources: {cloud: local, instance_type: cpu-2, job_recovery: none}\n"
        f"file_mounts:\n  relative_dir: {configs}\n  ./dotslash/weights.bin: {weights}\n"
        "run: |\n"
        "  cat relative_dir/a.yaml\n"
        "  cat ~/sky_workdir/dotslash/weights.bin\n"
        "  test -f train.py && echo workdir-kept\n"
        "  exit 3\n"
    )
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    for command in (["validate", "job.yaml"], ["launch", "job.yaml"]):
        done = subprocess.run(
            [CORRAL, *command], cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        if command[0] == "validate":
            assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert done.returncode == 3, out + done.stderr  # the run's exit code, not restarted
    assert "lr: 0.1" in out and "weights-content" in out and "workdir-kept" in out, out
    with Client(system.api_url, system.token, timeout_s=30) as client:
        [request] = [r for r in client.list_requests() if r.name == "relative"]
        view = client.status(request.id)
    assert (view.state, view.exit_code, view.restarts or 0) == ("FAILED", 3, 0)


def test_the_two_node_rendezvous_example_runs_as_written(system: System, tmp_path: Path) -> None:
    """examples/workload/two-node-rendezvous.yaml, launched as a user would (its port made
    free here: the example's fixed one may be taken on a shared host)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "workload"
    text = (example / "two-node-rendezvous.yaml").read_text()
    job = tmp_path / "two-node-rendezvous.yaml"
    job.write_text(text.replace('MASTER_PORT: "29517"', f'MASTER_PORT: "{free_port()}"'))
    env = {**system.env, "CORRAL_API_URL": system.api_url}
    done = subprocess.run(
        [CORRAL, "launch", str(job)], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "head heard: hello from rank 1" in done.stdout, done.stdout
    assert "rank 1 got: welcome" in done.stdout, done.stdout
    assert "node 1 of 2; head at 127.0.0.1" in done.stdout, done.stdout
