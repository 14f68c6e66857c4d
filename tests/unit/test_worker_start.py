"""``corral run worker|beat`` exec ``python -m corral.workers.start``: the command line the CLI
writes is one the start module reads, with the options Celery's own command line was given
before (the queues of the role, the node name, the pool's size, task events on), and the
start module never loads Celery's command line (whose plugin commands cost about 0.6 s of CPU
per start). Every integration test starts its workers and beat this way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from corral.services.cli import up_cmd
from corral.services.providers.registry import registered_clouds
from corral.services.queues.task_names import role_queues
from corral.services.settings import get_settings
from corral.workers import start


def _exec_argv(monkeypatch: pytest.MonkeyPatch, call: Any) -> list[str]:
    """The argv the command would exec (the exec itself is caught: it would replace pytest)."""
    seen: list[list[str]] = []

    def caught(path: str, argv: list[str]) -> None:
        seen.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(up_cmd.os, "execv", caught)
    monkeypatch.setenv("CORRAL_REDIS_URL", "redis://127.0.0.1:1/0")
    # The settings are read afresh: a worker or beat refuses to start without a Redis URL, and
    # settings cached by an earlier test of this process may lack one.
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit):
            call()
    finally:
        get_settings.cache_clear()
    [argv] = seen
    return argv


def test_a_worker_command_line_is_the_start_modules_and_names_the_roles_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = _exec_argv(
        monkeypatch, lambda: up_cmd.worker(role="provision", concurrency=3, name="p-1@%h")
    )
    assert argv[:3] == [sys.executable, "-m", "corral.workers.start"]
    args = start._parser().parse_args(argv[3:])
    assert args.what == "worker"
    assert args.queues.split(",") == list(role_queues(registered_clouds())["provision"])
    assert (args.hostname, args.concurrency, args.loglevel) == ("p-1@%h", 3, "INFO")


def test_a_beat_command_line_names_the_resilient_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = _exec_argv(monkeypatch, up_cmd.beat)
    args = start._parser().parse_args(argv[3:])
    assert (args.what, args.scheduler) == ("beat", "corral.workers.resilience:BeatScheduler")


def test_json_logs_start_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_LOG_FORMAT", "json")
    argv = _exec_argv(monkeypatch, lambda: up_cmd.worker(role="schedule"))
    assert start._parser().parse_args(argv[3:]).quiet


def test_the_start_module_does_not_load_celerys_command_line() -> None:
    # What main() loads before it starts the worker or beat: the app, Celery's Worker and Beat
    # (click itself is Celery's: celery.exceptions imports it).
    code = (
        "import json, sys; import corral.workers.start as s; s._parser().parse_args(['beat']);"
        "from corral.workers.app import app; app.Worker; app.Beat;"
        "import celery.apps.worker, celery.apps.beat;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('celery.bin', 'flower',"
        " 'tornado', 'click_repl')))))"
    )
    env = {**os.environ, "CORRAL_REDIS_URL": "redis://127.0.0.1:1/0"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    assert json.loads(out.stdout) == []


def test_a_bad_command_line_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        start.main(["worker", "--queues", "schedule"])  # no --hostname, no --concurrency
    assert exited.value.code == 2
