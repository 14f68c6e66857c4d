"""Which requests a capacity reservation could serve, for the figure "reservations used while
demand exists" (:meth:`corral.shared.sim.engine.Sim.look_at_reservations`).

A request can use a reservation when the runtime would let it draw on it:

- a machine-pool workload whose compute config draws (in its group order) on a machine type
  of that pool whose launch template targets the reservation, read by the runtime's own
  :func:`corral.shared.reservations.reservation_of` (both spellings, bare names and full
  resource paths), and of the reservation's instance type;
- nothing else: a direct request's chain is planned from list prices and never names a
  reservation (:data:`corral.shared.catalog.ordering.MARKET_RESERVED`), and Determined agents
  and Ray node types name none in this project's files.

The same mapping serves every policy, so the figure compares them on the same demand.
"""

from __future__ import annotations

from ..config.compute_config import ComputeConfig
from ..reservations import reservation_of
from ..routing import machine_pool_of
from ..scheduling.build import group_order
from .scenario import Scenario
from .workload import Arrival, Workload


def reservations_of(arrival: Arrival, workload: Workload, scenario: Scenario) -> dict[str, int]:
    """The reservations this request could draw on, each with the machines it asks for."""
    task = arrival.task
    if task is None or not isinstance(task.compute_config, ComputeConfig):
        return {}
    name = machine_pool_of(task) or ""
    pool = workload.machine_pools.get(name)
    if pool is None:
        return {}
    known = {r.id: r for r in scenario.reservations}
    out: dict[str, int] = {}
    for machine_type in group_order(task.compute_config, name):
        found = pool.machine(machine_type)
        for template in found.launch_templates if found else ():
            res = known.get(reservation_of(template.advanced_instance_config) or "")
            if res is not None and res.instance_type == template.instance_type:
                out[res.id] = task.num_nodes
    return out


def reserved_demand(workload: Workload, scenario: Scenario) -> dict[str, dict[str, int]]:
    """Per request that could use one: its reservations and the machines it asks for."""
    out = {}
    for arrival in workload.arrivals:
        found = reservations_of(arrival, workload, scenario)
        if found:
            out[arrival.id] = found
    return out
