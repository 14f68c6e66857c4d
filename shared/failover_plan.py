"""Plan, then apply: the one decision of a direct request's walk down its failover chain.

:func:`plan_step` is pure: it takes a :class:`Snapshot` (the chain, the position walked from,
the scope to look in first, the blocks in force with their ends, the clock, and the request's
wait terms) and returns a typed :data:`Decision`:

- :class:`Attempt`: try this candidate of the chain;
- :class:`WaitUntil`: the chain is walked to its end; walk it again at ``at``;
- :class:`Fail`: the chain is walked to its end and the request waits no more.

Each carries the :class:`Escalate` steps taken on the way (a scope with nothing left to try
hands over to the wider one: the failed zone's region, its cloud, the rest of the chain) and
the blocks passed over, so an account (``corral why``) can say why. The runtime
(:mod:`corral.services.runtime.failover`) applies a decision to the request in one
compare-and-set; the simulator (:mod:`corral.shared.sim.direct`) applies it to its own flow.
Both call this function, so the walk is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.shared.blocking import Block, BlockIndex, Placed
from corral.shared.failover import WIDER, Within, first_free, scoped
from corral.shared.waiting import Backoff, WaitTerms, decide_wait, retry_rng, waits_on

# How an escalation names the scopes (the failed candidate's region, its cloud, any).
LOOKS_IN = {Within.REGION: "its region", Within.CLOUD: "its cloud", Within.ANY: "the chain"}

PassedOver = tuple[tuple[int, Block], ...]  # (chain position, the block that hid it)


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """What an exhausted chain may do: the task's terms, the backoff, and where the request's
    wait stands (``since``: when it started looking for capacity; ``retries``: walks made
    again since). ``seed``: the request's id (the jitter's draw, the same on a redelivery)."""

    terms: WaitTerms
    backoff: Backoff
    since: float
    retries: int
    seed: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one step of the walk decides from.

    ``after``: the chain position walked from (-1: the top of the chain); ``within``: the
    scope looked in first. ``blocks``: the blocks in force at ``now``, each with its end.
    ``wait``: None when an exhausted chain simply fails (no wait is planned). ``tried``: how
    many attempts were made (told in the verdict when given). ``index``: the same blocks
    arranged for look-ups, when the caller keeps them between steps (the simulator does,
    until they change); None: arranged here."""

    chain: Sequence[Placed]
    after: int
    within: Within
    blocks: Sequence[tuple[Block, float]]
    now: float
    wait: WaitPolicy | None = None
    tried: int | None = None
    index: BlockIndex | None = None


@dataclass(frozen=True, slots=True)
class Escalate:
    """Nothing left to try within ``scope`` of the failed candidate: the wider scope looks."""

    scope: Within
    reason: str


@dataclass(frozen=True, slots=True)
class Attempt:
    """Try chain position ``index``."""

    index: int
    passed_over: PassedOver = ()
    escalated: tuple[Escalate, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        return (*(e.reason for e in self.escalated), f"try candidate {self.index + 1}")


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Every candidate failed or is blocked: wait, and walk the chain again at ``at``.

    ``because``: ``backoff``, ``block_expiry`` or ``deadline``; ``deadline``: when the wait
    ends for good (None: never). ``waits_on``: per blocked candidate, the block that frees
    it last, with its end. ``verdict`` and ``reason``: what the request's account says.
    ``since`` and ``retries``: the wait it continues (as in the snapshot's policy)."""

    at: float
    because: str
    deadline: float | None
    verdict: str
    reason: str
    since: float
    retries: int
    waits_on: tuple[tuple[Block, float], ...] = ()
    passed_over: PassedOver = ()
    escalated: tuple[Escalate, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        return (*(e.reason for e in self.escalated), self.verdict, self.reason)


@dataclass(frozen=True, slots=True)
class Fail:
    """Every candidate failed or is blocked (``verdict``), and the request waits no more:
    ``reason`` says why (it asked to fail fast, or its ``max_wait`` passed; None when no wait
    was planned)."""

    verdict: str
    reason: str | None = None
    passed_over: PassedOver = ()
    escalated: tuple[Escalate, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        told = (self.verdict,) if self.reason is None else (self.verdict, self.reason)
        return (*(e.reason for e in self.escalated), *told)

    @property
    def text(self) -> str:
        """The request's error: the verdict and why it waits no more."""
        return self.verdict if self.reason is None else f"{self.verdict}; {self.reason}"


Decision = Attempt | WaitUntil | Fail


def plan_step(snap: Snapshot) -> Decision:
    """The next step of a request's walk (see the module docstring): the first candidate
    after ``snap.after`` that no block covers, looked for within ``snap.within`` of the
    failed candidate and then ever wider; if none is left, a wait or a failure as
    :func:`corral.shared.waiting.decide_wait` rules."""
    scope = snap.within
    escalated: list[Escalate] = []
    # One walk: every wider step finds the same first free candidate, only further out.
    blocks = snap.index if snap.index is not None else [b for b, _ in snap.blocks]
    free = first_free(snap.chain, snap.after, blocks)
    found = scoped(snap.chain, snap.after, free, scope)
    while found.action == "escalate":
        wider = WIDER[scope]
        told = f"nothing left to try in {LOOKS_IN[scope]}: look in {LOOKS_IN[wider]}"
        escalated.append(Escalate(wider, told))
        scope = wider
        found = scoped(snap.chain, snap.after, free, scope)
    up = tuple(escalated)
    if found.index is not None:
        return Attempt(found.index, found.passed_over, up)
    verdict = f"all {len(snap.chain)} candidates failed or are blocked"
    if snap.tried is not None:
        verdict += f" ({snap.tried} tried)"
    policy = snap.wait
    if policy is None:
        return Fail(verdict, None, found.passed_over, up)
    waited = waits_on(snap.chain, snap.blocks)
    decided = decide_wait(
        now=snap.now,
        since=policy.since,
        retries=policy.retries,
        retry_until_up=policy.terms.retry_until_up,
        max_wait_s=policy.terms.max_wait_s,
        expiries=[until for _, until in waited],
        backoff=policy.backoff,
        rng=retry_rng(policy.seed, policy.retries),
        candidates=len(snap.chain),
    )
    if decided.action == "fail" or decided.retry_at is None:
        return Fail(verdict, decided.reason, found.passed_over, up)
    return WaitUntil(
        decided.retry_at,
        decided.because,
        decided.deadline,
        verdict,
        decided.reason,
        policy.since,
        policy.retries,
        tuple(waited),
        found.passed_over,
        up,
    )


def told(decision: Decision) -> dict[str, object]:
    """A decision as ``corral why`` shows it: its kind, its candidate or its time, and its
    reasons in order."""
    match decision:
        case Attempt():
            return {"decision": "attempt", "candidate": decision.index,
                    "reasons": list(decision.reasons)}  # fmt: skip
        case WaitUntil():
            return {"decision": "wait", "until": decision.at, "because": decision.because,
                    "reasons": list(decision.reasons)}  # fmt: skip
        case Fail():
            return {"decision": "fail", "reasons": list(decision.reasons)}
