"""Dollar budgets for pooled work: a cap on the spend rate (USD per hour) and on the money spent
in a period, per pool or per workload label, honoured by the pool schedulers.

A budget file::

    budgets:
      - name: llm-team
        selector: project=llm          # workload labels, as partition rules write selectors
        usd_per_hour: 120              # the machines its running work holds, priced per hour
        usd_per_period: 1500           # spent in each period ...
        period: 1d                     # ... of this length (windows start at multiples of it)
      - name: det-compute
        pool: compute                  # a machine pool, a Determined resource pool or master
        usd_per_hour: 40

How it is honoured (:class:`Gate`): a pass's placements are taken in the scheduler's own order;
those that would lift a budget's rate over ``usd_per_hour``, or that start while the period's
money is spent, are held back (``over_budget``, the reason naming the budget) and the pass is
computed again without them, so the room they would have taken goes to the next in line. Running
work is never stopped for a budget. Spend accrues from the rate of the machines held
(:func:`accrue`), kept in each pool's ledger: a label budget is counted per pool.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, field_validator, model_validator

from .config import DurationS
from .config.base import StrictModel
from .configio import Document, PathKey, load_file, validate_doc
from .scheduling.selectors import SelectorSpec, compile_selector, describe

DEFAULT_PERIOD_S = 86400.0


class Budget(StrictModel):
    """One budget: whose work (``pool`` and/or ``selector``) and how much (per hour, per
    period)."""

    name: str = Field(min_length=1)
    pool: str | None = None
    selector: str | dict[str, str] | None = None
    usd_per_hour: float | None = Field(None, gt=0)
    usd_per_period: float | None = Field(None, gt=0)
    period_s: DurationS = Field(DEFAULT_PERIOD_S, alias="period", gt=0)

    @field_validator("selector")
    @classmethod
    def _readable(cls, value: SelectorSpec | None) -> SelectorSpec | None:
        if value is not None:
            compile_selector(value)  # ValueError names the selector
        return value

    @model_validator(mode="after")
    def _complete(self) -> Budget:
        if self.pool is None and self.selector is None:
            raise ValueError("a budget needs a pool, a selector, or both")
        if self.usd_per_hour is None and self.usd_per_period is None:
            raise ValueError("a budget needs usd_per_hour, usd_per_period, or both")
        return self

    def scope(self) -> str:
        """``pool train-a, project=llm``: whose work it caps, for messages."""
        parts = [f"pool {self.pool}"] if self.pool else []
        if self.selector is not None:
            parts.append(describe(self.selector))
        return ", ".join(parts)

    def covers(self, pools: Iterable[str], labels: Mapping[str, str]) -> bool:
        """Whether work in one of ``pools`` (its pool and the document holding it) with these
        labels counts against this budget."""
        if self.pool is not None and self.pool not in pools:
            return False
        return self.selector is None or compile_selector(self.selector).matches(labels)


class BudgetsFile(StrictModel):
    """A budgets file: a list of budgets with distinct names."""

    budgets: list[Budget] = Field(default_factory=list)

    @field_validator("budgets")
    @classmethod
    def _distinct(cls, value: list[Budget]) -> list[Budget]:
        names = [b.name for b in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"budget name(s) {', '.join(twice)} given more than once")
        return value


def load_budgets(path: str | Path) -> tuple[Budget, ...]:
    """Read a budgets file; a mistake is a :class:`ConfigError` naming file, line and field."""
    doc = load_file(path)
    if doc.data is None:
        return ()
    if not isinstance(doc.data, Mapping):
        raise doc.error((), "expected a mapping with a budgets list")
    check_names(doc, ("budgets",))
    return tuple(validate_doc(BudgetsFile, doc).budgets)


def check_names(doc: Document, path: PathKey) -> None:
    """Budget names given twice in the list at ``path`` of ``doc`` (a budgets file's, or one
    given inline in another file): a :class:`ConfigError` at the second one's line."""
    items: object = doc.data
    for part in path:
        items = items.get(part) if isinstance(items, Mapping) else None
    if not isinstance(items, list):
        return  # not a list: validation says so
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in first:
            where = f"{'.'.join(str(p) for p in path)}[{first[name]}]"
            raise doc.error(
                (*path, index, "name"),
                f"budget name {name!r} is given more than once (first at {where}); "
                "names must be distinct, as corral why and the ledgers name budgets by them",
            )
        first[name] = index


