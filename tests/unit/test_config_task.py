"""Task files: SkyPilot's fields, Determined's pool fields, Corral's priority and labels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from corral.shared.accelerators import AcceleratorOption
from corral.shared.config.compute_config import ComputeConfig
from corral.shared.config.detect import load_as, load_config
from corral.shared.config.task import Resources, Task, determined_to_corral_priority
from corral.shared.configio import ConfigError, parse_text, validate_doc

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def _task(text: str) -> Task:
    return validate_doc(Task, parse_text(text, "task.yaml"))


def _issues(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(ConfigError) as info:
        _task(text)
    return [(i.line, i.loc, i.message) for i in info.value.issues]


def test_seed_accelerators_a100() -> None:
    task, _ = load_as(SEEDS / "skypilot-task-accelerators-a100.yaml", Task)
    assert task.resources.accelerators == "A100"
    request = task.resources.accelerator_request()
    assert request is not None and request.options == (AcceleratorOption("A100", 1),)
    assert task.num_nodes == 1
    assert task.priority == 0
    assert task.slots() == 1


def test_seed_set_and_list() -> None:
    task_set, _ = load_as(SEEDS / "skypilot-task-accelerators-set.yaml", Task)
    task_list, _ = load_as(SEEDS / "skypilot-task-accelerators-list.yaml", Task)
    request_set = task_set.resources.accelerator_request()
    request_list = task_list.resources.accelerator_request()
    assert request_set is not None and request_list is not None
    assert request_set.ordered is False and request_list.ordered is True
    assert [o.name for o in request_set.options] == ["A10", "L4", "A10G"]
    assert [o.name for o in request_list.options] == ["A10", "A10G", "L4"]


@pytest.mark.parametrize("kind", ["ordered", "any_of"])
def test_seed_candidate_lists(kind: str) -> None:
    task, _ = load_as(SEEDS / f"skypilot-task-{kind.replace('_', '-')}.yaml", Task)
    items = getattr(task.resources, kind)
    assert [(r.cloud, r.region, r.instance_type, r.accelerators) for r in items] == [
        ("gcp", None, None, "A100-80GB"),
        (None, None, "g5.xlarge", None),
        ("azure", "eastus", None, "A100"),
    ]


def test_seed_any_of_regions_inherits_the_accelerator_set() -> None:
    task, _ = load_as(SEEDS / "skypilot-task-any-of-regions.yaml", Task)
    candidates = task.resources.candidates()
    assert [c.region for c in candidates][:3] == ["us-east-1", "us-east-2", "us-west-1"]
    assert len(candidates) == 11
    request = candidates[5].accelerator_request()
    assert request is not None
    assert {(o.name, o.count) for o in request.options} == {
        ("A10G", 8),
        ("A10", 8),
        ("L4", 8),
        ("A100", 8),
    }
    assert task.slots() == 8


def test_candidate_fields_override_the_base() -> None:
    task = _task(
        "resources:\n  cloud: aws\n  accelerators: A100:8\n  ordered:\n"
        "    - region: us-east-1\n    - cloud: gcp\n      accelerators: L4:1\n"
    )
    first, second = task.resources.candidates()
    assert (first.cloud, first.region, first.accelerators) == ("aws", "us-east-1", "A100:8")
    assert (second.cloud, second.accelerators) == ("gcp", "L4:1")


@pytest.mark.parametrize(
    ("cpus", "memory", "min_cpus", "min_memory_gib"),
    [
        (4, 16, 4.0, 16.0),
        ("4+", "16+", 4.0, 16.0),
        ("2", "32GB", 2.0, 32.0),
        (0.5, "512MB", 0.5, 0.5),
        (None, None, None, None),
    ],
)
def test_cpus_and_memory_are_minimums(
    cpus: Any, memory: Any, min_cpus: float | None, min_memory_gib: float | None
) -> None:
    resources = Resources.model_validate({"cpus": cpus, "memory": memory})
    assert resources.min_cpus() == min_cpus
    assert resources.min_memory_gib() == min_memory_gib


@pytest.mark.parametrize(("determined", "corral"), [(42, 0), (1, 41), (99, -57), (50, -8)])
def test_determined_priority_is_converted(determined: int, corral: int) -> None:
    assert determined_to_corral_priority(determined) == corral
    assert _task(f"resources:\n  priority: {determined}\n").priority == corral


def test_top_level_priority_wins_over_determined() -> None:
    task = _task("priority: 7\nresources:\n  priority: 1\n")
    assert task.priority == 7
    assert task.resources.priority == 1


def test_determined_priority_range_is_checked() -> None:
    [(line, loc, message)] = _issues("name: t\nresources:\n  priority: 500\n")
    assert (line, loc) == (3, "resources.priority")
    assert "1 (most urgent) to 99" in message


def test_determined_max_slots_is_read() -> None:
    assert _task("resources:\n  slots: 2\n  max_slots: 4\n").resources.max_slots == 4
    assert _task("resources:\n  slots: 2\n").resources.max_slots is None


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "two", "true", "[4]"])
def test_determined_max_slots_must_be_a_positive_integer(value: str) -> None:
    [(line, loc, message)] = _issues(f"name: t\nresources:\n  max_slots: {value}\n")
    assert (line, loc) == (3, "resources.max_slots")
    assert message.startswith("expected a positive integer")


def test_determined_max_slots_must_hold_the_task() -> None:
    [(line, loc, message)] = _issues("resources:\n  slots: 4\n  max_slots: 2\n")
    assert (line, loc) == (3, "resources.max_slots")
    assert "no smaller than slots (4)" in message


def test_a_bad_max_slots_exits_2_through_the_cli(tmp_path: Path) -> None:
    task = tmp_path / "exp.yaml"
    task.write_text("name: t\nresources:\n  slots: 1\n  max_slots: 0\nrun: echo\n")
    env = {**os.environ, "HOME": str(tmp_path), "CORRAL_HOME": str(tmp_path / ".corral")}
    done = subprocess.run(
        [sys.executable, "-m", "corral.services.cli.main", "validate", str(task)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{task}:4: resources.max_slots: expected a positive integer" in done.stderr


@pytest.mark.parametrize(
    ("resources", "slots"),
    [
        ("{slots: 0, accelerators: A100:8}", 0),
        ("{accelerators: A100:8}", 8),
        ("{accelerators: [L4:2, A100:8]}", 2),
        ("{cpus: 4}", 1),
        ("{slots: 3}", 3),
    ],
)
def test_slots(resources: str, slots: int) -> None:
    assert _task(f"resources: {resources}\n").slots() == slots


def test_infra_fills_cloud_region_zone() -> None:
    resources = _task("resources:\n  infra: aws/us-east-1/us-east-1a\n").resources
    assert (resources.cloud, resources.region, resources.zone) == ("aws", "us-east-1", "us-east-1a")
    k8s = _task("resources:\n  infra: k8s/my-context\n").resources
    assert (k8s.cloud, k8s.region) == ("kubernetes", "my-context")
    wildcard = _task("resources:\n  infra: '*/us-east-1'\n").resources
    assert (wildcard.cloud, wildcard.region) == (None, "us-east-1")


def test_cloud_names_are_lower_cased_and_checked() -> None:
    assert _task("resources: {cloud: GCP}\n").resources.cloud == "gcp"
    assert _task("resources: {cloud: Azure}\n").resources.cloud == "azure"
    [(line, loc, message)] = _issues("resources:\n  cloud: awz\n")
    assert (line, loc) == (2, "resources.cloud")
    assert message.startswith("expected a cloud name, one of aws, gcp, azure")


def test_corral_fields_and_later_issue_fields() -> None:
    task = _task(
        "name: train\nnum_nodes: 2\nlabels: {team: ml}\nworkload_type: service\n"
        "compute_config: configs/gpu.yaml\n"
        "scheduling: {preemptible: true, on_full: fallback, fallback_pools: [spot, od]}\n"
        "envs: {PORT: 8080, DEBUG: true, EMPTY: null, NAME: x}\n"
    )
    assert task.num_nodes == 2
    assert task.labels == {"team": "ml"}
    assert task.workload_type == "service"
    assert task.compute_config == "configs/gpu.yaml"
    assert task.scheduling is not None and task.scheduling.fallback_pools == ["spot", "od"]
    assert task.envs == {"PORT": "8080", "DEBUG": "true", "EMPTY": "", "NAME": "x"}


def test_inline_compute_config_is_read_as_one() -> None:
    task = _task(
        "compute_config:\n  head_node: {instance_type: m5.2xlarge}\n"
        "  worker_nodes: [{instance_type: p4d.24xlarge, max_nodes: 2}]\n"
    )
    assert isinstance(task.compute_config, ComputeConfig)
    assert task.compute_config.worker_nodes[0].max_nodes == 2


def test_git_workdir() -> None:
    task = _task("workdir: {url: https://github.com/org/repo, ref: main}\n")
    assert not isinstance(task.workdir, str) and task.workdir is not None
    assert task.workdir.ref == "main"


@pytest.mark.parametrize(
    ("text", "line", "loc", "needle"),
    [
        ("name: t\nresources:\n  acelerators: A100\n", 3, "resources.acelerators", "unknown field"),
        ("name: t\nnum_nodes: 0\n", 2, "num_nodes", "greater than or equal to 1"),
        ("name: t\nnum_nodes: two\n", 2, "num_nodes", "valid integer"),
        ("resources:\n  accelerators: A100:0\n", 2, "resources.accelerators", "count >= 1"),
        ("resources:\n  use_spot: maybe\n", 2, "resources.use_spot", "valid boolean"),
        (
            "resources:\n  disk_tier: fast\n",
            2,
            "resources.disk_tier",
            "expected one of low, medium, high, ultra, best",
        ),
        ("resources:\n  cpus: lots\n", 2, "resources.cpus", "expected a CPU count"),
        ("workload_type: batch\n", 1, "workload_type", "expected one of job, service, workspace"),
        (
            "scheduling:\n  on_full: wait\n",
            2,
            "scheduling.on_full",
            "expected one of fallback, preempt",
        ),
        ("envs:\n  1BAD: x\n", 1, "envs", "environment variable names"),
        (
            "resources:\n  ordered:\n    - any_of: [{cloud: aws}]\n",
            2,
            "resources.ordered",
            "cannot hold its own",
        ),
        (
            "resources:\n  ordered: [{cloud: aws}]\n  any_of: [{cloud: gcp}]\n",
            1,
            "resources",
            "either ordered or any_of",
        ),
        ("resources:\n  cloud: aws\n  infra: gcp\n", 1, "resources", "either infra or cloud"),
    ],
)
def test_mistakes_name_field_line_and_expectation(
    text: str, line: int, loc: str, needle: str
) -> None:
    issues = _issues(text)
    assert [(i[0], i[1]) for i in issues] == [(line, loc)]
    assert needle in issues[0][2]


def test_ignored_fields_are_noticed_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nevent_callback: echo done\nresources:\n  cpus: 2\n  disk_size: 256\n")
    loaded = load_config(path)
    assert loaded.notices == [
        f"{path}:2: event_callback: accepted; no callback is run: follow `corral status` and "
        "the events API",
        f"{path}:5: resources.disk_size: accepted; the machine gets its image's boot disk size",
    ]


def test_model_rejects_unknown_keys_without_a_file() -> None:
    with pytest.raises(ValidationError):
        Task.model_validate({"nmae": "typo"})


def test_envs_may_not_set_corrals_own_variables(tmp_path: Path) -> None:
    """Issue #47 item 7: a task's envs setting CORRAL_* (which the node agent acts on: a
    ``file://`` readiness probe crashed its probe thread) are refused, naming the variable;
    a cluster node's task, which Corral builds itself, is not checked."""
    path = tmp_path / "task.yaml"
    path.write_text(
        "run: 'true'\nenvs:\n  OK: 1\n  CORRAL_READINESS_PROBE: '{\"path\": \"file:///etc\"}'\n"
        "  corral_node_rank: 3\n"
    )
    with pytest.raises(ConfigError) as info:
        load_as(path, Task)
    found = [(i.line, i.loc) for i in info.value.issues]
    assert found == [(4, "envs.CORRAL_READINESS_PROBE"), (5, "envs.corral_node_rank")]
    assert "Corral's own" in info.value.issues[0].message
    built = Task.model_validate({"envs": {"CORRAL_CLUSTER": "c"}})
    assert built.envs == {"CORRAL_CLUSTER": "c"} and len(built.problems()) == 1


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/repo.git",
        "ssh://git@github.com/org/repo",
        "git@github.com:org/repo.git",
        "github.com:org/repo",
        "file:///srv/repo",
    ],
)
def test_git_workdir_urls_git_can_clone(url: str) -> None:
    task = _task(f"workdir: {{url: '{url}', ref: release/v1.2}}\n")
    assert task.workdir is not None and not isinstance(task.workdir, str)
    assert task.workdir.url == url


