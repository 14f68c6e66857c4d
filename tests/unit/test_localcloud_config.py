"""The local cloud file: the shipped example, the issue's snippet, and the errors users get."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from corral.services.providers.local import EXAMPLE_CLOUD_FILE
from corral.shared.config.localcloud import (
    LocalCloud,
    load_local_cloud,
    parse_local_cloud,
)
from corral.shared.configio import ConfigError

ISSUE_SNIPPET = """\
instance_types:
  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.10, spot_price_usd_per_hour: 0.03}
  - {name: gpu-a100-8, vcpus: 96, memory_gib: 1152, accelerators: {A100: 8},
     price_usd_per_hour: 32.77, spot_price_usd_per_hour: 12.0}
regions:
  - name: lab-east
    zones:
      - name: lab-east-a
        capacity: {cpu-2: 8, gpu-a100-8: 0}      # 0 = out of capacity
        errors: {gpu-a100-8: quota}             # optional: capacity | quota | throttle | auth
        launch_delay_s: 0.2
reservations:
  - {id: r-1, zone: lab-east-a, instance_type: cpu-2, count: 2}
"""


def issues_of(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(ConfigError) as info:
        parse_local_cloud(text, "cloud.yaml")
    return [(i.line, i.loc, i.message) for i in info.value.issues]


def test_issue_snippet_validates_and_lists_its_offerings() -> None:
    cloud = parse_local_cloud(ISSUE_SNIPPET, "issue.yaml")
    rows = [
        (o.cloud, o.region, o.zone, o.instance_type, o.accelerator, o.accelerator_count)
        for o in cloud.offerings()
    ]
    assert rows == [
        ("local", "lab-east", "lab-east-a", "cpu-2", None, 0),
        ("local", "lab-east", "lab-east-a", "gpu-a100-8", "A100", 8),
    ]
    gpu = cloud.offerings()[1]
    assert (gpu.vcpus, gpu.memory_gib) == (96, 1152)
    assert (gpu.price_usd_per_hour, gpu.spot_price_usd_per_hour) == (32.77, 12.0)
    fault = cloud.zone("lab-east-a").errors["gpu-a100-8"]
    assert (fault.kind, fault.times) == ("quota", None)
    assert fault.fails_launch(1000)
    assert cloud.zone("lab-east-a").launch_delay_s == 0.2
    assert cloud.reservation("r-1").count == 2


def test_example_file_ships_with_the_package_and_validates() -> None:
    cloud = load_local_cloud(EXAMPLE_CLOUD_FILE)
    offerings = cloud.offerings()
    zones = list(dict.fromkeys(o.zone for o in offerings))
    # File order: regions, then zones, then each zone's capacity keys.
    assert zones == ["lab-east-a", "lab-east-b", "lab-west-a", "lab-west-b", "lab-eu-a"]
    assert [o.instance_type for o in offerings if o.zone == "lab-east-a"] == [
        "cpu-2", "cpu-4", "cpu-8", "gpu-l4-1", "gpu-a100-8",
    ]  # fmt: skip
    accelerators = {(o.accelerator, o.accelerator_count) for o in offerings}
    assert {("A100", 8), ("V100", 4), ("A10G", 1), ("L4", 1), (None, 0)} <= accelerators
    assert len({o.region for o in offerings}) >= 2
    # What the demo's failover needs: a sold-out GPU zone, a quota error, a reservation.
    assert cloud.zone("lab-east-a").capacity["gpu-a100-8"] == 0
    assert any(e.kind == "quota" for r in cloud.regions for z in r.zones for e in z.errors.values())
    assert cloud.reservations
    assert cloud.instance_type("p3.8xlarge").name == "gpu-v100-4"


def test_offerings_keep_sold_out_types_and_skip_types_a_zone_lacks() -> None:
    cloud = parse_local_cloud(
        """
instance_types:
  - {name: b, vcpus: 1, memory_gib: 1, price_usd_per_hour: 0.2}
  - {name: a, vcpus: 1, memory_gib: 1, accelerators: {l4: 1}, price_usd_per_hour: 0.1}
regions:
  - name: r2
    zones:
      - {name: z2, capacity: {a: 0, b: 1}}
  - name: r1
    zones:
      - {name: z1, capacity: {b: 3}}
