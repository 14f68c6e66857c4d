"""``corral plan``: in-process through the app, and as the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app
from corral.services.settings import reset_settings

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
CORRAL = Path(sys.executable).parent / "corral"

LOCAL_CLOUD = """
instance_types:
  - {name: cpu-4, vcpus: 4, memory_gib: 16, price_usd_per_hour: 0.2}
  - {name: gpu-a100-8, vcpus: 96, memory_gib: 1152, accelerators: {A100: 8},
     price_usd_per_hour: 30.0, spot_price_usd_per_hour: 9.0}
regions:
  - name: lab-west
    zones:
      - name: lab-west-b
        capacity: {gpu-a100-8: 1}
      - name: lab-west-a
        capacity: {cpu-4: 2, gpu-a100-8: 2}
  - name: lab-east
    zones:
      - name: lab-east-a
        capacity: {gpu-a100-8: 0}
"""


FROZEN_CATALOG = Path(__file__).resolve().parents[1] / "fixtures" / "catalog"


@pytest.fixture(autouse=True)
def catalog_clouds_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """These cases are about the command's logic on a catalog of AWS and GCP: launches may use
    those clouds only, so the local cloud `corral up` uses by default
    (tests/unit/test_cli_new_user.py) is left out, and the catalog is the frozen one of
    tests/fixtures/catalog (installed as `corral catalog update` would, under CORRAL_HOME), so
    refreshing the shipped prices does not change these cases."""
    home = tmp_path_factory.mktemp("home")
    shutil.copytree(FROZEN_CATALOG, home / "catalog")
    monkeypatch.setenv("CORRAL_HOME", str(home))
    monkeypatch.setenv("CORRAL_CLOUDS", '["aws", "gcp"]')
    reset_settings()
    yield
    monkeypatch.undo()
    reset_settings()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def credentials(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both clouds look as if they had credentials, so tables do not depend on this machine."""
    key = tmp_path_factory.mktemp("gcp") / "key.json"
    key.write_text("{}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))


def corral(*args: str | Path) -> Ran:
    """Run a command in-process (typer's runner): fast, same app as the console script."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def corral_script(*args: str | Path) -> Ran:
    """Run the installed ``corral`` console script in a process of its own."""
    run = subprocess.run(
        [str(CORRAL), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )
    return Ran(run.returncode, run.stdout, run.stderr)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_json_chain_for_a100_8() -> None:
    run = corral_script("plan", EXAMPLES / "a100-8.yaml", "--json")
    assert run.returncode == 0, run.stderr
    chain = json.loads(run.stdout)["candidates"]
    assert [c["chosen"] for c in chain] == [True] + [False] * (len(chain) - 1)
    first = chain[0]
    assert (first["cloud"], first["instance_type"], first["zone"]) == (
        "gcp",
        "a2-highgpu-8g",
        "us-central1-a",
    )
    assert first["accelerators"] == {"A100": 8}
    assert (first["vcpus"], first["memory_gib"], first["market"]) == (96, 680, "on_demand")
    assert round(first["price_usd_per_hour"], 2) == 29.39
    first_aws = next(c for c in chain if c["cloud"] == "aws")
    assert (first_aws["instance_type"], round(first_aws["cost_usd_per_hour"], 2)) == (
        "p4d.24xlarge",
        32.77,
    )
    assert {c["cloud"] for c in chain[: chain.index(first_aws)]} == {"gcp"}  # cloud by cloud


def test_table_one_row_per_type_and_all_rows_with_all() -> None:
    run = corral("plan", EXAMPLES / "a100-8.yaml")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "Considered resources (1 node):"
    header = next(line for line in lines if "CLOUD" in line)
    for column in (
        "INSTANCE",
        "vCPUs",
        "Mem(GB)",
        "ACCELERATORS",
        "REGION/ZONE",
        "COST ($)",
        "CHOSEN",
    ):
        assert column in header
    rows = [line.split() for line in lines if line.strip().startswith(("GCP", "AWS"))]
    assert rows == [
        ["GCP", "a2-highgpu-8g", "96", "680", "A100:8", "us-central1-a", "29.39", "✔"],
        ["AWS", "p4d.24xlarge", "96", "1152", "A100:8", "us-east-1a", "32.77"],
    ]
    every = corral("plan", EXAMPLES / "a100-8.yaml", "--all")
    every_rows = [
        line for line in every.stdout.splitlines() if line.strip().startswith(("GCP", "AWS"))
    ]
    json_chain = json.loads(corral("plan", EXAMPLES / "a100-8.yaml", "--json").stdout)["candidates"]
    assert len(every_rows) == len(json_chain) > 2


def test_spot_and_num_nodes_cost() -> None:
    table = corral("plan", EXAMPLES / "spot.yaml")
    assert "Considered resources (2 nodes):" in table.stdout
    assert "[Spot]" in table.stdout
    chain = json.loads(corral("plan", EXAMPLES / "spot.yaml", "--json").stdout)["candidates"]
    assert {c["market"] for c in chain} == {"spot"}
    for c in chain:
        assert c["cost_usd_per_hour"] == pytest.approx(2 * c["price_usd_per_hour"])
        assert c["accelerators"] == {"V100": 4}


def test_azure_notice_on_stderr_json_stays_clean() -> None:
    run = corral("plan", EXAMPLES / "any-of.yaml", "--json")
    assert run.returncode == 0
    assert "azure: Corral has no provider for this cloud" in run.stderr
    chain = json.loads(run.stdout)["candidates"]
    assert chain[0]["instance_type"] == "g5.xlarge"  # the cheapest candidate first


def test_seed_gpu_set_l4_before_a10g() -> None:
    chain = json.loads(corral("plan", EXAMPLES / "gpu-set.yaml", "--json").stdout)["candidates"]
    assert (chain[0]["cloud"], chain[0]["instance_type"]) == ("gcp", "g2-standard-4")
    first_a10g = next(n for n, c in enumerate(chain) if c["accelerators"] == {"A10G": 1})
    last_gcp_l4 = max(
        n for n, c in enumerate(chain) if c["cloud"] == "gcp" and c["accelerators"] == {"L4": 1}
    )
    assert last_gcp_l4 < first_a10g


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_plans(example: str) -> None:
    run = corral("plan", EXAMPLES / example, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["candidates"]


def test_nothing_plannable_exits_1_with_reasons(tmp_path: Path) -> None:
    path = write(tmp_path, "a100x3.yaml", "resources: {accelerators: A100:3}\n")
    run = corral("plan", path)
    assert run.returncode == 1
    assert "nothing can be planned" in run.stderr
    assert "A100:3: no offering on aws, gcp" in run.stderr
    as_json = corral("plan", path, "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {
        "candidates": [],
        "count": 0,
        "reasons": ["A100:3: no offering on aws, gcp"],
    }


def test_an_accelerator_no_cloud_has_is_exit_2_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "a10.yaml", "resources: {accelerators: A10:1}\n")
    run = corral("plan", path)
    assert run.returncode == 2
    assert (
        f"{path}:1: resources.accelerators: no instance type in the catalog carries "
        "accelerator 'A10' (did you mean 'A10G'?)"
    ) in run.stderr


def test_invalid_task_file_exits_2_with_file_line_field(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "name: x\nresources:\n  accelerators: A100:0\n")
    run = corral_script("plan", path)
    assert run.returncode == 2
    assert f"{path}:3: resources.accelerators:" in run.stderr
    assert "Traceback" not in run.stderr
    missing = corral("plan", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_local_cloud_is_planned_when_given(tmp_path: Path) -> None:
    cloud = write(tmp_path, "cloud.yaml", LOCAL_CLOUD)
    task = write(tmp_path, "t.yaml", "resources: {cloud: local, accelerators: A100:8}\n")
    without = corral("plan", task)
    assert without.returncode == 1 and "--local-cloud" in without.stderr
    run = corral("plan", task, "--local-cloud", cloud, "--json")
    assert run.returncode == 0, run.stderr
    chain = json.loads(run.stdout)["candidates"]
    # lab-west's zones in file order (equal prices), then lab-east (its sold-out zone is
    # still offered: capacity is the provider's business, not the plan's)
    assert [c["zone"] for c in chain] == ["lab-west-b", "lab-west-a", "lab-east-a"]
    unpinned = corral("plan", EXAMPLES / "a100-8.yaml", "--local-cloud", cloud, "--json")
    clouds = [c["cloud"] for c in json.loads(unpinned.stdout)["candidates"]]
    assert clouds[0] == "gcp" and clouds.index("local") < clouds.index("aws")  # 30.00 < 32.77


def test_invalid_local_cloud_exits_2(tmp_path: Path) -> None:
    cloud = write(tmp_path, "cloud.yaml", "instance_types: []\nregionz: []\n")
    run = corral("plan", EXAMPLES / "a100-8.yaml", "--local-cloud", cloud)
    assert run.returncode == 2
    assert str(cloud) in run.stderr and "Traceback" not in run.stderr


def test_clouds_without_credentials_are_shown_and_marked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    run = corral("plan", EXAMPLES / "a100-8.yaml")
    assert run.returncode == 0
    assert "AWS (no credentials)" in run.stdout
    assert "GCP (no credentials)" not in run.stdout
    assert "aws: no credentials found" in run.stderr
    chain = json.loads(corral("plan", EXAMPLES / "a100-8.yaml", "--json").stdout)["candidates"]
    assert {c["cloud"]: c["credentials"] for c in chain} == {"aws": False, "gcp": True}


def test_the_chosen_row_is_never_on_a_cloud_without_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GCP is the cheapest for A100:8 but has no credentials: a launch would start on AWS, so
    # the plan marks AWS's first row, in the table and in --json.
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("HOME", str(tmp_path))
    run = corral("plan", EXAMPLES / "a100-8.yaml")
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if line.strip()[:3] in ("GCP", "AWS")]
    assert rows[0][:2] == ["GCP", "(no"] and rows[0][-1] != "✔"
    aws = next(row for row in rows if row[0] == "AWS")
    assert aws[-1] == "✔"
    assert sum(row[-1] == "✔" for row in rows) == 1
    chain = json.loads(corral("plan", EXAMPLES / "a100-8.yaml", "--json").stdout)["candidates"]
    chosen = [c for c in chain if c["chosen"]]
    assert len(chosen) == 1 and chosen[0]["cloud"] == "aws" and chosen[0]["credentials"]
