"""What starting the ``corral`` command loads: never the runtime's heavy dependencies.

Typer builds every command (and reads every signature) before it parses the command line, so
whatever a command module imports at module level is paid by ``corral --version`` and by every
``--help``. Each case runs a fresh interpreter, since this test process has loaded everything.
No timings are asserted (the machine is noisy): the modules loaded are what is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# Never on the start-up path: the Celery/Redis stack, the API server and its client, cloud SDKs,
# and the core's heavier decision modules. A command imports them when it runs.
STARTUP_FORBIDDEN = (
    "celery",
    "kombu",
    "redis",
    "fastapi",
    "uvicorn",
    "boto3",
    "google",
    "httpx",
    "corral.services.queues.dispatch",
    "corral.shared.planner",
    "corral.shared.merge",
)

# Command modules that import only typer, rich's console (through output.py) and the standard
# library at module level; with them, none of these is loaded either.
LAZY_MODULES = (
    "corral.services.cli.output",
    "corral.services.cli.validate_cmd",
    "corral.services.cli.plan_cmd",
    "corral.services.cli.gpus_cmd",
    "corral.services.cli.config_cmd",
    "corral.services.cli.pools_cmd",
    "corral.services.cli.pools_api_cmd",
    "corral.services.cli.requests_cmd",
    "corral.services.cli.launch_cmd",
    "corral.services.cli.up_cmd",
    "corral.services.cli.version_cmd",
)
LAZY_FORBIDDEN = (
    *STARTUP_FORBIDDEN,
    "pydantic",
    "pydantic_settings",
    "yaml",
    "rich.table",
    "corral.shared.configio",
    "corral.shared.config",
    "corral.shared.catalog",
    "corral.shared.resource_pools",
    "corral.services.settings",
    "corral.services.client",
    "corral.services.cli.supervisor",
)

# Runs the app as the console script does and writes the loaded modules to argv[1].
RUN_APP = """
import json, sys
from corral.services.cli.main import app
out_path, args = sys.argv[1], sys.argv[2:]
try:
    app(args, prog_name="corral")
except SystemExit as exc:
    code = exc.code
with open(out_path, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, check=False
    )


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The modules among ``modules`` that are one of ``names`` or inside one of them."""
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def _modules_after_import(module: str) -> list[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    result = _python("-c", code)
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout)
    assert module in modules  # the import really happened
    return modules


def test_importing_the_cli_loads_no_heavy_module() -> None:
    modules = _modules_after_import("corral.services.cli.main")
    assert _loaded(modules, STARTUP_FORBIDDEN) == []
    code = "import json, sys; from corral.services.cli.main import app; print(json.dumps(%s))"
    result = _python("-c", code % "sorted(sys.modules)")
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout)
    assert "corral.services.cli.requests_cmd" in modules  # the commands were registered
    assert _loaded(modules, STARTUP_FORBIDDEN) == []


# `corral status` as the console script runs it: its command's module, no other.
RUN_MAIN = """
import json, sys
from corral.services.cli import main
out_path = sys.argv[1]
sys.argv = ["corral", *sys.argv[2:]]
try:
    main.run()
except SystemExit as exc:
    code = exc.code
