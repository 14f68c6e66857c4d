"""A workload whose pool machine failed to launch: when it is placed again, and where.

Anyscale's machine pools place a workload along its compute config's group order (reserved,
then spot, then on-demand in the seed) and move it back up when a better group frees
(``enable_replacement``). A group the cloud cannot serve right now (a reservation holding
fewer machines than its partition's ``size``, spot sold out) must not be asked again at once:
placed, failed, queued, placed again, the workload stormed (4,267 events in a minute, issue
#46) and never reached the groups below.

So one failure leaves a :class:`Setback` on the workload, decided here and nowhere else:

- **back off**: it is not placed again before ``retry_at``: the pause grows with its failures
  in a row (:class:`~corral.shared.waiting.Backoff`, the one formula of the project, here
  with the pool's timers), drawn with jitter from a seed of the workload and its failure
  number, so a redelivered step decides the same time;
- **fall back**: the group whose machine failed is passed over until ``avoid[group]``, so the
  next placement goes down the group order; that time grows with the group's own failures, so
  a group that keeps failing is asked ever less often;
- **come back up**: once that time passes the group is in the workload's order again, and the
  existing rebalancing (replacement, past the partition's ``replacement_threshold``) moves the
  workload up when the group has room; a failed replacement only passes the group over again.

When every group of its order is passed over, the workload waits for the first to come back.
:func:`narrowed` gives the scheduler the workload as the pass should see it; :func:`holds_back`
the workloads a pass must leave waiting, each with its note for ``corral why``. Pure: the
clock comes in as ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter, itemgetter
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..waiting import Backoff, retry_rng, utc_clock
from . import trusted
from .model import Pending, Workload


class Setback(BaseModel):
    """What a workload's failed launches left: see the module docstring. Frozen, shared
    between copies of a ledger."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failures: int = Field(1, ge=1)  # its launches that failed, in all
    machine_type: str  # the group of the machine that failed last
    why: str = ""  # the cloud's word on it
    failed_at: float
    retry_at: float  # not placed again before this
    avoid: dict[str, float] = Field(default_factory=dict)  # group -> passed over until
    strikes: dict[str, int] = Field(default_factory=dict)  # group -> its failures

    def avoided(self, now: float) -> set[str]:
        """The groups passed over at ``now``."""
        return {group for group, until in self.avoid.items() if until > now}


# The settings' defaults (``services.settings.Timers``: pool_retry_*, pool_avoid_*): a pause
# of 5 s, 10 s, 20 s, ... at most 2 min; a group passed over 1 min, 2 min, ... at most 30 min.
RETRY = Backoff(initial_s=5.0, multiplier=2.0, cap_s=120.0, jitter=0.2)
AVOID = Backoff(initial_s=60.0, multiplier=2.0, cap_s=1800.0, jitter=0.2)


# A pass sent for the end of a pause runs this much after it, so that it finds the pause over.
PASS_AFTER_S = 0.05


@dataclass(frozen=True)
class FallbackPolicy:
    """The two pauses: before a sent-back workload is placed again (``retry``), and how long
    a group whose machine failed is passed over (``avoid``)."""

    retry: Backoff = RETRY
    avoid: Backoff = AVOID

    @classmethod
    def of(cls, timers: Any) -> FallbackPolicy:
        """From an object with the settings' field names (``services.settings.Timers``, the
        simulator's timers)."""
        return cls(
            retry=Backoff(
                initial_s=float(timers.pool_retry_initial_s),
                multiplier=2.0,
                cap_s=float(timers.pool_retry_cap_s),
                jitter=0.2,
            ),
            avoid=Backoff(
                initial_s=float(timers.pool_avoid_initial_s),
                multiplier=2.0,
                cap_s=float(timers.pool_avoid_cap_s),
                jitter=0.2,
            ),
        )


