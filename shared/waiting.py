"""Waiting for capacity: what a direct request whose failover chain is exhausted does next.

SkyPilot's ``sky launch --retry-until-up`` walks the whole chain again after a pause that
grows (30 s, then longer, with jitter) until the cluster is up. Corral does the same by
default: the request moves to WAITING and walks its chain again when its retry is due, and
sooner when a blocked scope covering its chain expires first (that is when a sold-out place
is worth asking again), or when one of our own machines in a place of its chain ends
(:func:`lifted_by_release`, :func:`woken_by_release`). Two things end the wait: the task's
``retry_until_up: false`` (the CLI's ``--fail-fast``) fails it at once, as before; its
``max_wait`` fails it once that long has passed since it started looking for capacity, with a
reason naming the deadline.

:func:`decide_wait` is the one rule; the runtime (the failover step, and reconcile's pass that
wakes waiting requests) and the simulator both call it. Pure: the clock and the random draw
come in as arguments.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from corral.shared.blocking import Ask, Block, Placed, PlaceKey, exact_key, place_key
from corral.shared.config import parse_duration_s
from corral.shared.quota_families import quota_families

# A retry after a block's expiry waits this much longer, so the block is gone when it runs.
AFTER_EXPIRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long a waiting request waits between walks of its chain: ``initial_s``, times
    ``multiplier`` for each walk already made, at most ``cap_s``; each wait is drawn within
    +-``jitter`` of that (a fraction), so requests that exhausted together do not return in
    a herd."""

    initial_s: float = 30.0
    multiplier: float = 1.6
    cap_s: float = 300.0
    jitter: float = 0.2

    def _steps(self, retries: int) -> int:
        """``retries``, but no more than it takes to reach the cap (a request that waited all
        day has made hundreds of walks: the power must not overflow)."""
        if self.multiplier <= 1.0 or self.initial_s >= self.cap_s:
            return 0 if self.multiplier <= 1.0 else 1
        to_cap = math.ceil(math.log(self.cap_s / self.initial_s) / math.log(self.multiplier))
        return min(max(0, retries), to_cap)

    def wait_s(self, retries: int, rng: random.Random) -> float:
        """The pause before walk number ``retries + 1`` (``retries`` made so far)."""
        base = min(self.cap_s, self.initial_s * self.multiplier ** self._steps(retries))
        drawn = base * (1.0 + self.jitter * (2.0 * rng.random() - 1.0))
        return max(0.0, min(self.cap_s, drawn))


class RetryTimers(Protocol):
    """The timers a backoff is made of (``services.settings.Timers``, the simulator's
    ``SimTimers``)."""

    @property
    def wait_retry_initial_s(self) -> float: ...
    @property
    def wait_retry_multiplier(self) -> float: ...
    @property
    def wait_retry_cap_s(self) -> float: ...
    @property
    def wait_retry_jitter(self) -> float: ...


def backoff_of(timers: RetryTimers) -> Backoff:
    """The backoff the runtime's timers set."""
    return Backoff(
        initial_s=timers.wait_retry_initial_s,
        multiplier=timers.wait_retry_multiplier,
        cap_s=timers.wait_retry_cap_s,
        jitter=timers.wait_retry_jitter,
    )


@dataclass(frozen=True, slots=True)
class WaitTerms:
    """What a task asks of an exhausted chain: wait (``retry_until_up``), for how long."""

    retry_until_up: bool = True
    max_wait_s: float | None = None

    @classmethod
    def of(cls, task: Mapping[str, Any]) -> WaitTerms:
        """From a stored task (its JSON form: ``max_wait`` as text, ``"1800s"``)."""
        max_wait = task.get("max_wait")
        if isinstance(max_wait, str):
            max_wait = parse_duration_s(max_wait)
        return cls(
            retry_until_up=bool(task.get("retry_until_up", True)),
            max_wait_s=None if max_wait is None else float(max_wait),
        )


def retry_rng(request_id: str, retries: int) -> random.Random:
    """The jitter's draw for one wait of one request: seeded by both, so a redelivered step
    decides the same retry time."""
    return random.Random(f"{request_id}/{retries}")


@dataclass(frozen=True, slots=True)
class WaitDecision:
    """What an exhausted chain leads to.

    ``action``: ``wait`` (walk the chain again at ``retry_at``) or ``fail`` (``reason`` says
    why: fail fast, or the deadline). ``deadline``: when the wait ends for good (None: it
    never does). ``because``: ``backoff`` or ``block_expiry`` (a block covering the chain
    expires before the backoff is over)."""

    action: Literal["wait", "fail"]
    reason: str
    retry_at: float | None = None
    deadline: float | None = None
    because: Literal["backoff", "block_expiry", "deadline", ""] = ""