class BudgetSpend(BaseModel):
    """What one budget has spent in its current period, as the pool's ledger keeps it."""

    period_start: float
    spent_usd: float = 0.0
    rate_usd_per_hour: float = 0.0  # the rate since ``updated_at``
    updated_at: float


def accrue(
    spend: Mapping[str, BudgetSpend],
    budgets: Sequence[Budget],
    rates: Mapping[str, float],
    now: float,
) -> dict[str, BudgetSpend]:
    """Each budget's spend brought up to ``now`` at the rate it had, then given its new rate
    (``rates``, USD per hour). A period that ended starts afresh with what was spent since."""
    out: dict[str, BudgetSpend] = {}
    for budget in budgets:
        start = math.floor(now / budget.period_s) * budget.period_s
        old = spend.get(budget.name)
        spent = 0.0
        if old is not None:
            since = max(old.updated_at, start)  # money of an ended period is not carried over
            spent = old.spent_usd if old.period_start == start else 0.0
            spent += old.rate_usd_per_hour * max(0.0, now - since) / 3600.0
        out[budget.name] = BudgetSpend(
            period_start=start,
            spent_usd=spent,
            rate_usd_per_hour=rates.get(budget.name, 0.0),
            updated_at=now,
        )
    return out


@dataclass(frozen=True)
class Refusal:
    """A budget that holds work back, and why (the text names it)."""

    budget: str
    reason: str


@dataclass
class Gate:
    """The budgets over one pass: spend as accrued, and the rate each placement adds."""

    budgets: Sequence[Budget]
    spend: Mapping[str, BudgetSpend]
    added: dict[str, float] = field(default_factory=dict)  # rate booked by this pass

    def admit(self, pools: Sequence[str], labels: Mapping[str, str], rate: float) -> Refusal | None:
        """Book ``rate`` (USD per hour) for work in ``pools`` with ``labels`` if every budget
        covering it allows; else the refusal (naming the budget) and nothing is booked."""
        mine = [b for b in self.budgets if b.covers(pools, labels)]
        for budget in mine:
            why = self._refusal(budget, rate)
            if why is not None:
                return Refusal(budget.name, why)
        for budget in mine:
            self.added[budget.name] = self.added.get(budget.name, 0.0) + rate
        return None

    def _refusal(self, budget: Budget, rate: float) -> str | None:
        spend = self.spend.get(budget.name)
        in_use = (spend.rate_usd_per_hour if spend else 0.0) + self.added.get(budget.name, 0.0)
        spent = spend.spent_usd if spend else 0.0
        if budget.usd_per_period is not None and spent >= budget.usd_per_period:
            left_s = budget.period_s - ((spend.updated_at if spend else 0.0) % budget.period_s)
            return (
                f"budget {budget.name!r} ({budget.scope()}): {spent:.2f} of "
                f"{budget.usd_per_period:.2f} USD spent this period; it waits for the next "
                f"period (in {left_s / 3600:.1f} h)"
            )
        if budget.usd_per_hour is not None and rate > 0 and in_use + rate > budget.usd_per_hour:
            return (
                f"budget {budget.name!r} ({budget.scope()}): {in_use:.2f} of "
                f"{budget.usd_per_hour:.2f} USD/h in use; placing it would add {rate:.2f} USD/h"
            )
        return None


def budget_rates(
    budgets: Sequence[Budget], holders: Iterable[tuple[Sequence[str], Mapping[str, str], float]]
) -> dict[str, float]:
    """Each budget's rate (USD per hour) from the work running now: ``(pools, labels, rate)``
    per holder."""
    out = {b.name: 0.0 for b in budgets}
    for pools, labels, rate in holders:
        for budget in budgets:
            if budget.covers(pools, labels):
                out[budget.name] += rate
    return out


def for_pools(budgets: Sequence[Budget], names: Iterable[str]) -> tuple[Budget, ...]:
    """The budgets that can cover work of these pools (the others need no accounting here)."""
    known = set(names)
    return tuple(b for b in budgets if b.pool is None or b.pool in known)
