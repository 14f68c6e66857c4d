"""Issue #28's new-user paths that need no running system, through the installed console
script with a clean environment (no CORRAL_* settings, a HOME with no cloud credentials):
what a first-time user meets. The paths that need the API (launch notices, an impossible
request, `why` of a direct request, the JSON envelope of every list) are in
tests/integration/test_cli_habits.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CORRAL = str(Path(sys.executable).parent / "corral")
REPO = Path(__file__).resolve().parents[2]


def _run(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "CORRAL_HOME": str(tmp / ".corral")}
    return subprocess.run(
        [CORRAL, *map(str, args)], capture_output=True, text=True, env=env, timeout=60
    )


def test_plan_of_the_example_uses_the_packaged_local_cloud_as_up_does(tmp_path: Path) -> None:
    done = _run(tmp_path, "plan", REPO / "examples" / "workload" / "train-a100.yaml", "--json")
    assert done.returncode == 0, done.stderr
    chain = json.loads(done.stdout)
    assert chain["count"] == len(chain["candidates"]) > 0
    assert {c["cloud"] for c in chain["candidates"]} == {"local"}
    assert chain["candidates"][0]["instance_type"] == "gpu-a100-8"
    # A task pinned to the local cloud hears nothing about AWS or GCP credentials.
    assert "credentials" not in done.stderr


def test_show_gpus_on_the_local_cloud(tmp_path: Path) -> None:
    done = _run(tmp_path, "show-gpus", "--cloud", "local", "--json")
    assert done.returncode == 0, done.stderr
    names = {a["name"] for a in json.loads(done.stdout)["accelerators"]}
    assert "A100" in names
    one = json.loads(_run(tmp_path, "show-gpus", "A100:8", "--cloud", "local", "--json").stdout)
    assert one["accelerator"] == "A100" and one["count"] == len(one["offerings"]) >= 1


def test_an_unknown_field_gets_a_did_you_mean(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nresources:\n  cloud: local\n  acelerators: A100:1\nrun: echo\n")
    done = _run(tmp_path, "validate", task)
    assert done.returncode == 2
    assert f"{task}:4: resources.acelerators: unknown field " in done.stderr
    assert "did you mean 'accelerators'?" in done.stderr
    far = tmp_path / "far.yaml"
    far.write_text("name: t\nresources:\n  cloud: local\nzzzqqq: 1\nrun: echo\n")
    done = _run(tmp_path, "validate", far)
    assert "zzzqqq: unknown field" in done.stderr and "did you mean" not in done.stderr


def test_plan_of_an_unpinned_gpu_task_marks_the_clouds_without_credentials(
    tmp_path: Path,
) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("resources: {accelerators: A100:8}\nrun: echo\n")
    done = _run(tmp_path, "plan", task)
    assert done.returncode == 0, done.stderr
    assert "aws: no credentials found" in done.stderr
    assert "gcp: no credentials found" in done.stderr
