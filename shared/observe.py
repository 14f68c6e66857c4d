"""One observer: what a stored machine is, given what its provider reports of it.

Every look at machines (the boot watch, beat's reconcile, the pools' checks) asks its cloud
once (one ``describe`` per cloud and region), then classifies each machine it holds with
:func:`observe` and acts on the answer: observe first, then act, as Ray's v2 reconciler does
(``python/ray/autoscaler/v2/instance_manager/reconciler.py``: it syncs the cloud's and the
agents' view into its instance states, then decides). No look reads a provider's state on its
own terms, so a machine means the same thing wherever it is looked at.

The report is the provider's, with the node agents' word already folded in and the outage rule
applied (:mod:`corral.shared.liveness`): ``silent`` is the control plane's inference that a
machine stopped reporting *while the control plane (Redis, and the API its agents report
through) was listening*; a silence that overlaps an outage reads as still running.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol


class Reported(Protocol):
    """What a provider says of one machine (its ``ProviderInstance``)."""

    @property
    def state(self) -> str: ...  # pending | running | stopped | terminated | lost

    @property
    def silent(self) -> bool: ...

    @property
    def exit_code(self) -> int | None: ...

    @property
    def notice(self) -> str | None: ...

    @property
    def started(self) -> bool: ...  # the cloud runs (booted) it, whatever its agent said


class Seen(StrEnum):
    """What a machine is, as one look sees it."""

    BOOTING = "booting"  # asked for, not up yet
    UP = "up"  # running (or its run already over: a quick job's machine came up and ended)
    RUNNING = "running"  # up, and still so
    EXITED = "exited"  # its run ended, with an exit code: a job's end
    GONE = "gone"  # the cloud no longer runs it, and nobody asked: lost, by the cloud's word
    DIED = "died"  # the cloud says it died
    SILENT = "silent"  # it stopped reporting while the control plane listened
    RECLAIMING = "reclaiming"  # the cloud warned it will take it (spot notice, preemption)
    ENDED = "ended"  # it was being terminated, and it is gone: the terminate is done
    STILL_UP = "still_up"  # it was being terminated, and it still runs: terminate again


Stored = Literal["booting", "running", "terminating"]


@dataclass(frozen=True, slots=True)
class Observation:
    """One machine's classification: what it is, why (for the record), whether the cloud
    itself said so (only the cloud's own word may block a zone: a silence never does), and
    its run's exit code when it ended."""

    seen: Seen
    why: str = ""
    clouds_word: bool = True
    exit_code: int | None = None

    @property
    def lost(self) -> bool:
        """No longer serving, and not by our own terminate: relaunch or replace it."""
        return self.seen in (Seen.GONE, Seen.DIED, Seen.SILENT, Seen.RECLAIMING)


def observe(stored: Stored, seen: Reported | None) -> Observation:
    """Classify one machine Corral holds as ``stored`` from its provider's report (None: the
    provider does not know it any more)."""
    if stored == "terminating":
        if seen is None or seen.state in ("terminated", "lost"):
            return Observation(Seen.ENDED, "the provider no longer runs it")
        return Observation(Seen.STILL_UP, "the provider still runs it")
    if seen is None:
        if stored == "booting":
            return Observation(Seen.BOOTING, "not reported yet")
        return Observation(Seen.GONE, "its process is gone")
    if seen.state == "stopped" and stored == "running":
        # Stopped by someone else (a spot interruption with behaviour "stop", the console):
        # Corral's own stops move the machine to STOPPED first and are not observed as running.
        return Observation(Seen.DIED, "the cloud stopped it")
    if seen.state == "lost":
        if seen.silent:
            return Observation(Seen.SILENT, "its heartbeats stopped", clouds_word=False)
        return Observation(Seen.DIED, "the cloud says it is gone")
    if stored == "booting":
        if seen.state in ("running", "terminated"):
            return Observation(Seen.UP, "the provider reports it running")
        return Observation(Seen.BOOTING, "still starting")
    if seen.state == "terminated":
        if seen.exit_code is None:
            # Gone without an exit code and without us asking: reclaimed (spot) or failed.
            return Observation(Seen.GONE, "the cloud terminated it (a spot reclaim or a failure)")
        return Observation(
            Seen.EXITED, f"its run exited with code {seen.exit_code}", exit_code=seen.exit_code
        )
    if seen.notice:
        return Observation(Seen.RECLAIMING, f"the cloud is reclaiming it ({seen.notice})")
    return Observation(Seen.RUNNING)


BootVerdict = Literal["up", "booting", "lost", "silent", "unregistered", "timeout"]


def boot_verdict(found: Sequence[Reported], count: int, late: bool) -> BootVerdict:
    """Where one launch of ``count`` machines is, from each node's :func:`observe`: ``up``
    when every node is up, ``lost`` when the cloud says one died on the way, ``silent`` when
    every node that failed only fell silent; when it is ``late`` (past its deadline, counting
    outages): ``unregistered`` when the cloud started a machine still booting (it runs, its
    agent never registered: a fault of those machines, not of the region), else ``timeout``
    (the cloud never started them); else ``booting``."""
    looks = [observe("booting", p) for p in found]
    if len(looks) >= count and all(o.seen == Seen.UP for o in looks):
        return "up"
    failed = [o for o in looks if o.seen in (Seen.DIED, Seen.SILENT)]
    if failed:
        return "silent" if all(o.seen == Seen.SILENT for o in failed) else "lost"
    if not late:
        return "booting"
    started = any(o.seen == Seen.BOOTING and p.started for o, p in zip(looks, found, strict=True))
    return "unregistered" if started else "timeout"
