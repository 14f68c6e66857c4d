"""`corral config get/set/use-context`: contexts in <home>/config.yaml (API URL, token file),
the real console script with its own CORRAL_HOME. Which API a command then talks to is shown
against a real API in tests/integration/test_cli_habits.py."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import yaml

CORRAL = str(Path(sys.executable).parent / "corral")


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CORRAL_HOME": str(home), "HOME": str(home.parent)}
    return subprocess.run([CORRAL, *args], capture_output=True, text=True, env=env, timeout=60)


def test_set_makes_a_context_and_get_reads_it_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _run(home, "config", "set", "api_url", "http://10.0.0.5:8000").returncode == 0
    token = tmp_path / "prod-token"
    done = _run(home, "config", "set", "contexts.prod.token_file", str(token))
    assert done.returncode == 0, done.stderr
    assert _run(home, "config", "get", "api_url").stdout == "http://10.0.0.5:8000\n"
    assert _run(home, "config", "get", "current-context").stdout == "default\n"
    data = yaml.safe_load((home / "config.yaml").read_text())
    assert data == {
        "current-context": "default",
        "contexts": {
            "default": {"api_url": "http://10.0.0.5:8000"},
            "prod": {"token_file": str(token)},
        },
    }
    assert stat.S_IMODE((home / "config.yaml").stat().st_mode) == 0o600


def test_use_context_switches_and_an_unknown_name_gets_a_did_you_mean(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _run(home, "config", "set", "contexts.staging.api_url", "http://staging:8000")
    _run(home, "config", "set", "contexts.prod.api_url", "http://prod:8000")
    assert _run(home, "config", "use-context", "prod").returncode == 0
    assert _run(home, "config", "get", "api_url").stdout == "http://prod:8000\n"
    wrong = _run(home, "config", "use-context", "prd")
    assert wrong.returncode == 2
    assert "no context named 'prd' (did you mean 'prod'?)" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_an_unknown_key_is_exit_2_with_a_did_you_mean(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _run(home, "config", "set", "api_ulr", "http://x")
    assert done.returncode == 2
    assert "api_ulr: unknown key (did you mean 'api_url'?)" in done.stderr
    assert not (home / "config.yaml").exists()


def test_a_broken_config_file_names_the_file_and_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("contexts:\n  a:\n    api_url: http://a\n    tokn_file: x\n")
    done = _run(home, "status")
    assert done.returncode == 2
    path = home / "config.yaml"
    assert f"{path}: contexts.a.tokn_file: unknown key (did you mean 'token_file'?)" in done.stderr