@pytest.mark.parametrize(
    ("url", "ref"),
    [
        ("--upload-pack=touch /tmp/owned", None),  # an option to git clone
        ("ext::sh -c touch% /tmp/owned", None),  # git's command-running transport
        ("fd::17", None),
        ("ssh://-oProxyCommand=touch%20/tmp/owned/x", None),  # CVE-2017-1000117's shape
        ("https://github.com/org/repo", "--orphan=x"),  # an option to git checkout
        ("https://github.com/org/repo", "main; rm -rf /"),
    ],
)
def test_git_workdir_urls_and_refs_that_are_options_or_commands_are_refused(
    url: str, ref: str | None
) -> None:
    """Issue #47 item 7: the URL and ref reach `git clone` and `git checkout` on the node."""
    doc = {"url": url, **({"ref": ref} if ref else {})}
    with pytest.raises(ConfigError) as info:
        validate_doc(Task, parse_text(f"workdir: {json.dumps(doc)}\n", "task.yaml"))
    # (workdir may also be a path: that reading's "a valid string" is listed beside it.)
    said = {i.loc: i.message for i in info.value.issues}
    assert "starting with '-'" in said["workdir.ref" if ref else "workdir.url"]


def test_a_docker_image_that_is_an_option_is_refused() -> None:
    assert _task("resources: {image_id: 'docker:nvcr.io/nvidia/pytorch:24.01-py3'}\n")
    digest = "docker:ubuntu@sha256:" + "a" * 64
    assert _task(f"resources: {{image_id: {{us-east-1: '{digest}'}}}}\n")
    for bad in ("docker:--privileged", "docker:-v/:/host", "docker:ubuntu --rm", "docker:"):
        issues = _issues(f"resources: {{image_id: '{bad}'}}\n")
        assert [(loc, "not starting with '-'" in said) for _, loc, said in issues] == [
            ("resources.image_id", True)
        ], bad
    issues = _issues("resources: {image_id: {eu: 'docker:-it'}}\n")
    assert issues[0][1] == "resources.image_id"
