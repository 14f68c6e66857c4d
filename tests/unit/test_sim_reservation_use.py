"""Reservation use while demand exists: what counts as demand a reservation could serve, and
what counts as used (docs/cli.md, "Reservation utilization while demand exists")."""

from __future__ import annotations

from pathlib import Path

from corral.shared.errors import ProviderError
from corral.shared.placement import Placement
from corral.shared.sim.cloud import SimInstance
from corral.shared.sim.engine import Sim
from corral.shared.sim.reserved import reserved_demand
from corral.shared.sim.run import template_names
from corral.shared.sim.scenario import load_scenario
from corral.shared.sim.workload import load_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


def test_only_workloads_of_a_pool_that_names_the_reservation_are_its_demand() -> None:
    """The AWS pool's workloads can use the AWS reservation, the GCP pool's the GCP one (its
    template names it in snake_case with a full resource path); direct requests, Determined
    trials and Ray bursts can use neither."""
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    workload = load_workload(EXAMPLES / "day-workload.yaml")
    demand = reserved_demand(workload, scenario)
    names = template_names(workload)
    seen: dict[str, set[str]] = {}
    for rid, names_of in demand.items():
        seen.setdefault(names[rid], set()).update(names_of)
    assert seen == {
        "train-research": {"cr-a100-east"},
        "train-prod": {"cr-a100-east"},
        "train-gcp": {"res-a100-central"},
    }
    assert all(nodes == {next(iter(nodes)): 1} for nodes in demand.values())


def _launch(sim: Sim, reservation: str, key: str) -> SimInstance:
    res = sim.cloud.reservations[reservation]
    region = sim.cloud.regions[(res.cloud, res.zone)]
    place = Placement(res.cloud, region, res.zone, res.instance_type, "on_demand", reservation)
    for attempt in range(20):  # an API error is drawn now and then: another key
        try:
            return sim.cloud.launch(place, 0.0, f"{key}-{attempt}", 8)
        except ProviderError:
            continue
    raise AssertionError("no launch in 20 attempts")


def test_counted_up_to_the_demand_and_an_idle_reserved_machine_is_unused() -> None:
    scenario = load_scenario(EXAMPLES / "day-scenario.yaml")
    sim = Sim(scenario, [], reserved_demand={})
    rec = sim.recorder
    sim.look_at_reservations()  # nothing could use a reservation: the look does not count
    assert (rec.reserved_seen, rec.reserved_used) == (0, 0)
    sim._wanting = {"w1": {"cr-a100-east": 1}}  # one workload of one node (count is 4)
    idle = _launch(sim, "cr-a100-east", "idle")
    sim.look_at_reservations()
    assert (rec.reserved_seen, rec.reserved_used) == (1, 0)  # launched but idle: unused
    sim.cloud.hand_to(idle, "w1", 0.0)
    sim.look_at_reservations()
    assert (rec.reserved_seen, rec.reserved_used) == (2, 1)
    sim._wanting["w2"] = {"cr-a100-east": 1, "res-a100-central": 1}
    sim.look_at_reservations()  # two nodes wanted on each side: AWS 1 of 2, GCP 0 of 1
    assert (rec.reserved_seen, rec.reserved_used) == (5, 2)
    assert rec.reserved_by == {"cr-a100-east": [4, 2], "res-a100-central": [1, 0]}
