"""A name the catalog does not know: said at the field that names it, with the nearest name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app
from corral.services.settings import reset_settings
from corral.shared.catalog import Catalog
from corral.shared.catalog.offering import Offering
from corral.shared.catalog_names import (
    nearest,
    resources_name_problems,
    unknown_accelerator,
    unknown_instance_type,
)
from corral.shared.config.task import Task

CORRAL = Path(sys.executable).parent / "corral"


def _catalog() -> Catalog:
    return Catalog(
        [
            Offering("gcp", "n1-standard-2", None, 0, 2, 7.5, 0.09, 0.02, "us-central1", "a"),
            Offering("gcp", "n1-standard-4", None, 0, 4, 15, 0.19, 0.04, "us-central1", "a"),
            Offering("gcp", "g2-standard-4", "L4", 1, 4, 16, 0.7, 0.2, "us-central1", "a"),
            Offering("aws", "g6e.xlarge", "L40S", 1, 4, 32, 1.86, 0.7, "us-east-1", "b"),
            Offering("aws", "p4de.24xlarge", "A100-80GB", 8, 96, 1152, 40, None, "us-east-1", "b"),
        ]
    )


def test_nearest_is_case_insensitive_and_keeps_the_catalog_spelling() -> None:
    assert nearest("N1-STANDRD-2", ["n1-standard-2", "n1-standard-4"]) == "n1-standard-2"
    assert nearest("a100-80g", ["A100-80GB", "H100"]) == "A100-80GB"
    assert nearest("zzz", ["A100-80GB", "H100"]) is None


def test_unknown_instance_type_on_a_pinned_cloud_and_anywhere() -> None:
    cat = _catalog()
    assert unknown_instance_type(cat, "n1-standard-2", "gcp") is None
    assert unknown_instance_type(cat, "N1-Standard-2", None) is None  # any case
    assert unknown_instance_type(cat, "n1-standrd-2", "gcp") == (
        "instance type 'n1-standrd-2' is not in the gcp catalog (did you mean 'n1-standard-2'?)"
    )
    # An AWS type pinned to gcp: not there, and nothing on gcp is close.
    assert unknown_instance_type(cat, "g6e.xlarge", "gcp") == (
        "instance type 'g6e.xlarge' is not in the gcp catalog"
    )
    # A cloud with no offerings here (unconfigured): the planner says why, not this check.
    assert unknown_instance_type(cat, "whatever", "kubernetes") is None


def test_unknown_accelerator_suggests_the_nearest_carried_on_that_cloud() -> None:
    cat = _catalog()
    assert unknown_accelerator(cat, "L40S", None) is None
    assert unknown_accelerator(cat, "L40", None) == (
        "no instance type in the catalog carries accelerator 'L40' (did you mean 'L40S'?)"
    )
    # L40S is sold on aws only: pinned to gcp, the nearest gcp carries is L4.
    assert unknown_accelerator(cat, "L40S", "gcp") == (
        "no instance type on gcp carries accelerator 'L40S' (did you mean 'L4'?)"
    )


def test_resources_problems_point_at_each_field_of_each_candidate() -> None:
    task = Task.model_validate(
        {
            "resources": {
                "instance_type": "n1-standrd-2",
                "cloud": "gcp",
                "any_of": [{"accelerators": "A100-80G:8", "cloud": "aws"}, {"accelerators": "L4"}],
            },
            "run": "true",
        }
    )
    assert resources_name_problems(task.resources, _catalog()) == [
        (
            ("resources", "instance_type"),
            "instance type 'n1-standrd-2' is not in the gcp catalog (did you mean "
            "'n1-standard-2'?)",
        ),
        (
            ("resources", "any_of", 0, "accelerators"),
            "no instance type on aws carries accelerator 'A100-80G' (did you mean 'A100-80GB'?)",
        ),
    ]


@pytest.fixture
def shipped_clouds_only(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("CORRAL_CLOUDS", '["aws", "gcp"]')
    reset_settings()
    yield None
    monkeypatch.undo()
    reset_settings()


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["launch", "--dryrun"], ["launch"]])
def test_validate_plan_and_launch_name_the_line_and_the_nearest_type(
    command: list[str], tmp_path: Path, shipped_clouds_only: object
) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("resources:\n  cloud: aws\n  instance_type: p4de.24xlarg\nrun: 'true'\n")
    result = CliRunner().invoke(app, [*command, str(task)])
    assert result.exit_code == 2, result.output
    assert (
        f"{task}:3: resources.instance_type: instance type 'p4de.24xlarg' is not in the aws "
        "catalog (did you mean 'p4de.24xlarge'?)"
    ) in result.stderr


def test_a_misspelt_accelerator_is_refused_by_validate(
    tmp_path: Path, shipped_clouds_only: object
) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("resources:\n  accelerators: A100-80G:8\nrun: 'true'\n")
    result = CliRunner().invoke(app, ["validate", str(task)])
    assert result.exit_code == 2
    assert (
        f"{task}:2: resources.accelerators: no instance type in the catalog carries "
        "accelerator 'A100-80G' (did you mean 'A100-80GB'?)"
    ) in result.stderr
