"""The local cloud's records: a brief read (the fields that change) on top of a record held
from an earlier look gives the record a full read would."""

from __future__ import annotations

from corral.services.providers.local.state import MUTABLE_FIELDS, InstanceRecord

from local_records import local_record


def _rec(**fields: object) -> InstanceRecord:
    launched = {"tags": {"corral-request": "r-1"}, "envs": {"A": "1"}, "run": "sleep 1"}
    return local_record(**{**launched, **fields})


def _brief(rec: InstanceRecord) -> dict[str, str]:
    full = rec.to_hash()
    return {k: v for k, v in full.items() if k == "id" or k in MUTABLE_FIELDS}


def test_a_brief_read_on_a_held_record_is_the_full_read() -> None:
    held = _rec(start_at=110.0)
    now = _rec(
        state="running",
        pid=4321,
        child_pid=4400,
        child_pids=[4400],
        first_heartbeat_at=111.5,
        last_beat_at=112.0,
        activity="running",
    )
    assert held.with_changes(_brief(now)) == InstanceRecord.from_hash(now.to_hash())


def test_a_field_the_brief_read_lacks_is_unset() -> None:
    held = _rec(pid=0, state="terminating", child_pids=[7], exit_code=3)
    back = held.with_changes({"id": held.id})
    assert (back.state, back.pid, back.child_pids, back.exit_code) == ("pending", None, [], None)
    assert back.envs == held.envs and back.run == held.run  # the fixed fields kept


def test_the_tags_handed_on_are_not_the_held_records() -> None:
    held = _rec()
    back = held.with_changes({"id": held.id, "state": "running"})
    back.tags["x"] = "y"
    assert "x" not in held.tags
    assert held.with_changes({"id": held.id}).child_pids is not back.child_pids