def deadline_of(since: float, max_wait_s: float | None) -> float | None:
    """When a request that started looking for capacity at ``since`` stops waiting."""
    return None if max_wait_s is None else since + max_wait_s


def blocking_expiries(
    chain: Sequence[Placed], blocks: Iterable[tuple[Block, float]]
) -> list[float]:
    """When each blocked candidate of ``chain`` is free to try again: the last expiry
    (``until``) among the blocks that cover it (a zone's block and its region's both must be
    gone). A walk at one of these times finds something to try; a block that expires while
    another still covers the same candidates would wake the request for nothing."""
    return [until for _, until in waits_on(chain, blocks)]


def waits_on(
    chain: Sequence[Placed], blocks: Iterable[tuple[Block, float]]
) -> list[tuple[Block, float]]:
    """What a request whose chain is exhausted waits on: per blocked candidate of ``chain``,
    the block covering it that expires last, with that expiry (:func:`blocking_expiries`'
    times). Only the end of one of these blocks can let the request go on (another block
    covering the same candidate is gone by then): a wait for capacity is woken by these
    ends, not swept on a timer; a block renewed before its end (someone tried the place
    again and failed) keeps its waiters waiting."""
    exact: dict[PlaceKey, tuple[Block, float]] = {}  # a block naming a whole place, by place
    wide: dict[str, list[tuple[Block, float]]] = {}  # the wider ones, by cloud
    for block, until in blocks:
        key = exact_key(block)
        if key is None:
            wide.setdefault(block.cloud, []).append((block, until))
        else:
            known = exact.get(key)
            if known is None or until > known[1]:
                exact[key] = (block, until)
    out: list[tuple[Block, float]] = []
    for c in chain:
        place = place_key(c)
        last = exact.get(place)
        for block, until in wide.get(c.cloud, ()):
            if block.matches(c) and (last is None or until > last[1]):
                last = (block, until)
        if last is not None:
            out.append(last)
    return out


def decide_wait(
    *,
    now: float,
    since: float,
    retries: int,
    retry_until_up: bool,
    max_wait_s: float | None,
    expiries: Iterable[float],
    backoff: Backoff,
    rng: random.Random,
    candidates: int | None = None,
) -> WaitDecision:
    """The chain was walked to its end with nothing launched: wait, or fail.

    ``since``: when the request started looking for capacity (its submission, or its last
    relaunch); ``retries``: walks made again so far; ``expiries``: when the blocked candidates
    of its chain are free again (:func:`blocking_expiries`); ``candidates``: the chain's length.
    The retry comes after the backoff, or just after the first of those expiries if sooner,
    and never after the deadline (the last walk is made at it; the next exhaustion fails the
    request). When every candidate is blocked, a walk before the first is free would skip them
    all and find nothing: the retry then waits for that one, even past the backoff."""
    if not retry_until_up:
        return WaitDecision("fail", "fail fast: the request does not wait for capacity")
    deadline = deadline_of(since, max_wait_s)
    if deadline is not None and now >= deadline:
        return WaitDecision(
            "fail",
            f"max_wait {_span(max_wait_s or 0.0)} passed at {utc_clock(deadline)} "
            f"with no capacity ({retries} retr{'y' if retries == 1 else 'ies'} of the chain)",
            deadline=deadline,
            because="deadline",
        )
    retry_at = now + backoff.wait_s(retries, rng)
    because: Literal["backoff", "block_expiry", "deadline"] = "backoff"
    live = [t for t in expiries if t > now]
    soonest = min(live, default=None)
    all_blocked = candidates is not None and 0 < candidates <= len(live)
    if soonest is not None and (all_blocked or soonest + AFTER_EXPIRY_S < retry_at):
        retry_at, because = soonest + AFTER_EXPIRY_S, "block_expiry"
    if deadline is not None and deadline < retry_at:
        retry_at, because = deadline, "deadline"
    reason = f"waiting for capacity: retry {retries + 1} at {utc_clock(retry_at)}"
    if deadline is not None:
        reason += f", gives up at {utc_clock(deadline)} (max_wait {_span(max_wait_s or 0.0)})"
    return WaitDecision("wait", reason, retry_at, deadline, because)


