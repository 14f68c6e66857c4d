"""When a machine's silence makes it lost, and when the control plane was the one not
listening.

A machine reports through the control plane (its agent writes heartbeats into Redis, directly
or through the API). While Redis is down, paused or failing over, no machine can report: that
silence is the control plane's, not the machine's. So silence is counted only from the end of
the control plane's last outage (:mod:`corral.services.state.outage` records it): a machine is
lost when it said nothing for a whole timeout *while the control plane was listening*, and a
boot deadline passes only once the machine has had a grace period after an outage to report.

Pure: times are seconds since the epoch, passed in.
"""

from __future__ import annotations


def outage_gap_s(configured_gap_s: float, heartbeat_timeout_s: float) -> float:
    """How long the control plane's pulse may pause before the pause counts as an outage: the
    configured gap, never more than half the heartbeat timeout (a shorter pause cannot make a
    machine silent for a whole timeout)."""
    return max(0.1, min(configured_gap_s, heartbeat_timeout_s / 2))


def silent_too_long(last_heard: float, now: float, timeout_s: float, outage_end: float) -> bool:
    """Whether nothing was heard from a machine for more than ``timeout_s`` of time during
    which the control plane was listening: silence that overlaps the last outage counts only
    from the outage's end (``outage_end``; 0 when there was none)."""
    return now - max(last_heard, outage_end) > timeout_s


def deadline_passed(deadline: float, now: float, outage_end: float, grace_s: float) -> bool:
    """Whether a deadline (a boot's) has passed, counting the control plane's outages: after
    one, a machine gets ``grace_s`` to report before it is late."""
    return now >= max(deadline, outage_end + grace_s)
