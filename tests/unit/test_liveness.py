"""The outage rule: silence counts only from the end of the control plane's last outage."""

from __future__ import annotations

from corral.services.providers.local.state import (
    LOST,
    PENDING,
    RUNNING,
    InstanceRecord,
    derive_state,
)
from corral.shared.liveness import deadline_passed, outage_gap_s, silent_too_long

from local_records import local_record


def test_silence_before_an_outage_end_does_not_count() -> None:
    # Silent since t=100, timeout 10: lost at t=111 without an outage...
    assert silent_too_long(100.0, 111.0, 10.0, outage_end=0.0)
    # ...but Redis was away until t=105: only 6 s of listening time, not lost.
    assert not silent_too_long(100.0, 111.0, 10.0, outage_end=105.0)
    assert silent_too_long(100.0, 115.5, 10.0, outage_end=105.0)


def test_a_deadline_gives_a_grace_after_an_outage() -> None:
    assert deadline_passed(50.0, 60.0, outage_end=0.0, grace_s=10.0)
    assert not deadline_passed(50.0, 60.0, outage_end=55.0, grace_s=10.0)
    assert deadline_passed(50.0, 65.0, outage_end=55.0, grace_s=10.0)


def test_the_gap_is_at_most_half_the_heartbeat_timeout() -> None:
    assert outage_gap_s(5.0, 10.0) == 5.0
    assert outage_gap_s(5.0, 3.0) == 1.5


def _rec(**fields: object) -> InstanceRecord:
    return local_record(**{"pid": 1, **fields})


def test_an_agent_cut_off_by_an_outage_stays_running_then_is_lost() -> None:
    rec = _rec(first_heartbeat_at=1.0, last_beat_at=100.0)
    args = {"alive": True, "heartbeat_timeout_s": 10.0, "start_timeout_s": 60.0}
    assert derive_state(rec, None, now=120.0, **args) == LOST
    held = derive_state(rec, None, now=120.0, outage_end=115.0, **args)
    assert held == RUNNING
    late = derive_state(rec, None, now=126.0, outage_end=115.0, **args)
    assert late == LOST


def test_a_booting_agent_gets_its_start_time_again_after_an_outage() -> None:
    rec = _rec(created_at=0.0)
    args = {"alive": True, "heartbeat_timeout_s": 10.0, "start_timeout_s": 60.0}
    assert derive_state(rec, None, now=61.0, **args) == LOST
    assert derive_state(rec, None, now=61.0, outage_end=30.0, **args) == PENDING


def test_a_dead_agent_is_lost_whatever_the_outage() -> None:
    rec = _rec(first_heartbeat_at=1.0, last_beat_at=100.0)
    args = {"alive": False, "heartbeat_timeout_s": 10.0, "start_timeout_s": 60.0}
    assert derive_state(rec, None, now=101.0, outage_end=100.0, **args) == LOST
