"""The one observer (issue #23 item 3): a stored machine against its provider's report."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from corral.shared.observe import Seen, boot_verdict, observe


@dataclass
class Report:
    state: str
    silent: bool = False
    exit_code: int | None = None
    notice: str | None = None
    started: bool = False


@pytest.mark.parametrize(
    ("stored", "report", "seen", "clouds_word"),
    [
        ("running", None, Seen.GONE, True),
        ("running", Report("running"), Seen.RUNNING, True),
        ("running", Report("pending"), Seen.RUNNING, True),
        ("running", Report("lost"), Seen.DIED, True),
        # A silence is the control plane's inference: it never blocks a zone.
        ("running", Report("lost", silent=True), Seen.SILENT, False),
        ("running", Report("terminated"), Seen.GONE, True),
        ("running", Report("terminated", exit_code=0), Seen.EXITED, True),
        ("running", Report("running", notice="spot-interruption"), Seen.RECLAIMING, True),
        # Lost outranks a notice: the machine is gone already.
        ("running", Report("lost", notice="preempted"), Seen.DIED, True),
        ("terminating", None, Seen.ENDED, True),
        ("terminating", Report("terminated", exit_code=3), Seen.ENDED, True),
        ("terminating", Report("lost"), Seen.ENDED, True),
        ("terminating", Report("running"), Seen.STILL_UP, True),
        ("booting", None, Seen.BOOTING, True),
        ("booting", Report("pending"), Seen.BOOTING, True),
        ("booting", Report("running"), Seen.UP, True),
        ("booting", Report("terminated", exit_code=0), Seen.UP, True),  # a quick job
        ("booting", Report("lost", silent=True), Seen.SILENT, False),
    ],
)
def test_a_machine_is_classified_the_same_wherever_it_is_looked_at(
    stored: str, report: Report | None, seen: Seen, clouds_word: bool
) -> None:
    look = observe(stored, report)  # type: ignore[arg-type]
    assert look.seen == seen and look.clouds_word == clouds_word
    assert look.lost == (seen in (Seen.GONE, Seen.DIED, Seen.SILENT, Seen.RECLAIMING))


def test_a_job_end_carries_its_exit_code() -> None:
    look = observe("running", Report("terminated", exit_code=7))
    assert look.seen == Seen.EXITED and look.exit_code == 7 and "7" in look.why


def test_a_launch_is_up_only_when_every_node_is() -> None:
    up, booting = Report("running"), Report("pending")
    assert boot_verdict([up, up], 2, late=False) == "up"
    assert boot_verdict([up], 2, late=False) == "booting"
    assert boot_verdict([up, booting], 2, late=True) == "timeout"
    assert boot_verdict([up, Report("lost")], 2, late=False) == "lost"
    assert boot_verdict([Report("lost", silent=True)], 1, late=False) == "silent"
    assert boot_verdict([Report("lost", silent=True), Report("lost")], 2, late=False) == "lost"


def test_a_late_launch_the_cloud_started_is_the_machines_fault_not_a_hung_region() -> None:
    """Issue #46: machines the cloud started whose agents never registered are ``unregistered``
    (their fault, no block); only machines the cloud never started are ``timeout``."""
    up, stuck = Report("running"), Report("pending", started=True)
    assert boot_verdict([up, stuck], 2, late=False) == "booting"
    assert boot_verdict([up, stuck], 2, late=True) == "unregistered"
    assert boot_verdict([up, Report("pending")], 2, late=True) == "timeout"
    assert boot_verdict([], 2, late=True) == "timeout"
