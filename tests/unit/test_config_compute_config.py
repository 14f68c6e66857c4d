"""Anyscale compute configs: worker groups drawing from machine pools, ranking, replacement."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.config import parse_duration_s
from corral.shared.config.compute_config import ComputeConfig
from corral.shared.config.detect import load_as, load_config
from corral.shared.configio import ConfigError, parse_text, validate_doc

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


@pytest.mark.parametrize(("cloud", "head"), [("aws", "m5.2xlarge"), ("gcp", "n2-standard-8")])
def test_seeds_as_written(cloud: str, head: str) -> None:
    config, _ = load_as(SEEDS / f"anyscale-compute-config-{cloud}.yaml", ComputeConfig)
    assert config.head_node is not None and config.head_node.instance_type == head
    assert [(w.instance_type, w.machine_pool()) for w in config.worker_nodes] == [
        ("reserved-a100", "demo-machine-pool"),
        ("spot-a100", "demo-machine-pool"),
        ("ondemand-a100", "demo-machine-pool"),
    ]
    assert config.flags is not None
    assert config.flags.replacement_threshold_s == 60.0
    [ranker] = config.flags.instance_ranking_strategy
    assert ranker.ranker_type == "custom_group_order"
    assert ranker.ranker_config.enable_replacement is True
    assert config.group_order() == ["reserved-a100", "spot-a100", "ondemand-a100"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1m", 60.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("1d", 86400.0),
        ("0", 0.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("bad", ["", "1", "m", "1x", "1m 30s", "30s1", "-1m", "1h30"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="expected a duration like 30s, 1m or 2h"):
        parse_duration_s(bad)


def test_other_documented_fields_are_accepted_and_noticed(tmp_path: Path) -> None:
    path = tmp_path / "compute.yaml"
    path.write_text(
        "cloud: my-anyscale-cloud\nregion: us-west-2\nzones: [us-west-2a]\n"
        "enable_cross_zone_scaling: true\nauto_select_worker_config: false\n"
        "idle_termination_minutes: 60\nmin_resources: {GPU: 0}\nmax_resources: {GPU: 64}\n"
        "head_node: {instance_type: m5.2xlarge}\n"
        "worker_nodes:\n  - {name: gpu, instance_type: p4d.24xlarge, min_nodes: 0, max_nodes: 8,"
        " market_type: PREFER_SPOT, advanced_instance_config: {AnyKey: {Deep: 1}}}\n"
    )
    loaded = load_config(path)
    assert loaded.kind == "compute_config"
    config = loaded.model
    assert isinstance(config, ComputeConfig)
    assert config.worker_nodes[0].market_type == "PREFER_SPOT"
    assert config.worker_nodes[0].advanced_instance_config == {"AnyKey": {"Deep": 1}}
    # Where machines come from and how many is the machine pool's and the task's: the compute
    # config's own placement and group bounds are noticed (they were accepted silently).
    assert [n.split(": ")[1] for n in loaded.notices] == [
        "cloud",
        "region",
        "zones",
        "enable_cross_zone_scaling",
        "auto_select_worker_config",
        "idle_termination_minutes",
        "min_resources",
        "max_resources",
        "worker_nodes[0].min_nodes",
        "worker_nodes[0].max_nodes",
        "worker_nodes[0].market_type",
    ]


@pytest.mark.parametrize(
    ("text", "line", "loc", "needle"),
    [
        (
            "flags:\n  replacement_threshold: 60\n",
            2,
            "flags.replacement_threshold",
            "expected a duration like 30s, 1m or 2h",
        ),
        (
            "flags:\n  instance_ranking_strategy:\n    - ranker_type: cheapest\n",
            3,
            "flags.instance_ranking_strategy[0].ranker_type",
            "expected one of custom_group_order",
        ),
        (
            "worker_nodes:\n  - instance_type: x\n    min_nodes: 3\n    max_nodes: 1\n",
            2,
            "worker_nodes[0]",
            "max_nodes (1) is below min_nodes (3)",
        ),
        (
            "worker_nodes:\n  - instance_type: x\n    market_type: RESERVED\n",
            3,
            "worker_nodes[0].market_type",
            "expected one of ON_DEMAND, SPOT, PREFER_SPOT",
        ),
        (
            "worker_nodes:\n  - instance_type: x\n    flags:\n      cloud_deployment:\n"
            "        machine_pol: p\n",
            5,
            "worker_nodes[0].flags.cloud_deployment.machine_pol",
            "unknown field",
        ),
    ],
)
def test_mistakes(text: str, line: int, loc: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_doc(ComputeConfig, parse_text(text, "c.yaml"))
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (line, loc)
    assert needle in issue.message


def test_group_order_must_name_worker_groups(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    text = (SEEDS / "anyscale-compute-config-aws.yaml").read_text()
    path.write_text(text.replace("          - spot-a100", "          - spot-a10"))
    with pytest.raises(ConfigError) as info:
        load_as(path, ComputeConfig)
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (
        24,
        "flags.instance_ranking_strategy[0].ranker_config.group_order[1]",
    )
    assert "expected one of reserved-a100, spot-a100, ondemand-a100" in issue.message
