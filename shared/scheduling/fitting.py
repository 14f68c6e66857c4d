"""Putting a Determined task on agents: best or worst fit, and whether a pool can ever fit it.

Determined's fitting, case for case (``agentrm/fitting.go``, ``fitting_methods.go``):

- **One agent first.** The agents with enough free slots (and, for a zero-slot task, an
  auxiliary-container place left), not among the task's ``blocked_agents``, are scored and the
  best score wins; ties go to the lower agent id (Determined hashes task and agent ids first:
  a pass of ours is repeatable and readable instead).
- **Scores.** ``best`` packs: the agent with the fewest free slots. ``worst`` spreads: the
  agent with the largest *fraction* of its slots free (so a half-free 2-slot agent beats a
  40 %-free 5-slot one). A zero-slot task on an agent that runs no slot task is scored by its
  auxiliary places instead: ``best`` picks the agent with the fewest places left (packing
  auxiliary work together), ``worst`` the largest fraction left.
- **Then whole agents.** A task of more than one slot that no single agent can take now goes
  on idle agents (no slot in use), all of one size, largest size first, its slots a multiple
  of that size (distributed training). With ``allow_heterogeneous_fits`` it may then mix
  sizes, taking idle agents from the largest size down until its slots are covered exactly.
- Auxiliary places per agent: the agent's own limit, else the pool's
  ``max_aux_containers_per_agent``, else Determined's default of 100.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from .model import Agent, DetPoolSnapshot, SlotAllocation

DEFAULT_AUX_PER_AGENT = 100  # Determined's max_aux_containers_per_agent default


@dataclass(slots=True)
class AgentBook:
    """One agent during a pass: its free slots and auxiliary containers."""

    agent_id: str
    slots: int
    free: int
    aux: int = 0
    tasks: list[str] = field(default_factory=list)
    max_aux: int = DEFAULT_AUX_PER_AGENT

    @property
    def used(self) -> int:
        return self.slots - self.free


def agent_books(agents: Iterable[Agent], pool_max_aux: int | None = None) -> dict[str, AgentBook]:
    books = {}
    for a in agents:
        cap = a.max_aux_containers
        if cap is None:
            cap = pool_max_aux if pool_max_aux is not None else DEFAULT_AUX_PER_AGENT
        books[a.agent_id] = AgentBook(a.agent_id, a.slots, a.slots, max_aux=cap)
    return books


def book_allocations(
    books: dict[str, AgentBook], task_id: str, allocations: Iterable[SlotAllocation], sign: int = 1
) -> None:
    """Take (``sign=1``) or give back (``-1``) a task's slots on its agents."""
    for allocation in allocations:
        book = books.get(allocation.agent_id)
        if book is None:
            continue  # an agent that is gone: nothing to count
        book.free -= sign * allocation.slots
        if allocation.slots == 0:
            book.aux += sign
        if sign > 0:
            book.tasks.append(task_id)
        elif task_id in book.tasks:
            book.tasks.remove(task_id)


def score(book: AgentBook, slots: int, policy: str) -> Fraction:
    """How good an agent is for a task of ``slots`` (higher is better); see the docstring."""
    if book.used or slots:
        if policy == "best":
            return Fraction(1, 1 + book.free)
        return Fraction(book.free, book.slots) if book.slots else Fraction(0)
    if book.max_aux <= 0:
        return Fraction(0)
    left = book.max_aux - book.aux
    return Fraction(1, 1 + left) if policy == "best" else Fraction(left, book.max_aux)


def find_fit(
    books: dict[str, AgentBook],
    slots: int,
    policy: str,
    blocked: frozenset[str] | tuple[str, ...] = (),
    heterogeneous: bool = False,
) -> tuple[SlotAllocation, ...] | None:
    """Where a task of ``slots`` would go now, or None (see the module docstring)."""
    viable = [
        b
        for b in books.values()
        if b.free >= slots and b.agent_id not in blocked and (slots > 0 or b.aux < b.max_aux)
    ]
    if viable:
        chosen = min(viable, key=lambda b: (-score(b, slots, policy), b.agent_id))
        return (SlotAllocation(agent_id=chosen.agent_id, slots=slots),)
    if slots <= 1:
        return None
    idle = [b for b in books.values() if b.used == 0 and b.free > 0 and b.agent_id not in blocked]
    return _whole_agents(idle, slots, policy, heterogeneous)


