"""Shell completion of the `corral` command: the scripts typer writes for each shell, their
installation into a home of the test's own, and the candidates the shell is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CORRAL = str(Path(sys.executable).parent / "corral")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "_CORRAL"))}


def _corral(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CORRAL, *args], env={**_env(), **env}, capture_output=True, text=True, timeout=60
    )


def _candidates(words: str, **env: str) -> list[str]:
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    done = _corral(_CORRAL_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword, **env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _in_bash(command: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash, as a user types it (typer detects the shell it runs in)."""
    env = {**_env(), "HOME": str(home), "PATH": f"{Path(CORRAL).parent}:{os.environ['PATH']}"}
    # "; true" keeps bash from exec'ing the command: bash stays its parent, to be detected.
    return subprocess.run(
        ["bash", "-c", f"{command}; true"], env=env, capture_output=True, text=True, timeout=60
    )


def test_show_completion_prints_the_script_for_the_shell_it_runs_in(tmp_path: Path) -> None:
    done = _in_bash("corral --show-completion", tmp_path)
    assert done.stderr == ""
    assert "complete -o default -F _corral_completion corral" in done.stdout
    assert "_CORRAL_COMPLETE=complete_bash" in done.stdout


def test_install_completion_writes_the_script_and_sources_it(tmp_path: Path) -> None:
    done = _in_bash("corral --install-completion", tmp_path)
    assert "bash completion installed" in done.stdout, done.stderr
    script = tmp_path / ".bash_completions" / "corral.sh"
    assert "_CORRAL_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()


def test_the_other_shells_scripts() -> None:
    # typer's switch for naming the shell instead of detecting it (its own tests use it).
    named = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    for shell, mark in (("zsh", "#compdef corral"), ("fish", "complete --command corral")):
        done = _corral("--show-completion", shell, **named)
        assert done.returncode == 0, done.stderr
        assert mark in done.stdout and "_CORRAL_COMPLETE" in done.stdout, shell


def test_the_shell_is_given_commands_options_and_states(tmp_path: Path) -> None:
    home = {"CORRAL_HOME": str(tmp_path)}  # no API: only what needs none is offered
    assert _candidates("corral stat", **home) == ["status"]
    assert _candidates("corral sta", **home) == ["status", "start"]
    assert "--watch" in _candidates("corral status --", **home)
    assert _candidates("corral status --state P", **home) == [
        "PENDING",
        "PROVISIONING",
        "PREEMPTED",
    ]
    assert _candidates("corral status r-", **home) == []  # ids come from the API; none here
