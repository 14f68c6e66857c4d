"""Putting a Determined task on agents: best or worst fit, and whether a pool can ever fit it.

- A task of ``slots`` no larger than an agent goes on one agent with that many free slots:
  ``best`` picks the agent it leaves with the fewest free slots (packing), ``worst`` the one it
  leaves with the most (spreading). Ties go to the lower agent id, so a pass is repeatable.
- A task larger than any one agent takes whole idle agents of one size, its slots a multiple
  of that size (as Determined places distributed training).
- A zero-slot (auxiliary) task takes no slot: it goes to the agent with the fewest auxiliary
  containers, up to ``max_aux_containers_per_agent``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .model import Agent, DetPoolSnapshot, SlotAllocation


@dataclass(slots=True)
class AgentBook:
    """One agent during a pass: its free slots and auxiliary containers."""

    agent_id: str
    slots: int
    free: int
    aux: int = 0
    tasks: list[str] = field(default_factory=list)


def agent_books(agents: Iterable[Agent]) -> dict[str, AgentBook]:
    return {a.agent_id: AgentBook(a.agent_id, a.slots, a.slots) for a in agents}


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


def find_fit(
    books: dict[str, AgentBook], slots: int, policy: str, max_aux: int | None = None
) -> tuple[SlotAllocation, ...] | None:
    """Where a task of ``slots`` would go now, or None (see the module docstring)."""
    agents = sorted(books.values(), key=lambda b: b.agent_id)
    if slots == 0:
        room = [b for b in agents if max_aux is None or b.aux < max_aux]
        if not room:
            return None
        chosen = min(room, key=lambda b: (b.aux, b.agent_id))
        return (SlotAllocation(agent_id=chosen.agent_id, slots=0),)
    if any(b.slots >= slots for b in agents):
        fits = [b for b in agents if b.free >= slots]
        if not fits:
            return None
        sign = 1 if policy == "best" else -1
        chosen = min(fits, key=lambda b: (sign * (b.free - slots), b.agent_id))
        return (SlotAllocation(agent_id=chosen.agent_id, slots=slots),)
    return _whole_agents(agents, slots)


def _whole_agents(agents: Sequence[AgentBook], slots: int) -> tuple[SlotAllocation, ...] | None:
    for size in sorted({b.slots for b in agents if b.slots > 0}, reverse=True):
        if slots % size:
            continue
        idle = [b for b in agents if b.slots == size and b.free == size]
        if len(idle) >= slots // size:
            return tuple(
                SlotAllocation(agent_id=b.agent_id, slots=size) for b in idle[: slots // size]
            )
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
    to exactly that. A clear reason either way (refuse at submit, never pend forever)."""
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
    shape = ", ".join(f"up to {count} agent(s) of {size} slots" for size, count in usable.items())
    return FitVerdict(
        False,
        f"pool {name!r} can never give {slots} slots: it has {shape}; a task fits with at most "
        "one agent's slots, or a multiple of an agent's slots over that many whole agents",
    )