def after_failure(
    prev: Setback | None,
    *,
    workload_id: str,
    machine_type: str,
    group_order: Iterable[str],
    why: str,
    now: float,
    policy: FallbackPolicy,
) -> Setback:
    """The setback once a machine of ``machine_type`` failed to launch for the workload at
    ``now`` (``prev``: what earlier failures left). A group not in ``group_order`` (its head
    node, launched outside the pool) only adds to the pause."""
    order = tuple(dict.fromkeys(group_order))
    failures = (prev.failures + 1) if prev else 1
    rng = retry_rng(workload_id, failures)
    avoid = {g: t for g, t in (prev.avoid if prev else {}).items() if t > now}
    strikes = dict(prev.strikes) if prev else {}
    if machine_type in order:
        strikes[machine_type] = strikes.get(machine_type, 0) + 1
        avoid[machine_type] = now + policy.avoid.wait_s(strikes[machine_type] - 1, rng)
    retry_at = now + policy.retry.wait_s(failures - 1, rng)
    if order and all(avoid.get(g, 0.0) > now for g in order):
        retry_at = max(retry_at, min(avoid[g] for g in order))  # the first group back
    return Setback(
        failures=failures,
        machine_type=machine_type,
        why=why,
        failed_at=now,
        retry_at=retry_at,
        avoid=avoid,
        strikes=strikes,
    )


def narrowed(workload: Workload, setback: Setback | None, now: float) -> Workload:
    """The workload as a pass at ``now`` sees it: its group order without the groups passed
    over (the whole order when all are: it is held back until one is not)."""
    if setback is None:
        return workload
    return _seen(_NARROWED, workload, setback, now, _narrow)


def _narrow(workload: Workload, setback: Setback, now: float) -> Workload:
    avoid = setback.avoid
    order = workload.group_order
    if not any(avoid.get(g, _OPEN) > now for g in order):
        return workload
    left = tuple(g for g in order if not avoid.get(g, _OPEN) > now)
    return trusted.updated(workload, {"group_order": left}) if left else workload


_OPEN = -math.inf  # a group never passed over
Seen = TypeVar("Seen")
# What was worked out of a workload and its setback, per kind (narrowed, its note), by the
# workload's id(): (the workload, the setback, the span of times it holds for, the answer).
# Every pass asks it again of each waiting workload with a setback, and between two of the
# setback's times (a group's return) the answer is the same: a long queue backing off cost
# hundreds of model copies a pass. The workload and the setback are kept, so the ids stay
# theirs; both are frozen. Bounded: emptied when full.
_Memo = dict[int, tuple[Workload, Setback, float, float, Seen]]
_NARROWED: _Memo[Workload] = {}
_NOTES: _Memo[Pending] = {}
_MEMO_MAX = 20_000


def _seen(
    memo: _Memo[Seen],
    workload: Workload,
    setback: Setback,
    now: float,
    work_out: Callable[[Workload, Setback, float], Seen],
) -> Seen:
    """``work_out(workload, setback, now)``, remembered for the span of times around ``now``
    in which no group of the setback comes back (what it reads of the clock)."""
    known = memo.get(id(workload))
    if (
        known is not None
        and known[0] is workload
        and known[1] is setback
        and known[2] <= now < known[3]
    ):
        return known[4]
    since, until = _span(setback, now)
    answer = work_out(workload, setback, now)
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    memo[id(workload)] = (workload, setback, since, until, answer)
    return answer


def passed_over(setback: Setback, now: float) -> str:
    """The groups passed over at ``now`` with their times back, as a waiting workload's
    reason tells them (``"a until 10:00:00 UTC, b until ..."``, sorted); "" when none is."""
    known = _PASSED_OVER.get(id(setback))
    if known is not None and known[0] is setback and known[1] <= now < known[2]:
        return known[3]
    since, until = _span(setback, now)
    gone = sorted(g for g, at in setback.avoid.items() if at > now)
    text = ", ".join([f"{g} until {utc_clock(setback.avoid[g])}" for g in gone])
    if len(_PASSED_OVER) >= _MEMO_MAX:
        _PASSED_OVER.clear()
    _PASSED_OVER[id(setback)] = (setback, since, until, text)
    return text


_PASSED_OVER: dict[int, tuple[Setback, float, float, str]] = {}


def _span(setback: Setback, now: float) -> tuple[float, float]:
    """The times around ``now`` between which the same groups are passed over: [the last
    return at or before it, the next after it)."""
    since, until = _OPEN, math.inf
    for at in setback.avoid.values():
        if at > now:
            until = min(until, at)
        else:
            since = max(since, at)
    return since, until


