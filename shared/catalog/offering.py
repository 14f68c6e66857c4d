"""One row of the catalog: an instance type offered in one zone of one region of one cloud."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Offering:
    cloud: str  # aws | gcp | local
    instance_type: str
    accelerator: str | None  # canonical upper-case name, e.g. A100-80GB; None for CPU types
    accelerator_count: int
    vcpus: float
    memory_gib: float
    price_usd_per_hour: float  # on-demand list price
    spot_price_usd_per_hour: float | None  # None where spot is not offered
    region: str
    zone: str
