"""Which capacity reservation a launch template's ``advanced_instance_config`` draws on: one
reading for the runtime's launches and the simulator's (a copy of this rule drifted once, and
the simulator used a GCP reservation 0 % of the day).

- AWS: ``CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId``.
- GCP: ``instanceProperties.reservationAffinity`` with ``consumeReservationType:
  SPECIFIC_RESERVATION`` and the reservation in ``values``; every key in camelCase or
  snake_case (both are accepted by the runtime), the value a bare name or a full resource
  path (``projects/P/zones/Z/reservations/NAME``), read as its name.

:func:`targets_reservation` says whether a config draws on reservations at all (a named one,
AWS's other targets, GCP's ``ANY_RESERVATION``): what makes a machine type's market
``reserved`` for the machine-pool scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_AWS_SPEC = "CapacityReservationSpecification"
_GCP_PROPERTIES = ("instanceProperties", "instance_properties")
_GCP_AFFINITY = ("reservationAffinity", "reservation_affinity")
_GCP_TYPE = ("consumeReservationType", "consume_reservation_type")


def _first(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((mapping[k] for k in keys if k in mapping), None)


def reservation_of(config: Mapping[str, Any]) -> str | None:
    """The reservation the config targets by name, or None (see the module docstring)."""
    spec = config.get(_AWS_SPEC)
    target = spec.get("CapacityReservationTarget") if isinstance(spec, Mapping) else None
    rid = target.get("CapacityReservationId") if isinstance(target, Mapping) else None
    if rid:
        return str(rid)
    props = _first(config, _GCP_PROPERTIES)
    affinity = _first(props, _GCP_AFFINITY) if isinstance(props, Mapping) else None
    if not isinstance(affinity, Mapping):
        return None
    kind = str(_first(affinity, _GCP_TYPE) or "SPECIFIC_RESERVATION").upper()
    values = affinity.get("values")
    if kind != "SPECIFIC_RESERVATION" or not isinstance(values, list) or not values:
        return None
    return str(values[0]).rstrip("/").rsplit("/", 1)[-1] or None


def targets_reservation(config: Mapping[str, Any]) -> bool:
    """Whether the config draws on capacity reservations: a named one (:func:`reservation_of`),
    any other AWS ``CapacityReservationTarget`` (a resource group), or GCP's
    ``ANY_RESERVATION``."""
    if reservation_of(config) is not None:
        return True
    spec = config.get(_AWS_SPEC)
    if isinstance(spec, Mapping) and spec.get("CapacityReservationTarget"):
        return True
    props = _first(config, _GCP_PROPERTIES)
    affinity = _first(props, _GCP_AFFINITY) if isinstance(props, Mapping) else None
    if not isinstance(affinity, Mapping):
        return False
    return str(_first(affinity, _GCP_TYPE) or "").upper() == "ANY_RESERVATION"
