"""``corral show-gpus``: the accelerators, and where one is sold at what price."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app
from corral.services.settings import reset_settings

CORRAL = Path(sys.executable).parent / "corral"


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


def show(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["show-gpus", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_all_accelerators_json() -> None:
    code, out, _ = show("--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)["accelerators"]}
    a100 = rows["A100"]
    assert (a100["counts"], a100["clouds"]) == ([1, 2, 4, 8, 16], ["aws", "gcp"])
    assert [o["instance_type"] for o in a100["offerings"] if o["count"] == 8] == [
        "a2-highgpu-8g",
        "p4d.24xlarge",
    ]
    assert rows["A10G"]["clouds"] == ["aws"]
    assert {"A100-80GB", "H100", "L4", "T4", "V100", "K80"} <= set(rows)
    assert "A10" not in rows


def test_one_accelerator_any_case_with_cheapest_region() -> None:
    code, out, _ = show("a100", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["accelerator"] == "A100"
    eights = [r for r in data["offerings"] if r["count"] == 8]
    assert [
        (r["cloud"], r["instance_type"], round(r["price_usd_per_hour"], 2), r["region"])
        for r in eights
    ] == [
        ("gcp", "a2-highgpu-8g", 29.39, "us-central1"),
        ("aws", "p4d.24xlarge", 32.77, "us-east-1"),
    ]
    assert all(r["spot_price_usd_per_hour"] < r["price_usd_per_hour"] for r in eights)
    counts = [r["count"] for r in data["offerings"]]
    assert counts == sorted(counts)


def test_count_and_cloud_filters() -> None:
    code, out, _ = show("L4:8", "--cloud", "GCP", "--json")
    assert code == 0
    rows = json.loads(out)["offerings"]
    assert [(r["instance_type"], round(r["price_usd_per_hour"], 2)) for r in rows] == [
        ("g2-standard-96", 7.98)
    ]
    code, out, _ = show("--cloud", "aws", "--json")
    assert "A10G" in {r["name"] for r in json.loads(out)["accelerators"]}
    assert all(r["clouds"] == ["aws"] for r in json.loads(out)["accelerators"])


def test_no_spot_shows_a_dash_in_the_table() -> None:
    code, out, _ = show("A100-80GB:8", "--cloud", "aws")
    assert code == 0
    row = next(line.split() for line in out.splitlines() if "p4de.24xlarge" in line)
    assert row == [
        "A100-80GB",
        "8",
        "aws",
        "p4de.24xlarge",
        "96",
        "1152",
        "40.97",
        "-",
        "us-east-1",
    ]
    header = next(line for line in out.splitlines() if "GPU" in line)
    assert "HOURLY_PRICE" in header and "HOURLY_SPOT_PRICE" in header and "REGION" in header


def test_unknown_name_exits_1_listing_known_ones() -> None:
    run = subprocess.run(
        [str(CORRAL), "show-gpus", "A10"], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 1
    assert "unknown accelerator 'A10'" in run.stderr
    assert "known accelerators: A100, A100-80GB, A10G, H100" in run.stderr
    code, out, _ = show("a10", "--json")
    assert code == 1 and "A10G" in json.loads(out)["known"]


def test_known_name_not_on_that_cloud_or_count_exits_1() -> None:
    code, _, err = show("A10G", "--cloud", "gcp")
    assert code == 1 and "no instance type carries A10G on gcp" in err
    code, _, err = show("H100:1")
    assert code == 1 and "H100:1" in err
    code, _, err = show("--cloud", "azure")
    assert code == 1 and "no offerings on 'azure'" in err


def test_malformed_name_exits_2() -> None:
    code, _, err = show("A100:many")
    assert code == 2 and "NAME:COUNT" in err
    code, _, err = show("A 100")
    assert code == 2 and "invalid accelerator name" in err


def test_all_lists_every_offering_of_every_accelerator() -> None:
    """SkyPilot's `show-gpus --all`: the instance types and prices of every accelerator in one
    table (the JSON listing already carries them)."""
    code, out, _ = show("--all")
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert rows[0][:3] == ["GPU", "QTY", "CLOUD"]
    listed = json.loads(show("--json")[1])["accelerators"]
    offered = sum(len(a["offerings"]) for a in listed)
    body = [r for r in rows[1:] if not set(r[0]) <= {"─"}]
    assert len(body) == offered > 20
    assert {r[0] for r in body} == {a["name"] for a in listed}
    assert ["A100", "8", "gcp", "a2-highgpu-8g"] in [r[:4] for r in body]