"""
    )
    assert [(o.zone, o.instance_type, o.accelerator) for o in cloud.offerings()] == [
        ("z2", "a", "L4"),
        ("z2", "b", None),
        ("z1", "b", None),
    ]
    assert cloud.offerings()[0].spot_price_usd_per_hour is None
    assert cloud.region_of("z1") == "r1"
    assert not cloud.zone("z1").offers("a")
    with pytest.raises(KeyError):
        cloud.zone("nowhere")


def test_an_error_with_times_fails_only_the_first_launches() -> None:
    text = ISSUE_SNIPPET.replace("{gpu-a100-8: quota}", "{gpu-a100-8: {kind: throttle, times: 2}}")
    fault = parse_local_cloud(text).zone("lab-east-a").errors["gpu-a100-8"]
    assert (fault.kind, fault.times) == ("throttle", 2)
    assert [fault.fails_launch(n) for n in (1, 2, 3, 4)] == [True, True, False, False]


def test_a_typo_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "cloud.yaml"
    path.write_text(ISSUE_SNIPPET.replace("launch_delay_s", "launch_delay"))
    with pytest.raises(ConfigError) as info:
        load_local_cloud(path)
    [issue] = info.value.issues
    assert (issue.file, issue.line) == (str(path), 11)
    assert issue.loc == "regions[0].zones[0].launch_delay"
    assert "unknown field" in issue.message
    assert str(issue).startswith(f"{path}:11: regions[0].zones[0].launch_delay: ")


def test_bad_references_are_all_reported_with_lines() -> None:
    text = ISSUE_SNIPPET.replace("{cpu-2: 8, gpu-a100-8: 0}", "{cpu-2: 8, gpu-a100-9: 0}")
    text = text.replace("{id: r-1, zone: lab-east-a", "{id: r-1, zone: lab-east-z")
    assert issues_of(text) == [
        (9, "regions[0].zones[0].capacity.gpu-a100-9", "unknown instance type 'gpu-a100-9'"),
        (10, "regions[0].zones[0].errors.gpu-a100-8",
         "zone 'lab-east-a' does not offer 'gpu-a100-8' (no capacity entry)"),
        (13, "reservations[0].zone", "unknown zone 'lab-east-z'"),
    ]  # fmt: skip


def test_an_unknown_error_kind_is_one_clear_issue() -> None:
    [(line, loc, message)] = issues_of(ISSUE_SNIPPET.replace("quota}", "quotaa}"))
    assert (line, loc) == (10, "regions[0].zones[0].errors.gpu-a100-8")
    assert "unknown error kind 'quotaa'" in message and "throttle" in message


def test_value_errors_name_the_field() -> None:
    bad_times = ISSUE_SNIPPET.replace("{gpu-a100-8: quota}", "{gpu-a100-8: {kind: auth, times: 0}}")
    [(line, loc, message)] = issues_of(bad_times)
    assert (line, loc) == (10, "regions[0].zones[0].errors.gpu-a100-8.times")
    assert "greater than or equal to 1" in message
    negative = ISSUE_SNIPPET.replace("cpu-2: 8,", "cpu-2: -1,")
    assert issues_of(negative)[0][:2] == (9, "regions[0].zones[0].capacity.cpu-2")


def test_duplicates_aliases_and_accelerator_kinds_are_checked() -> None:
    text = """\
instance_types:
  - {name: a, vcpus: 1, memory_gib: 1, price_usd_per_hour: 0.1}
  - {name: a, vcpus: 2, memory_gib: 1, price_usd_per_hour: 0.1}
regions:
  - name: r
    zones:
      - {name: z, capacity: {a: 1}}
      - {name: z, capacity: {a: 1}}
aliases:
  p3.2xlarge: v100-1
  a: a
"""
    assert issues_of(text) == [
        (3, "instance_types[1].name", "instance type 'a' is defined more than once"),
        (8, "regions[0].zones[1].name", "zone 'z' is defined more than once"),
        (10, "aliases.p3.2xlarge", "unknown instance type 'v100-1'"),
        (11, "aliases.a", "'a' is already a local instance type"),
    ]
    two_kinds = """\
instance_types:
  - {name: a, vcpus: 1, memory_gib: 1, accelerators: {A10: 1, L4: 1}, price_usd_per_hour: 1}
regions: [{name: r, zones: [{name: z, capacity: {a: 1}}]}]
"""
    [(line, loc, message)] = issues_of(two_kinds)
    assert (line, loc) == (2, "instance_types[0]")
    assert "one accelerator kind" in message


def test_missing_file_and_wrong_shape_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_local_cloud(tmp_path / "absent.yaml")
    assert issues_of("- just\n- a list\n")[0][2].startswith("expected a mapping")
    [(_, loc, message)] = issues_of("instance_types: []\nregions: []\n")[:1]
    assert loc == "instance_types" and "at least 1" in message


def test_building_the_model_directly_still_checks_references() -> None:
    data = {
        "instance_types": [{"name": "a", "vcpus": 1, "memory_gib": 1, "price_usd_per_hour": 1}],
        "regions": [{"name": "r", "zones": [{"name": "z", "capacity": {"b": 1}}]}],
    }
    with pytest.raises(ValidationError, match=r"regions\[0\]\.zones\[0\]\.capacity\.b"):
        LocalCloud.model_validate(data)


def test_a_quota_error_may_name_its_family_and_only_a_quota_error() -> None:
    named = ISSUE_SNIPPET.replace(
        "{gpu-a100-8: quota}", "{gpu-a100-8: {kind: quota, family: 'on_demand:gpu'}}"
    )
    cloud = parse_local_cloud(named, "cloud.yaml")
    assert cloud.zone("lab-east-a").errors["gpu-a100-8"].family == "on_demand:gpu"
    wrong = ISSUE_SNIPPET.replace("{gpu-a100-8: quota}", "{gpu-a100-8: {kind: auth, family: x}}")
    [(line, loc, message)] = issues_of(wrong)
    assert (line, loc) == (10, "regions[0].zones[0].errors.gpu-a100-8")
    assert "only a quota error names a quota family" in message
    # Machines that start and never register: a fault kind of its own.
    unreg = ISSUE_SNIPPET.replace("{gpu-a100-8: quota}", "{gpu-a100-8: unregistered}")
    assert parse_local_cloud(unreg, "cloud.yaml").zone("lab-east-a").errors["gpu-a100-8"].kind == (
        "unregistered"
    )
