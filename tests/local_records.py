"""A local-cloud instance record for unit tests, with every field a launch writes."""

from __future__ import annotations

from corral.services.providers.local.state import InstanceRecord


def local_record(**fields: object) -> InstanceRecord:
    base: dict[str, object] = {
        "id": "li-1",
        "request_id": "r-1",
        "attempt_id": "a-1",
        "region": "lab",
        "zone": "lab-a",
        "instance_type": "cpu-2",
        "market": "on_demand",
        "pool": "p",
        "log_path": "/dev/null",
        "created_at": 0.0,
        "vcpus": 2.0,
        "memory_gib": 4.0,
    }
    return InstanceRecord(**{**base, **fields})  # type: ignore[arg-type]
