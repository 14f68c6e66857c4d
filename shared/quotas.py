"""Per-project quotas: how many GPUs a project's requests may hold at once, and how many dollars
its machines may cost in a period. Checked once, when a request is admitted.

The rule is a pure function of the project's quota, its usage (computed by the caller from the
store) and what the request asks; it says which quota refuses and with which numbers, so
``corral why`` can name it. As a Kubernetes ResourceQuota does, a request over quota is refused,
not queued: it ends FAILED with the refusal recorded, and the user submits again once room is
free (or an admin raises the quota).

Which requests count (:func:`counts_against`): a request of the project that has not ended and
was either created before the one being admitted, or admitted already. Two admissions racing
therefore never both pass over a quota: the later-created of the two counts the earlier one
whatever its state, so the sum stays within the quota at the later one's check.

Dollars: the period windows start at multiples of ``period_s`` since the epoch, as the dollar
budgets' do (:mod:`corral.shared.budgets`); a machine is billed from its launch until it ended
(or now), at its price per hour, clipped to the window (:func:`spent_usd`). A project whose
period's money is spent refuses new requests until the next window; running work is never
stopped for a quota.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from .config.base import StrictModel
from .config.task import Task

DEFAULT_PERIOD_S = 86400.0  # a day, as the budgets' default period
MIN_PERIOD_S = 60.0  # shorter periods mean nothing for machines billed by the second
MAX_PERIOD_S = 366 * 86400.0
MAX_GPUS = 1_000_000
MAX_USD = 1e12

QuotaName = Literal["gpus", "usd_per_period"]


class Quota(StrictModel):
    """A project's limits; a limit left None is no limit."""

    gpus: int | None = Field(None, ge=0, le=MAX_GPUS)  # held at once, every node counted
    usd_per_period: float | None = Field(None, ge=0, le=MAX_USD)  # machine cost each period
    period_s: float = Field(DEFAULT_PERIOD_S, ge=MIN_PERIOD_S, le=MAX_PERIOD_S)

    def is_empty(self) -> bool:
        return self.gpus is None and self.usd_per_period is None


@dataclass(frozen=True)
class Usage:
    """What a project holds and spent, as the caller read it at ``now``."""

    gpus_in_use: int  # summed over the requests that count (:func:`counts_against`)
    spent_usd: float  # machine cost within the current period's window
    period_start: float  # the window's start (:func:`period_start`)
    now: float  # when it was read


@dataclass(frozen=True)
class QuotaRefusal:
    """The quota that refuses a request, and the numbers behind it."""

    project: str
    quota: QuotaName
    limit: float
    in_use: float  # GPUs held, or dollars spent this period
    asked: float  # GPUs asked (0 for the dollar quota: any new work is refused)
    reason: str  # one line naming the project, the quota and the numbers

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "quota": self.quota,
            "limit": self.limit,
            "in_use": self.in_use,
            "asked": self.asked,
            "reason": self.reason,
        }


def period_start(now: float, period_s: float) -> float:
    """The start of the window holding ``now`` (windows start at multiples of ``period_s``)."""
    return math.floor(now / period_s) * period_s


def gpus_asked(task: Task) -> int:
    """GPUs a task holds at once: the largest accelerator count any of its candidates asks per
    node, times its nodes (0 for a task without accelerators). The largest, because which
    candidate the chain lands on is not known at admission."""
    per_node = 0
    for candidate in task.resources.candidates():
        request = candidate.accelerator_request()
        if request is not None:
            per_node = max(per_node, max(o.count for o in request.options))
    return per_node * task.num_nodes


def counts_against(
    other_created_at: float, other_admitted: bool, created_at: float, other_id: str, own_id: str
) -> bool:
    """Whether a live request of the project counts against the one being admitted (created
    at ``created_at``): one created before it, or one admitted already (see the module's
    docstring); ties in creation time are broken by id, so two requests never count each
    other out."""
    if other_id == own_id:
        return False
    earlier = (other_created_at, other_id) < (created_at, own_id)
    return earlier or other_admitted


def spent_usd(
    bills: Iterable[tuple[float, float | None, float | None]], window_start: float, now: float
) -> float:
    """Machine cost within ``[window_start, now]``: each bill is (launched at, ended at or None
    while it runs, price in USD per hour or None when unknown: counted as 0)."""
    total = 0.0
    for started, ended, price in bills:
        if not price:
            continue
        lo = max(started, window_start)
        hi = min(now if ended is None else ended, now)
        if hi > lo:
            total += price * (hi - lo) / 3600.0
    return total


def check(project: str, quota: Quota, usage: Usage, asked_gpus: int) -> QuotaRefusal | None:
    """The refusal of a request asking ``asked_gpus`` in ``project``, or None when every
    quota allows it. The dollar quota is checked first: a spent period refuses any request."""
    spend_limit = quota.usd_per_period
    if spend_limit is not None and usage.spent_usd >= spend_limit:
        hours = quota.period_s / 3600
        left_h = (usage.period_start + quota.period_s - usage.now) / 3600
        return QuotaRefusal(
            project=project,
            quota="usd_per_period",
            limit=spend_limit,
            in_use=round(usage.spent_usd, 6),
            asked=0,
            reason=(
                f"project {project!r} is over its quota usd_per_period: {usage.spent_usd:.2f} "
                f"of {spend_limit:.2f} USD spent in this {hours:g} h period"
                + (f" (the next starts in {left_h:.1f} h)" if left_h > 0 else "")
            ),
        )
    limit = quota.gpus
    if limit is not None and asked_gpus > 0 and usage.gpus_in_use + asked_gpus > limit:
        return QuotaRefusal(
            project=project,
            quota="gpus",
            limit=limit,
            in_use=usage.gpus_in_use,
            asked=asked_gpus,
            reason=(
                f"project {project!r} is over its quota gpus: {usage.gpus_in_use} in use + "
                f"{asked_gpus} asked > {limit} allowed at once"
            ),
        )
    return None