def still_blocked(
    *, now: float, ends: Iterable[float], retries: int, deadline: float | None
) -> WaitDecision | None:
    """A request whose every candidate was blocked is due to walk its chain again: is it
    worth it? ``ends``: when the blocks it waits on (:func:`waits_on`) end now, as they stand
    (a block gone counts as ended). None when one has ended (or the deadline is here): walk
    the chain. Otherwise every one was renewed meanwhile (other requests tried those places
    and failed) and a walk would find nothing to try: the wait goes on, to just after the
    first new end (never past the deadline), and counts no retry."""
    renewed = renewed_until(now=now, ends=ends, deadline=deadline)
    if renewed is None:
        return None
    retry_at, because = renewed
    reason = f"waiting for capacity: retry {retries + 1} at {utc_clock(retry_at)}"
    return WaitDecision("wait", reason, retry_at, deadline, because)


def renewed_until(
    *, now: float, ends: Iterable[float], deadline: float | None
) -> tuple[float, Literal["block_expiry", "deadline"]] | None:
    """:func:`still_blocked`'s rule without its reason line: None (walk the chain now), or
    when to look again and why (``block_expiry`` or ``deadline``). The simulator, which
    prints no reason, calls this one; ``ends`` may be any iterable, read once."""
    if deadline is not None and now >= deadline:
        return None
    first = min(ends, default=now)
    if first <= now:
        return None
    retry_at = first + AFTER_EXPIRY_S
    if deadline is not None and deadline < retry_at:
        return deadline, "deadline"
    return retry_at, "block_expiry"


def lifted_by_release(place: Placed) -> tuple[Block, ...]:
    """The blocks that one of our own machines ending at ``place`` lifts: its job is over (or
    its user ended it), so the room it held is free again. The block naming that very place
    (sold out), the region's (a regional quota it counted against; a region that hung answers
    again: the terminate went through), the type's everywhere (a quota on that type, such as
    GCP's GPUS_ALL_REGIONS) and its quota families' in the region. A block a lost machine
    left (``outcome`` lost: the cloud takes machines back there) is kept by the adapters: a
    machine that ended on purpose says nothing about that. A whole cloud's block (credentials)
    is never lifted this way. A machine let go because its own attempt failed frees nothing:
    it never counts here."""
    c = place
    accelerator = Ask.of(c).accelerator  # a bare place has none: its CPU quotas are lifted
    families = sorted(quota_families(c.cloud, c.instance_type, c.market, accelerator, c.zone))
    return (
        Block(c.cloud, c.region, c.zone, c.instance_type, c.market),
        Block(c.cloud, region=c.region),
        Block(c.cloud, instance_type=c.instance_type, market=c.market),
        *(Block(c.cloud, region=c.region, quota_family=f) for f in families),
    )


def woken_by_release(
    freed: Sequence[PlaceKey], waiting: Iterable[tuple[str, Sequence[Placed]]]
) -> list[str]:
    """Which waiting requests walk their chains again now that our machines at ``freed`` (one
    place per machine) ended and lifted the blocks there: ``waiting`` is (id, chain) of the
    WAITING requests, oldest first. Each freed machine wakes the oldest request not yet woken
    whose chain holds its very place (type and market included): one machine's room is worth
    one walk, not a herd that finds it taken and blocks the place again. The others wake as
    before, when their retry is due (the lifted blocks no longer hold them)."""
    left: dict[PlaceKey, int] = {}
    for key in freed:
        left[key] = left.get(key, 0) + 1
    out: list[str] = []
    for request_id, chain in waiting:
        if not left:
            break
        for step in chain:
            key = place_key(step)
            if left.get(key):
                left[key] -= 1
                if not left[key]:
                    del left[key]
                out.append(request_id)
                break
    return out


def _span(seconds: float) -> str:
    """``1800`` -> ``30m``, ``90`` -> ``90s``, ``7200`` -> ``2h``."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@functools.lru_cache(maxsize=4096)
def utc_clock(at: float) -> str:
    """A time (seconds since the epoch) as a reason line prints it, in UTC (remembered: a
    pool pass words the same few times into hundreds of waiting workloads' reasons)."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(at))


def looking_since(created_at: float, history: Iterable[Moved]) -> float:
    """When a request started looking for capacity: its last relaunch (a move from RUNNING
    or PREEMPTED back to PROVISIONING or PENDING), else its submission. ``max_wait`` counts
    from there, so a job that ran for a day and lost its machine gets its full wait again."""
    since = created_at
    for moved in history:
        if moved.from_state in _HAD_CAPACITY and moved.to_state in _LOOKING:
            since = moved.at
    return since


class Moved(Protocol):
    """A recorded transition (:class:`corral.shared.records.Transition`)."""

    @property
    def from_state(self) -> str | None: ...
    @property
    def to_state(self) -> str: ...
    @property
    def at(self) -> float: ...


_HAD_CAPACITY = frozenset({"RUNNING", "PREEMPTED"})
_LOOKING = frozenset({"PROVISIONING", "PENDING"})
