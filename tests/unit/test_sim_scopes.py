"""Issue #46 in the simulator: it plays the runtime's scopes (a quota family, a shortfall's
ceiling) through the same functions, and the rule before (``corral-wide-blocks``) is kept to
measure what they buy."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.errors import CapacityError, QuotaError, Scope
from corral.shared.placement import Placement
from corral.shared.sim.cloud import SimCloud
from corral.shared.sim.run import run_policy
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import load_workload

QUOTA_DAY = """\
seed: 1
duration: 4h
clouds:
  aws:
    instance_types:
      g5.xlarge: {accelerators: {A10G: 1}, vcpus: 4, memory_gib: 16, price_usd_per_hour: 1.0}
      m5.2xlarge: {vcpus: 8, memory_gib: 32, price_usd_per_hour: 0.4}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g5.xlarge: {on_demand: 4}, m5.2xlarge: {on_demand: 20}}}
      us-west-2:
        price_factor: 2.0
        zones:
          us-west-2a: {capacity: {g5.xlarge: {on_demand: 4}, m5.2xlarge: {on_demand: 20}}}
quotas:
  - {cloud: aws, region: us-east-1, family: "on_demand:g-vt"}
"""

# A G job every 2 minutes (each meets the quota in us-east-1) among CPU jobs.
QUOTA_WORK = """\
arrivals:
  - {at: 0s, every: 2m, count: 10, duration: 20m,
     task: {name: g, resources: {accelerators: A10G:1}}}
  - {at: 30s, every: 2m, count: 10, duration: 20m,
     task: {name: cpu, resources: {cpus: 8, memory: 32}}}
"""

SHORT_ZONE = """\
seed: 1
duration: 4h
clouds:
  aws:
    instance_types:
      p4d.24xlarge: {accelerators: {A100: 8}, vcpus: 96, memory_gib: 1152,
                     price_usd_per_hour: 32.0}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {p4d.24xlarge: {on_demand: 1}}}
"""

# The README's case: a 2-node A100 ask, then a 1-node one for the same zone's one machine.
SHORT_WORK = """\
arrivals:
  - {at: 0s, count: 1, duration: 1h,
     task: {name: two, num_nodes: 2, resources: {accelerators: A100:8}}}
  - {at: 10s, count: 1, duration: 1h, task: {name: one, resources: {accelerators: A100:8}}}
"""


def _day(tmp_path: Path, scenario: str, workload: str) -> tuple[object, object]:
    (tmp_path / "s.yaml").write_text(scenario)
    (tmp_path / "w.yaml").write_text(workload)
    return load_scenario(tmp_path / "s.yaml"), load_workload(tmp_path / "w.yaml")


def test_the_simulated_cloud_refuses_a_used_up_family_and_a_short_zone(tmp_path: Path) -> None:
    scenario, _ = _day(tmp_path, QUOTA_DAY, QUOTA_WORK)
    cloud = SimCloud(scenario)  # type: ignore[arg-type]
    g5 = Placement("aws", "us-east-1", "us-east-1a", "g5.xlarge", "on_demand")
    with pytest.raises(QuotaError) as quota:
        cloud.launch(g5, 0.0, "k", 1)
    assert (quota.value.scope, quota.value.family) == (Scope.FAMILY, "on_demand:g-vt")
    cpu = Placement("aws", "us-east-1", "us-east-1a", "m5.2xlarge", "on_demand")
    assert cloud.launch(cpu, 0.0, "c", 0).place == cpu  # the region's CPUs are not that quota

    scenario, _ = _day(tmp_path, SHORT_ZONE, SHORT_WORK)
    cloud = SimCloud(scenario)  # type: ignore[arg-type]
    a100 = Placement("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "on_demand")
    with pytest.raises(CapacityError) as short:
        cloud.launch_all(a100, 0.0, ["a", "b"], 8)
    assert short.value.free == 1 and "1 p4d.24xlarge (on_demand) free, asked for 2" in str(
        short.value
    )
    assert cloud.free(a100, 0.0) == 1  # all or none: nothing was taken
    assert len(cloud.launch_all(a100, 0.0, ["c"], 8)) == 1


def test_a_quota_error_leaves_the_regions_cpus_to_cpu_work(tmp_path: Path) -> None:
    scenario, workload = _day(tmp_path, QUOTA_DAY, QUOTA_WORK)
    scoped = run_policy(scenario, workload, "corral").figures  # type: ignore[arg-type]
    wide = run_policy(scenario, workload, "corral-wide-blocks").figures  # type: ignore[arg-type]
    assert scoped["completed"] == wide["completed"] == 20
    # The G jobs run in us-west-2 either way (twice the price); the CPU jobs stay in us-east-1
    # only when the quota blocks its family, not the region: 10 x 20 min x $0.40 less.
    saved = wide["total_cost_usd"] - scoped["total_cost_usd"]
    assert saved == pytest.approx(10 * (20 / 60) * 0.4, rel=0.15)


def test_a_shortfall_lets_a_one_node_ask_take_the_free_machine(tmp_path: Path) -> None:
    scenario, workload = _day(tmp_path, SHORT_ZONE, SHORT_WORK)
    scoped = run_policy(scenario, workload, "corral").figures  # type: ignore[arg-type]
    wide = run_policy(scenario, workload, "corral-wide-blocks").figures  # type: ignore[arg-type]
    # The 1-node ask runs at once under the ceiling; the old block held it for the block's TTL.
    assert scoped["time_to_capacity_s"]["count"] >= 1
    assert scoped["time_to_capacity_s"]["p50"] < wide["time_to_capacity_s"]["p50"]
