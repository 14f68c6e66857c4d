"""Anyscale machine pool files, as the seed writes them, and their selectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.config.detect import load_as
from corral.shared.config.machine_pool import MachinePool, Requirement, Rule, parse_selector
from corral.shared.configio import ConfigError, parse_text, validate_doc

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def _pool(text: str) -> MachinePool:
    return validate_doc(MachinePool, parse_text(text, "pool.yaml"))


def test_aws_seed_as_written() -> None:
    pool, _ = load_as(SEEDS / "anyscale-machine-pool-aws.yaml", MachinePool)
    assert pool.kind == "ANYSCALE_MANAGED"
    assert [m.machine_type for m in pool.machine_types] == [
        "reserved-a100",
        "spot-a100",
        "ondemand-a100",
    ]
    reserved = pool.machine("reserved-a100")
    assert reserved is not None
    template = reserved.launch_templates[0]
    assert (template.instance_type, template.market_type) == ("p4de.24xlarge", "ON_DEMAND")
    target = template.advanced_instance_config["CapacityReservationSpecification"]
    assert target == {"CapacityReservationTarget": {"CapacityReservationId": "cr-xxx"}}
    spot = pool.machine("spot-a100")
    assert spot is not None and spot.launch_templates[0].market_type == "SPOT"
    assert [(p.name, p.size) for p in reserved.partitions] == [("any", 2)]
    assert sum(m.size() for m in pool.machine_types) == 6


def test_gcp_seed_keeps_the_reservation_blob_untouched() -> None:
    pool, _ = load_as(SEEDS / "anyscale-machine-pool-gcp.yaml", MachinePool)
    reserved = pool.machine("reserved-a100")
    assert reserved is not None
    affinity = reserved.launch_templates[0].advanced_instance_config["instanceProperties"]
    assert affinity["reservationAffinity"]["values"] == [
        "projects/my-project/reservations/shared-a100"
    ]
    assert reserved.launch_templates[0].instance_type == "a2-highgpu-8g"


def test_rules_recycle_policy_and_zones() -> None:
    pool = _pool(
        """kind: ANYSCALE_MANAGED
machine_types:
  - machine_type: 1xA100-80G
    launch_templates:
      - {instance_type: p4de.24xlarge, market_type: SPOT, zones: [us-east-1a, us-east-1b]}
    recycle_policy: {max_workloads: 10, rotation_interval: 24h, max_idle_duration: 30m}
    partitions:
      - name: prod
        size: 6
        rules:
          - {selector: "workload-type in (job,service)", priority: 10}
          - {selector: {project: research}, priority: 5, quota: 2}
"""
    )
    machine = pool.machine_types[0]
    assert machine.launch_templates[0].zones == ["us-east-1a", "us-east-1b"]
    assert machine.recycle_policy is not None
    assert machine.recycle_policy.rotation_interval_s == 86400.0
    assert machine.recycle_policy.max_idle_duration_s == 1800.0
    first, second = machine.partitions[0].rules
    assert first.matches({"workload-type": "job"})
    assert not first.matches({"workload-type": "workspace"})
    assert second.matches({"project": "research", "team": "x"})
    assert second.quota == 2


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            "workload-type in (job,service)",
            (Requirement("workload-type", "in", frozenset({"job", "service"})),),
        ),
        (
            "project!=dev, team",
            (Requirement("project", "notin", frozenset({"dev"})), Requirement("team", "exists")),
        ),
        ("!preview", (Requirement("preview", "!exists"),)),
        (
            "cloud=aws,tier==gold",
            (
                Requirement("cloud", "in", frozenset({"aws"})),
                Requirement("tier", "in", frozenset({"gold"})),
            ),
        ),
        ("env notin (dev, test)", (Requirement("env", "notin", frozenset({"dev", "test"})),)),
        ("", ()),
    ],
)
def test_selector_strings(selector: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_selector(selector) == expected


def test_selector_semantics() -> None:
    rule = Rule.model_validate({"selector": "env notin (dev), !preview, team"})
    assert rule.matches({"team": "ml"})  # a missing label passes notin
    assert rule.matches({"team": "ml", "env": "prod"})
    assert not rule.matches({"team": "ml", "env": "dev"})
    assert not rule.matches({"team": "ml", "preview": "1"})
    assert not rule.matches({})


@pytest.mark.parametrize(
    ("text", "line", "loc", "needle"),
    [
        (
            "kind: MANAGED\nmachine_types: []\n",
            1,
            "kind",
            "expected one of ANYSCALE_MANAGED, CUSTOMER_MANAGED",
        ),
        (
            "kind: CUSTOMER_MANAGED\nmachine_types:\n  - machine_type: m\n    partitions:\n"
            "      - {name: a, size: 1, rules: [{selector: 'env in dev'}]}\n",
            5,
            "machine_types[0].partitions[0].rules[0].selector",
            "expected a selector like",
        ),
        (
            "kind: CUSTOMER_MANAGED\nmachine_types:\n  - machine_type: m\n    partitions:\n"
            "      - {name: a, size: -1}\n",
            5,
            "machine_types[0].partitions[0].size",
            "greater than or equal to 0",
        ),
        (
            "kind: CUSTOMER_MANAGED\nmachine_types:\n  - machine_type: m\n    partitions: []\n"
            "    recycle_policy: {rotation_interval: 24}\n",
            5,
            "machine_types[0].recycle_policy.rotation_interval",
            "expected a duration like 30s, 1m or 2h",
        ),
        (
            "kind: CUSTOMER_MANAGED\nmachine_types:\n  - machine_type: m\n",
            3,
            "machine_types[0].partitions",
            "required field is missing",
        ),
    ],
)
def test_mistakes(text: str, line: int, loc: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        _pool(text)
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (line, loc)
    assert needle in issue.message


def test_cross_field_problems(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(
        "kind: ANYSCALE_MANAGED\nmachine_types:\n  - machine_type: m\n    partitions:\n"
        "      - {name: a, size: 1}\n      - {name: a, size: 2}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_as(path, MachinePool)
    assert [(i.line, i.loc) for i in info.value.issues] == [
        (3, "machine_types[0]"),
        (6, "machine_types[0].partitions[1].name"),
    ]
    assert "needs launch_templates" in info.value.issues[0].message
    assert "defined twice" in info.value.issues[1].message
