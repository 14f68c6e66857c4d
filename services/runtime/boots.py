"""The boot watch: one look at a cloud's machines on their way up.

Launches return as soon as the cloud accepted them (:mod:`.launch`); this pass, one Celery task
per cloud re-published with a countdown while anything boots, finishes them. Why a per-cloud
watch and not a check per attempt: one describe per cloud and region serves every booting
machine at once, so 500 boots cost a handful of calls per look, not 500; and a watch scheduled
once per burst costs one message per look, not one per launch. Beat's reconcile pass schedules
a watch again for any cloud with boots and none scheduled (a watch whose worker died).

Each launch is finished by whoever asked for it: a request's attempt (:mod:`.provisioning`) or
a pooled machine (:mod:`.pooled.launching`). Finishing is idempotent; the launch leaves the
book only after it was finished, so a watch killed half-way leaves nothing half done.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from typing import Any

from corral.services.providers.base import TAG_ATTEMPT, ProviderInstance
from corral.services.queues import dispatch
from corral.services.runtime import provisioning
from corral.services.runtime.claims import hold_claim
from corral.services.runtime.deps import Deps
from corral.services.runtime.failover import capacity_freed
from corral.services.runtime.launch import finish_all, watch_interval, watch_soon
from corral.services.runtime.pooled import launching
from corral.services.state.boots import Boot
from corral.shared.blocking import Placed
from corral.shared.errors import ProviderError
from corral.shared.liveness import deadline_passed
from corral.shared.observe import boot_verdict

log = logging.getLogger("corral.boots")


def watch(deps: Deps, cloud: str) -> dict[str, int]:
    """One look at ``cloud``'s booting machines; schedules the next look while any boot."""
    started = deps.now()
    owner = uuid.uuid4().hex
    key = f"boot-watch:{cloud}"
    if not deps.store.claim(key, owner, deps.settings.timers.claim_ttl_s):
        return {"skipped": 1}  # another look at this cloud is running
    counts: dict[str, int] = defaultdict(int)
    with hold_claim(deps, key, owner):
        boots = deps.boots.of(cloud)
        if boots:
            _look(deps, cloud, boots, counts)
    _next(deps, cloud, deps.now() - started)
    return dict(counts)


def _look(deps: Deps, cloud: str, boots: list[Boot], counts: dict[str, int]) -> None:
    # A boot is late only once its machines had a heartbeat timeout to report after the
    # control plane's last outage (they could not report while Redis or the API was away).
    # One pulse per look, before the machines are read (a describe that pulses takes it).
    outage_end = deps.outage.pulse()
    try:
        seen = _describe(deps.provider(cloud), boots, outage_end)
    except ProviderError as exc:
        counts["unanswered"] += 1
        log.warning("%s did not answer describe (%s); its boots wait a look", cloud, exc)
        return
    by_attempt: dict[str, list[ProviderInstance]] = defaultdict(list)
    for pi in seen:
        if attempt := pi.tags.get(TAG_ATTEMPT):
            by_attempt[attempt].append(pi)
    now = deps.now()
    if deps.provider(cloud).features.agents_through_api:
        # Its machines register through the API: an API outage holds their boots too.
        outage_end = max(outage_end, deps.outage.api_heard_since())
    grace_s = deps.settings.timers.heartbeat_timeout_s
    done: list[Boot] = []
    freed: list[Placed] = []  # places of quick jobs' machines let go in this look
    ups: list[tuple[Boot, list[ProviderInstance]]] = []  # attempts up: finished together
    try:
        for boot in boots:
            found = by_attempt.get(boot.key, [])
            late = deadline_passed(boot.deadline, now, outage_end, grace_s)
            verdict = boot_verdict(found, boot.spec.count, late=late)
            counts[verdict] += 1
            if verdict == "booting":
                continue
            if boot.kind == "attempt" and verdict == "up":
                ups.append((boot, found))
                continue
            try:
                _finish_one(deps, boot, verdict, found)
            except Exception:  # left in the book: the next look finishes it
                counts["errors"] += 1
                log.exception("could not finish the boot of %s; trying again next look", boot.key)
                continue
            done.append(boot)
        _finish_ups(deps, ups, counts, done, freed)
    finally:
        # What this look finished leaves the book in one command, and the capacity its ended
        # jobs freed is told once (one read of the blocks and of the waiting requests per
        # look, not per launch). A look killed before this finishes them again next look
        # (finishing is idempotent).
        finish_all(deps, done)
        capacity_freed(deps, freed)


def _finish_ups(
    deps: Deps,
    ups: list[tuple[Boot, list[ProviderInstance]]],
    counts: dict[str, int],
    done: list[Boot],
    freed: list[Placed],
) -> None:
    """The attempts this look saw up, RUNNING in a few round trips for all of them (at a burst's
    end a look sees hundreds up at once); those that could not be finished stay in the book
    for the next look."""
    if not ups:
        return
    try:
        outcomes = provisioning.booted_all(deps, ups, freed=freed)
    except Exception:
        counts["errors"] += len(ups)
        log.exception("could not finish %d boots; trying again next look", len(ups))
        return
    for (boot, _), outcome in zip(ups, outcomes, strict=True):
        if outcome == "error":
            counts["errors"] += 1
        else:
            done.append(boot)


def _describe(provider: Any, boots: list[Boot], outage_end: float) -> list[ProviderInstance]:
    """One call for every boot at once (per region, inside the provider). A provider that can
    tell the machines of given launches alone (``Features.describe_launches``: the local cloud
    reads them by attempt, judging them by the look's pulse) is asked for those, not for every
    machine it ever ran."""
    if provider.features.describe_launches:
        keys = [boot.key for boot in boots]
        return list(provider.describe_launches(keys, outage_end=outage_end))
    return list(provider.describe())


def _finish_one(deps: Deps, boot: Boot, verdict: str, found: list[ProviderInstance]) -> None:
    match boot.kind, verdict:
        case "attempt", _:
            provisioning.boot_failed(deps, boot, verdict)
        case "pool_machine", "up":
            launching.booted(deps, boot, found[0])
        case "pool_machine", _:
            launching.boot_failed(deps, boot, verdict, found)


def _next(deps: Deps, cloud: str, took_s: float = 0.0) -> None:
    """Schedule the next look while anything boots; else let the next launch schedule one.
    Looks come an interval apart, start to start: a look that took long (one that finished
    hundreds of boots at a burst's end) does not push the next one back by its own length,
    though it leaves a fifth of the interval at least before the next."""
    interval = watch_interval(deps, cloud)
    if deps.boots.in_flight(cloud):
        deps.boots.rearm_watch(cloud, ttl_s=interval * 4 + 5)
        countdown = max(interval - max(took_s, 0.0), interval / 5)
        dispatch.watch_boots(cloud, countdown=countdown, settings=deps.settings)
        return
    deps.boots.end_watch(cloud)
    if deps.boots.in_flight(cloud):  # a launch slipped in between the look and the end
        watch_soon(deps, cloud)
