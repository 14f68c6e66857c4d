"""One reading of the reservation a launch template targets, for the runtime and the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from corral.shared.reservations import reservation_of, targets_reservation

PATH = "projects/sim/zones/us-central1-a/reservations/l4-resv"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {
                "CapacityReservationSpecification": {
                    "CapacityReservationTarget": {"CapacityReservationId": "cr-1"}
                }
            },
            "cr-1",
        ),
        (
            {
                "instanceProperties": {
                    "reservationAffinity": {
                        "consumeReservationType": "SPECIFIC_RESERVATION",
                        "key": "compute.googleapis.com/reservation-name",
                        "values": ["l4-resv"],
                    }
                }
            },
            "l4-resv",
        ),
        (
            {
                "instance_properties": {
                    "reservation_affinity": {
                        "consume_reservation_type": "SPECIFIC_RESERVATION",
                        "values": ["l4-resv"],
                    }
                }
            },
            "l4-resv",
        ),
        (
            {"instanceProperties": {"reservation_affinity": {"values": [PATH]}}},
            "l4-resv",
        ),
        (
            {
                "instanceProperties": {
                    "reservationAffinity": {"consumeReservationType": "ANY_RESERVATION"}
                }
            },
            None,
        ),
        (
            {
                "instanceProperties": {
                    "reservationAffinity": {
                        "consumeReservationType": "NO_RESERVATION",
                        "values": ["x"],
                    }
                }
            },
            None,
        ),
        ({}, None),
    ],
)
def test_both_spellings_and_full_resource_paths(
    config: dict[str, Any], expected: str | None
) -> None:
    assert reservation_of(config) == expected


def test_the_simulator_and_the_runtime_read_reservations_with_one_function() -> None:
    from corral.services.runtime import launch
    from corral.shared.sim import peers, pool_sims

    assert launch.reservation_of is reservation_of
    assert pool_sims.reservation_of is reservation_of and peers.reservation_of is reservation_of


@pytest.mark.parametrize(
    ("config", "reserved"),
    [
        ({"instanceProperties": {"reservation_affinity": {"values": [PATH]}}}, True),
        (
            {
                "instance_properties": {
                    "reservation_affinity": {
                        "consume_reservation_type": "SPECIFIC_RESERVATION",
                        "values": [PATH],
                    }
                }
            },
            True,
        ),
        (
            {
                "instanceProperties": {
                    "reservationAffinity": {"consumeReservationType": "ANY_RESERVATION"}
                }
            },
            True,
        ),
        (
            {
                "CapacityReservationSpecification": {
                    "CapacityReservationTarget": {"CapacityReservationResourceGroupArn": "arn:x"}
                }
            },
            True,
        ),
        (
            {
                "instanceProperties": {
                    "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}
                }
            },
            False,
        ),
        ({}, False),
    ],
)
def test_a_machine_types_market_is_reserved_by_the_same_reading(
    config: dict[str, Any], reserved: bool
) -> None:
    """The machine-pool scheduler's market of a type goes through the runtime's reading: a
    GCP affinity with only ``values`` (a full path) is the reservation ``reservation_of`` names,
    so it is reserved there too (the scheduler's own copy read it as on-demand)."""
    from corral.shared.config.machine_pool import MachineType
    from corral.shared.scheduling.build import market_of

    machine = MachineType.model_validate(
        {
            "machine_type": "m",
            "launch_templates": [{"instance_type": "t", "advanced_instance_config": config}],
            "partitions": [{"name": "any", "size": 1}],
        }
    )
    assert market_of(machine) == ("reserved" if reserved else "on_demand")
    assert targets_reservation(config) is reserved
