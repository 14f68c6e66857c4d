"""`corral cluster ...` checks its files before talking to the API: a wrong file is exit 2
with FILE:LINE: field: message, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CORRAL = str(Path(sys.executable).parent / "corral")


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CORRAL_HOME": str(tmp / "home")}
    return subprocess.run([CORRAL, *args], capture_output=True, text=True, env=env, timeout=60)


def test_up_with_a_wrong_cluster_file_is_exit_2_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: aws}\nmax_workers: -1\n")
    done = _run(tmp_path, "cluster", "up", str(bad), "--cloud", "local")
    assert done.returncode == 2
    assert f"{bad}:3: max_workers:" in done.stderr
    assert "Traceback" not in done.stderr


def test_demand_with_a_wrong_amount_is_exit_2_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "d.yaml"
    bad.write_text("bundles:\n  - {resources: {CPU: -1}}\n")
    done = _run(tmp_path, "cluster", "demand", "c", str(bad))
    assert done.returncode == 2
    assert f"{bad}:2: bundles[0].resources:" in done.stderr


def test_without_an_api_address_the_commands_say_so(tmp_path: Path) -> None:
    empty = tmp_path / "d.yaml"
    empty.write_text("")
    done = _run(tmp_path, "cluster", "demand", "c", str(empty), "--json")
    assert done.returncode == 2
    assert "no Corral API address" in done.stderr
    assert _run(tmp_path, "cluster", "list").returncode == 2


def test_an_unknown_cloud_is_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, "cluster", "up", str(tmp_path / "c.yaml"), "--cloud", "azure")
    assert done.returncode == 2
    assert "--cloud azure" in done.stderr


def test_kubernetes_is_a_cloud_up_accepts_as_the_api_does(tmp_path: Path) -> None:
    """The choices are the registry's (the API's ``cloud`` too): ``--cloud kubernetes`` passes
    and the file is what is checked next."""
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: aws}\nmax_workers: -1\n")
    done = _run(tmp_path, "cluster", "up", str(bad), "--cloud", "kubernetes")
    assert done.returncode == 2
    assert "--cloud" not in done.stderr
    assert f"{bad}:3: max_workers:" in done.stderr