with open(out_path, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


@pytest.mark.parametrize(
    ("args", "loaded", "not_loaded"),
    [
        (["status", "--help"], "requests_cmd", "plan_cmd"),
        (["launch", "--help"], "launch_cmd", "up_cmd"),
        (["plan", "--help"], "plan_cmd", "requests_cmd"),
        (["pools", "apply", "--help"], "pools_api_cmd", "requests_cmd"),
        (["run", "worker", "--help"], "up_cmd", None),  # `run` is the whole app's
        (["--help"], "users_cmd", None),
    ],
)
def test_a_command_loads_its_own_module(
    args: list[str], loaded: str, not_loaded: str | None, tmp_path: Path
) -> None:
    report = tmp_path / "modules.json"
    result = _python("-c", RUN_MAIN, str(report), *args)
    assert result.returncode == 0, result.stderr
    modules = json.loads(report.read_text())["modules"]
    assert f"corral.services.cli.{loaded}" in modules
    if not_loaded is not None:
        assert f"corral.services.cli.{not_loaded}" not in modules


def test_run_worker_reads_its_queues_without_loading_celery(tmp_path: Path) -> None:
    """`corral run worker` execs Celery, which loads Celery and the task code itself: what the
    command loads before that is paid twice per worker start. An unknown role stops it just
    before the exec, with what it loaded to read the role's queues."""
    report = tmp_path / "modules.json"
    result = _python("-c", RUN_MAIN, str(report), "run", "worker", "--role", "nope")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(report.read_text())
    assert outcome["code"] == 2  # refused: the roles are read, nothing was started
    assert "corral.services.queues.task_names" in outcome["modules"]
    assert _loaded(outcome["modules"], ("celery", "kombu", "redis")) == []


def _names(app: Any) -> set[str]:
    commands = {c.name for c in app.registered_commands}
    return commands | {g.name for g in app.registered_groups}


def test_the_command_table_says_what_each_module_adds() -> None:
    from corral.services.cli import main

    for module, names in main.COMMAND_MODULES.items():
        if module == "corral.services.cli.pools_api_cmd":  # it adds to `pools` on import
            continue
        assert _names(main.app_with((module,))) == set(names), module
    assert _names(main.app) == {n for names in main.COMMAND_MODULES.values() for n in names}


# The command tree of the app built for some of ROUTES' names (argv: the names), or of the
# whole app (no names): each command's help, parameters and subcommands. Run in a fresh
# interpreter per set of modules, since a module may add commands to another's group when
# imported (pools_api_cmd to `pools`): in one process, an app missing a module would still
# find the commands the other had added.
COMMAND_TREE = """
import json, sys
from typer.main import get_command
from corral.services.cli import main

def tree(command):
    params = [[p.name, p.opts, p.secondary_opts, p.required, repr(p.default)]
              for p in command.params]
    subs = getattr(command, "commands", {})
    return {"help": command.help, "params": params,
            "commands": {name: tree(subs[name]) for name in sorted(subs)}}

names = sys.argv[1:]
app = main.app_with(main.ROUTES[names[0]]) if names else main.app
group = get_command(app)
print(json.dumps({n: tree(group.commands[n]) for n in names or sorted(main.ROUTES)}))
"""


def test_a_routed_command_is_the_whole_apps_command() -> None:
    """`corral NAME` run with NAME's modules only has the whole app's command: the same
    help, parameters and subcommands, all the way down."""
    from corral.services.cli import main

    by_modules: dict[tuple[str, ...], list[str]] = {}
    for name, modules in main.ROUTES.items():
        by_modules.setdefault(modules, []).append(name)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", COMMAND_TREE, *names], stdout=subprocess.PIPE, text=True
        )
        for names in [[], *by_modules.values()]
    ]
    whole, *parts = [json.loads(child.communicate(timeout=120)[0]) for child in children]
    for part in parts:
        for name, tree in part.items():
            assert tree == whole[name], name


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--version"], "corral "),
        (["status", "--help"], "Usage: corral status"),
        (["launch", "--help"], "Usage: corral launch"),
        (["plan", "--help"], "Usage: corral plan"),
        (["validate", "--help"], "Usage: corral validate"),
        (["config", "merge", "--help"], "Usage: corral config merge"),
        (["up", "--help"], "Usage: corral up"),
        (["pools", "apply", "--help"], "Usage: corral pools apply"),
        (["why", "--help"], "Usage: corral why"),
        (["run", "worker", "--help"], "Usage: corral run worker"),
        (["version", "--help"], "Usage: corral version"),
    ],
)
def test_version_and_help_load_no_heavy_module(args: list[str], shown: str, tmp_path: Path) -> None:
    report = tmp_path / "modules.json"
    result = _python("-c", RUN_APP, str(report), *args)
    assert result.returncode == 0, result.stderr
    assert shown in result.stdout
    loaded = json.loads(report.read_text())
    assert loaded["code"] == 0
    assert _loaded(loaded["modules"], STARTUP_FORBIDDEN) == []


