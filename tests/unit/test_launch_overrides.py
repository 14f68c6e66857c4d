"""The launch flags merged over a task file (``corral.shared.config.overrides``), as SkyPilot's
``sky launch`` merges them. The secret cases are translated from SkyPilot's
``tests/unit_tests/test_cli_secrets.py``, each named after its test there."""

from __future__ import annotations

import pytest

from corral.services.cli.overrides_opt import FlagError, LaunchFlags, pair
from corral.shared.config.overrides import OverrideError, Overrides, apply_overrides
from corral.shared.config.task import Task

FILE = {
    "run": "echo hello",
    "envs": {"DEBUG": True, "LOG_LEVEL": "info"},
    "secrets": {"API_KEY": "yaml_secret", "DB_PASSWORD": "yaml_password"},
}


# ---- SkyPilot's tests/unit_tests/test_cli_secrets.py --------------------------------------


def test_parse_secret_var_with_equals() -> None:
    assert pair("--secret", "API_KEY=secret123") == ("API_KEY", "secret123")
    url = "postgresql://user:pass@host:5432/db"
    assert pair("--secret", f"DATABASE_URL={url}") == ("DATABASE_URL", url)
    assert pair("--secret", "JWT_SECRET=secret=with=equals") == ("JWT_SECRET", "secret=with=equals")
    assert pair("--secret", "EMPTY_SECRET=") == ("EMPTY_SECRET", "")


def test_parse_secret_var_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SECRET", "env_secret_value")
    assert pair("--secret", "TEST_SECRET") == ("TEST_SECRET", "env_secret_value")
    monkeypatch.delenv("TEST_SECRET")
    with pytest.raises(FlagError, match="TEST_SECRET is not set"):
        pair("--secret", "TEST_SECRET")


def test_make_task_with_secrets_override() -> None:
    merged = apply_overrides(
        FILE,
        Overrides(
            envs={"PUBLIC_VAR": "public_value"},
            secrets={"API_KEY": "overridden_secret", "NEW_SECRET": "new_value"},
        ),
    )
    task = Task.model_validate(merged)
    assert task.secrets == {
        "API_KEY": "overridden_secret",  # overridden
        "DB_PASSWORD": "yaml_password",  # from the file
        "NEW_SECRET": "new_value",  # added
    }
    # SkyPilot reads `DEBUG: true` as "True"; Corral as "true" (docs/cli.md, envs).
    assert task.envs == {"DEBUG": "true", "LOG_LEVEL": "info", "PUBLIC_VAR": "public_value"}
    assert FILE["secrets"] == {"API_KEY": "yaml_secret", "DB_PASSWORD": "yaml_password"}


def test_env_and_secrets_separate_handling() -> None:
    data = {"run": "x", "envs": {"SHARED_VAR": "env_value"}, "secrets": {"SHARED_VAR": "s"}}
    merged = apply_overrides(
        data,
        Overrides(
            envs={"SHARED_VAR": "cli_env_value", "ENV_ONLY": "env_val"},
            secrets={"SHARED_VAR": "cli_secret_value", "SECRET_ONLY": "secret_val"},
        ),
    )
    task = Task.model_validate(merged)
    assert task.envs == {"SHARED_VAR": "cli_env_value", "ENV_ONLY": "env_val"}
    assert task.secrets == {"SHARED_VAR": "cli_secret_value", "SECRET_ONLY": "secret_val"}
    # On the machine a secret wins over an env of the same name (SkyPilot's envs_and_secrets).
    assert task.run_envs()["SHARED_VAR"] == "cli_secret_value"


def test_null_secrets_override_with_cli() -> None:
    data = {"run": "x", "envs": {"PUBLIC_VAR": "v"}, "secrets": {"API_KEY": None, "TOK": None}}
    task = Task.model_validate(
        apply_overrides(data, Overrides(secrets={"API_KEY": "k", "TOK": "t"}))
    )
    assert task.secrets == {"API_KEY": "k", "TOK": "t"} and task.unset_secrets() == []
    assert task.envs == {"PUBLIC_VAR": "v"}


def test_null_secrets_without_cli_override_fails() -> None:
    task = Task.model_validate({"run": "x", "secrets": {"API_KEY": None}})
    assert task.unset_secrets() == ["API_KEY"]  # the submit refuses it (tests below)


def test_mixed_null_and_non_null_secrets() -> None:
    data = {"run": "x", "secrets": {"YAML_SECRET": "yaml-value", "CLI_SECRET": None}}
    task = Task.model_validate(apply_overrides(data, Overrides(secrets={"CLI_SECRET": "cli"})))
    assert task.secrets == {"YAML_SECRET": "yaml-value", "CLI_SECRET": "cli"}


# ---- resources: every candidate, as SkyPilot's set_resources_override ----------------------


def test_gpus_and_spot_apply_to_every_candidate() -> None:
    data = {
        "resources": {
            "accelerators": "A100:8",
            "any_of": [{"cloud": "aws"}, {"infra": "gcp/us-central1", "accelerators": "H100:8"}],
        }
    }
    merged = apply_overrides(data, Overrides(gpus="L4:1", use_spot=True))
    candidates = Task.model_validate(merged).resources.candidates()
    assert [(c.cloud, c.accelerators, c.use_spot) for c in candidates] == [
        ("aws", "L4:1", True),
        ("gcp", "L4:1", True),
    ]
    none = apply_overrides(data, Overrides(gpus="none"))
    assert all(c.accelerators is None for c in Task.model_validate(none).resources.candidates())


def test_infra_sets_cloud_region_and_zone_together() -> None:
    data = {"resources": {"infra": "gcp/us-central1/us-central1-a", "cpus": 4}}
    merged = apply_overrides(data, Overrides(infra="aws/us-east-1"))
    r = Task.model_validate(merged).resources
    assert (r.cloud, r.region, r.zone, r.cpus) == ("aws", "us-east-1", None, 4)


def test_cloud_region_zone_set_one_part_each() -> None:
    data = {"resources": {"infra": "aws/us-east-1/us-east-1a"}}
    merged = apply_overrides(data, Overrides(zone="us-east-1b"))
    r = Task.model_validate(merged).resources
    assert (r.cloud, r.region, r.zone) == ("aws", "us-east-1", "us-east-1b")
    with pytest.raises(OverrideError, match="either --infra or --cloud"):
        apply_overrides(data, Overrides(infra="aws", cloud="gcp"))


def test_num_nodes_and_the_flags_as_plan_lists_them() -> None:
    overrides = Overrides(
        envs={"MODEL": "m"}, secrets={"HF_TOKEN": "hf_abc"}, gpus="L4:1", num_nodes=2
    )
    assert apply_overrides({"run": "x"}, overrides)["num_nodes"] == 2
    said = overrides.describe()
    assert said == ["--env MODEL=m", "--secret HF_TOKEN=<hidden>", "--gpus L4:1", "--num-nodes 2"]
    assert "hf_abc" not in " ".join(said)


def test_the_flags_as_typer_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_NAME", "llama")
    flags = LaunchFlags(env=["MODEL_NAME", "A=1"], secret=["HF_TOKEN=x"], num_nodes=3)
    overrides = flags.overrides()
    assert overrides.envs == {"MODEL_NAME": "llama", "A": "1"}
    assert overrides.secrets == {"HF_TOKEN": "x"} and overrides.num_nodes == 3
    with pytest.raises(FlagError, match="--env: expected NAME=VALUE or NAME"):
        LaunchFlags(env=["=v"]).overrides()
