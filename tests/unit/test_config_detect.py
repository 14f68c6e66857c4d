"""Telling a file's kind, loading it, and reading the same files written as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from corral.shared.config.detect import KINDS, MODELS, detect_kind, load_config
from corral.shared.configio import ConfigError

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
SEED_FILES = sorted(SEEDS.glob("*.yaml"))

EXPECTED_KIND = {
    "anyscale-machine-pool": "machine_pool",
    "anyscale-compute-config": "compute_config",
    "determined-master": "master_config",
    "determined-task": "task",
    "skypilot-task": "task",
    "ray-cluster": "cluster",
}


def _expected(path: Path) -> str:
    return next(kind for prefix, kind in EXPECTED_KIND.items() if path.name.startswith(prefix))


def test_every_kind_has_seed_fixtures() -> None:
    # Every kind of the four systems has seed files; the local cloud is Corral's own.
    assert {_expected(p) for p in SEED_FILES} | {"local_cloud"} == set(KINDS) == set(MODELS)
    assert len(SEED_FILES) >= 20


@pytest.mark.parametrize(
    "path",
    [
        Path(__file__).resolve().parents[2] / "services/providers/local/example-cloud.yaml",
        *sorted((Path(__file__).resolve().parents[1] / "fixtures" / "localcloud").glob("*.yaml")),
    ],
    ids=lambda p: p.name,
)
def test_local_cloud_files_are_detected(path: Path) -> None:
    assert load_config(path).kind == "local_cloud"


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name)
def test_every_seed_is_detected_and_validates_as_written(path: Path) -> None:
    loaded = load_config(path)
    assert loaded.kind == _expected(path)
    assert isinstance(loaded.model, MODELS[loaded.kind])


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name)
def test_the_same_file_as_json_gives_the_same_model(path: Path, tmp_path: Path) -> None:
    as_json = tmp_path / (path.stem + ".json")
    as_json.write_text(json.dumps(yaml.safe_load(path.read_text()), indent=2))
    from_yaml, from_json = load_config(path), load_config(as_json)
    assert from_json.kind == from_yaml.kind
    assert from_json.model == from_yaml.model


def test_json_errors_carry_lines(tmp_path: Path) -> None:
    path = tmp_path / "task.json"
    path.write_text('{\n  "name": "t",\n  "resources": {\n    "acelerators": "A100"\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (4, "resources.acelerators")


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ({"kind": "ANYSCALE_MANAGED"}, "machine_pool"),
        ({"head_node": {"instance_type": "m5"}, "worker_nodes": []}, "compute_config"),
        ({"head_node": {"InstanceType": "m5"}, "worker_nodes": {"InstanceType": "m5"}}, "cluster"),
        ({"provider": {"type": "aws"}}, "cluster"),
        ({"resource_pools": []}, "master_config"),
        ({"scheduler": {"type": "priority"}}, "master_config"),
        ({"run": "echo hi"}, "task"),
        ({"name": "only-a-name"}, "task"),
        ({"file_mounts": {}}, None),  # SkyPilot and Ray both: unclear
        ({"unrelated": 1}, None),
        ({}, None),
        ([1, 2], None),
        (None, None),
    ],
)
def test_detect_kind(data: object, kind: str | None) -> None:
    assert detect_kind(data) == kind