@pytest.mark.parametrize("module", LAZY_MODULES)
def test_command_module_imports_its_dependencies_only_when_run(module: str) -> None:
    assert _loaded(_modules_after_import(module), LAZY_FORBIDDEN) == []


def test_validate_lists_the_kinds_detect_knows() -> None:
    """validate_cmd spells the kinds out (importing detect would load every model)."""
    from corral.services.cli.validate_cmd import KINDS, Kind
    from corral.shared.config.detect import KINDS as DETECT_KINDS

    assert KINDS == DETECT_KINDS
    assert [k.value for k in Kind] == list(DETECT_KINDS)


# A command that lets a ConfigError escape, added before the app is built; run() must turn it
# into the line and exit 2. Any other exception still escapes as itself.
ESCAPING = """
import sys
from corral.services.cli import main
from corral.shared.configio import ConfigError

@main.app.command("boom")
def boom(kind: str) -> None:
    if kind == "config":
        raise ConfigError.single("task.yaml", "expected a number", "resources.cpus", 7)
    raise KeyError("not a mistake of the user")

sys.argv = ["corral", "boom", sys.argv[1]]
main.run()
"""


def test_run_turns_an_escaped_config_error_into_exit_2() -> None:
    result = _python("-c", ESCAPING, "config")
    assert result.returncode == 2
    assert result.stderr.strip() == "task.yaml:7: resources.cpus: expected a number"


def test_run_lets_other_exceptions_through() -> None:
    result = _python("-c", ESCAPING, "other")
    assert result.returncode == 1
    assert "KeyError: 'not a mistake of the user'" in result.stderr


# A worker process's warm-up builds every enabled cloud's provider to ask for its credentials.
# Without Google Cloud credentials the Compute Engine SDK (about a second of CPU to import) is
# never needed, so it must not load; a process with credentials loads it at warm-up as before.
WARM_UP = """
import json, sys
from corral.services.runtime.deps import deps
from corral.services.runtime.planning import warm_up
warm_up(deps())
print(json.dumps({"clouds": list(deps().launchable_clouds()),
                  "enabled": list(deps().settings.clouds), "modules": sorted(sys.modules)}))
"""


def test_a_worker_warm_up_without_gcp_credentials_leaves_the_compute_sdk_unloaded(
    tmp_path: Path,
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),  # no gcloud or AWS credential files
        "CORRAL_HOME": str(tmp_path / "home"),
        "CORRAL_LOCAL_CLOUD_FILE": str(REPO / "tests/fixtures/localcloud/runtime.yaml"),
        "CORRAL_REDIS_URL": "redis://127.0.0.1:1/0",  # never reached: no command is sent
    }
    result = subprocess.run(
        [sys.executable, "-c", WARM_UP], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert "gcp" in seen["enabled"] and "gcp" not in seen["clouds"]
    assert "corral.services.providers.gcp.provider" in seen["modules"]  # the provider was built
    assert _loaded(seen["modules"], ("google.cloud.compute_v1",)) == []


@pytest.mark.parametrize("args", [["worker", "--role", "provision"], ["beat"]])
def test_a_worker_or_beat_without_a_redis_url_says_so_with_exit_2(
    args: list[str], tmp_path: Path
) -> None:
    """Started by hand without CORRAL_REDIS_URL, a worker or beat stops before its exec with the
    setting named (it was a traceback from the Celery app's set-up, exit code 1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_HOME"] = str(tmp_path / "home")
    corral = str(Path(sys.executable).parent / "corral")
    done = subprocess.run(
        [corral, "run", *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "CORRAL_REDIS_URL is not set" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