def _whole_agents(
    idle: Sequence[AgentBook], slots: int, policy: str, heterogeneous: bool
) -> tuple[SlotAllocation, ...] | None:
    by_size: dict[int, list[AgentBook]] = {}
    for b in idle:
        by_size.setdefault(b.free, []).append(b)
    sizes = sorted(by_size, reverse=True)
    for size in sizes:
        group = by_size[size]
        if slots % size or len(group) * size < slots:
            continue
        ranked = sorted(group, key=lambda b: (-score(b, size, policy), b.agent_id))
        return tuple(
            SlotAllocation(agent_id=b.agent_id, slots=size) for b in ranked[: slots // size]
        )
    if not heterogeneous:
        return None
    needed = slots
    out: list[SlotAllocation] = []
    for size in sizes:
        take = min(needed // size, len(by_size[size]))
        if take == 0:
            continue
        ranked = sorted(by_size[size], key=lambda b: (-score(b, size, policy), b.agent_id))
        out += [SlotAllocation(agent_id=b.agent_id, slots=size) for b in ranked[:take]]
        needed -= take * size
        if needed == 0:
            return tuple(out)
    return None


@dataclass(frozen=True, slots=True)
class FitVerdict:
    """Whether a pool can ever run a task of some size, and why not."""

    ok: bool
    reason: str


def _agent_sizes(pool: DetPoolSnapshot) -> Counter[int] | None:
    """How many agents of each slot count the pool can ever have; None when unknown (a
    static pool whose agents have not registered yet)."""
    if pool.max_agents is not None:  # a provider: its instances are all alike
        per_agent = pool.slots_per_agent
        if per_agent is None and pool.agents:
            per_agent = max(a.slots for a in pool.agents)
        return None if per_agent is None else Counter({per_agent: pool.max_agents})
    if not pool.agents:
        return None
    return Counter(a.slots for a in pool.agents)


def can_ever_fit(pool: DetPoolSnapshot, slots: int) -> FitVerdict:
    """Whether any state of the pool could run a task of ``slots``: zero-slot tasks always;
    otherwise one agent with that many slots, or whole agents of one size whose slots add up
    to exactly that (with ``allow_heterogeneous_fits``, of sizes from the largest down). A
    clear reason either way (refuse at submit, never pend forever)."""
    name = pool.pool
    if slots == 0:
        return FitVerdict(True, f"a zero-slot task runs on any agent of {name}")
    sizes = _agent_sizes(pool)
    if sizes is None:
        return FitVerdict(True, f"{name} is a static pool with no agents yet: cannot tell")
    usable = {size: count for size, count in sizes.items() if size > 0 and count > 0}
    if not usable:
        return FitVerdict(
            False,
            f"pool {name!r} has no slots (its agents are CPU-only or it may have none): a task "
            f"asking for {slots} slot(s) would never run there; send it to a pool with GPU "
            "agents, or ask for 0 slots",
        )
    if any(size >= slots for size in usable):
        return FitVerdict(True, f"one agent of {name} has {max(usable)} slots")
    for size, count in usable.items():
        if slots % size == 0 and slots // size <= count:
            return FitVerdict(True, f"{slots // size} whole agents of {size} slots in {name}")
    if pool.scheduler.allow_heterogeneous_fits:
        needed = slots
        for size in sorted(usable, reverse=True):
            needed -= min(needed // size, usable[size]) * size
        if needed == 0:
            return FitVerdict(True, f"whole agents of mixed sizes in {name}")
    shape = ", ".join(f"up to {count} agent(s) of {size} slots" for size, count in usable.items())
    return FitVerdict(
        False,
        f"pool {name!r} can never give {slots} slots: it has {shape}; a task fits with at most "
        "one agent's slots, or a multiple of an agent's slots over that many whole agents",
    )