def holds_back(
    workloads: Mapping[str, Workload], setbacks: Mapping[str, Setback], now: float
) -> dict[str, Pending]:
    """The waiting workloads a pass at ``now`` must not place (their pause is not over), each
    with its note for ``corral why``."""
    out = {}
    for wid, setback in setbacks.items():
        workload = workloads.get(wid)
        if workload is not None and workload.phase == "pending" and setback.retry_at > now:
            out[wid] = _seen(_NOTES, workload, setback, now, note)
    return out


def note(workload: Workload, setback: Setback, now: float) -> Pending:
    """Why a workload waits after a failed launch, for ``corral why``: which group failed,
    when, why; when it is tried next and on which group; until when a group is passed over."""
    left = narrowed(workload, setback, setback.retry_at).group_order
    gone = sorted(setback.avoided(now).intersection(workload.group_order))
    text = (
        f"a {setback.machine_type} machine failed to launch at {utc_clock(setback.failed_at)}"
        + (f" ({setback.why})" if setback.why else "")
        + f"; next try at {utc_clock(setback.retry_at)}"
        + (f" on {left[0]}" if left else "")
        + f" (failure {setback.failures}, backing off)"
    )
    if gone:
        until = ", ".join(f"{g} until {utc_clock(setback.avoid[g])}" for g in gone)
        text += f"; passed over: {until}"
    return Pending(workload_id=workload.workload_id, code="backing_off", reason=text)


def seen_at(
    workloads: Mapping[str, Workload], setbacks: Mapping[str, Setback], now: float
) -> tuple[dict[str, Workload], dict[str, Pending], dict[str, str]]:
    """What a pass at ``now`` reads of the setbacks, in one walk over them: the workloads
    :func:`narrowed` changes (by id), :func:`holds_back`, and :func:`passed_over` of each
    workload that passes a group over (by id, "" left out). A long queue in which nearly
    every workload has failed a launch asks this every pass: each workload's answers are
    kept between the times its setback names (a pause's end, a group's return), and only
    worked out again when its workload, its setback or that span changed."""
    changed: dict[str, Workload] = {}
    held: dict[str, Pending] = {}
    gone: dict[str, str] = {}
    memo = _VIEWS
    for wid, setback in setbacks.items():
        workload = workloads.get(wid)
        if workload is None:
            continue
        view = memo.get(wid)
        if (
            view is None
            or view[0] is not workload
            or view[1] is not setback
            or not view[2] <= now < view[3]
        ):
            view = _view(workload, setback, now)
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            memo[wid] = view
        if view[4] is not workload:
            changed[wid] = view[4]
        if view[5] is not None:
            held[wid] = view[5]
        if view[6]:
            gone[wid] = view[6]
    return changed, held, gone


_View = tuple[Workload, Setback, float, float, Workload, Pending | None, str]
_VIEWS: dict[str, _View] = {}


def _view(workload: Workload, setback: Setback, now: float) -> _View:
    """The workload's answers at ``now`` and the span of times they hold for: the groups'
    returns and the pause's end around ``now``."""
    since, until = _span(setback, now)
    retry_at = setback.retry_at
    if retry_at > now:
        until = min(until, retry_at)
    else:
        since = max(since, retry_at)
    held = None
    if workload.phase == "pending" and retry_at > now:
        held = _seen(_NOTES, workload, setback, now, note)
    seen = narrowed(workload, setback, now)
    return (workload, setback, since, until, seen, held, passed_over(setback, now))


def thresholds(workloads: Mapping[str, Workload], setbacks: Mapping[str, Setback]) -> list[float]:
    """The times a pass reads from the setbacks: a pause's end, a group's return (the pauses'
    ends first; read at C speed, a queue of thousands backing off is asked after each pass)."""
    mine = list(map(_FIELDS, compress(setbacks.values(), map(workloads.__contains__, setbacks))))
    out = list(map(_RETRY_AT, mine))
    out.extend(chain.from_iterable(map(dict.values, map(_AVOID, mine))))
    return out


_FIELDS = attrgetter("__dict__")  # a model's fields as stored
_RETRY_AT = itemgetter("retry_at")
_AVOID = itemgetter("avoid")
