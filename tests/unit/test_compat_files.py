"""Files of our own, one per documented feature of each format (tests/fixtures/compat/<format>),
each run through `corral validate` and the format's plan command, in-process through the CLI's
app: a file is accepted (exit 0) with exactly the notices its header lists, or refused (exit 2)
naming the field. The launches of the local-cloud ones are tests/integration/test_compat_launch.py.

Each file's header says what it shows (tests/compat_files.py reads it).

The plan commands: a task's `corral plan`; a Ray file's `corral autoscale explain` (with a small
demand); a Determined master config's `corral pools resolve`; an Anyscale compute config's
`corral plan` of a task that names it. A machine pool has no plan of its own (it is planned when
registered, through the API): it is validated only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app
from corral.services.settings import reset_settings

from compat_files import DEMAND, LOCAL_CLOUD, Case, cases, noticed


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def clouds(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """AWS, Google Cloud and the local cloud, each looking as if it had credentials, so what is
    planned does not depend on this machine."""
    key = tmp_path_factory.mktemp("gcp") / "key.json"
    key.write_text("{}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("CORRAL_CLOUDS", '["aws", "gcp", "local"]')
    monkeypatch.setenv("CORRAL_LOCAL_CLOUD_FILE", str(LOCAL_CLOUD))
    reset_settings()
    yield
    monkeypatch.undo()
    reset_settings()


def corral(*args: str | Path) -> Ran:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def plan(case: Case, tmp_path: Path) -> Ran | None:
    """The format's plan command for this file (None: a machine pool has none)."""
    if case.fmt == "skypilot":
        return corral("plan", case.path, "--local-cloud", LOCAL_CLOUD)
    if case.fmt == "ray":
        return corral(
            "autoscale", "explain", case.path, "--demand", DEMAND, "--local-cloud", LOCAL_CLOUD
        )
    if case.fmt == "determined":
        return corral("pools", "resolve", case.path)
    if "machine_types" in case.path.read_text():
        return None
    task = tmp_path / "task.yaml"
    task.write_text(
        f"name: uses-it\nresources: {{cloud: local}}\ncompute_config: {case.path}\nrun: echo\n"
    )
    return corral("plan", task, "--local-cloud", LOCAL_CLOUD)


ALL = cases()


def test_every_format_has_its_files_and_every_file_says_its_feature() -> None:
    by_format = {
        fmt: [c for c in ALL if c.fmt == fmt]
        for fmt in ("skypilot", "ray", "determined", "anyscale")
    }
    assert all(len(found) >= 5 for found in by_format.values()), {
        k: len(v) for k, v in by_format.items()
    }
    assert any(c.refused for c in ALL)
    assert all(c.feature for c in ALL)


@pytest.mark.parametrize("case", ALL, ids=lambda c: f"{c.fmt}/{c.path.stem}")
def test_validate_then_plan(case: Case, tmp_path: Path) -> None:
    checked = corral("validate", case.path)
    if case.refused is not None:
        assert checked.returncode == 2, checked
        assert re.search(
            rf"{re.escape(str(case.path))}:\d+: {re.escape(case.refused)}: ", checked.stderr
        ), checked.stderr
        assert "Traceback" not in checked.stderr
        return
    assert checked.returncode == 0, checked.stderr
    assert noticed(checked.stderr, case.path) == case.notices, checked.stderr
    planned = plan(case, tmp_path)
    if planned is None:
        return
    assert planned.returncode == 0, planned.stderr + planned.stdout
    assert noticed(planned.stderr, case.path) == case.notices, planned.stderr


def test_the_console_script_refuses_a_refused_field_with_exit_2() -> None:
    import subprocess
    import sys

    refused = next(c for c in ALL if c.refused)
    run = subprocess.run(
        [str(Path(sys.executable).parent / "corral"), "validate", str(refused.path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2 and f": {refused.refused}: " in run.stderr, run.stderr
