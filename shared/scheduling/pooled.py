"""What a pool's machine and a Determined pool's agent have in common: the assignment of a
machine of the machine table (the one record of where the cloud put it, its id there and its
state: ``Instance``, owned by the pool) to a pool, pointing at it by Corral's machine id; when
it last went idle; and a status that moves only along the one machine lifecycle
(:data:`~corral.shared.lifecycle.MACHINE_TRANSITIONS`), which the pools' words name
(:data:`~corral.shared.lifecycle.POOL_WORDS`).

Ledgers stored before the table kept the cloud's id and the place in each machine's entry:
:func:`split_older_entries` takes them out of such a ledger's JSON, for the store to move them
into the table as it reads it; a ledger's entries never carry them again."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel

from ..lifecycle import MACHINE_TRANSITIONS, POOL_WORDS, IllegalTransition, is_transition

# The fields an older ledger kept in each machine's entry (now the table's).
LEGACY_FIELDS = ("provider_id", "cloud", "region", "zone", "instance_type", "market")


class PooledMachine(BaseModel):
    """The base of :class:`~.ledger.PoolMachine` and :class:`~.det_ledger.DetAgent`."""

    KIND: ClassVar[str]  # "machine" or "agent", for errors

    status: StrEnum
    created_at: float
    idle_since: float | None = None

    @property
    def key(self) -> str:
        """The machine's id in its ledger (and in the machine table)."""
        raise NotImplementedError

    def move(self, to: StrEnum) -> bool:
        """Move to ``to`` (a pool's word) along the machine lifecycle: True if it moved, False
        if it was there already; :class:`~corral.shared.lifecycle.IllegalTransition`, naming
        the words, for a move the table refuses."""
        if self.status == to:
            return False
        if not is_transition(MACHINE_TRANSITIONS, POOL_WORDS[self.status], POOL_WORDS[to]):
            raise IllegalTransition(self.key, self.status.value, to.value, self.KIND)
        self.status = to
        return True

    def pool_type(self) -> str | None:
        """A machine pool's machine type; None for a Determined agent."""
        return None


def split_older_entries(entries: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Take the cloud id and place out of the entries of a ledger stored before the machine
    table (``entries``: its ``machines`` or ``agents``, as parsed JSON; changed in place), by
    machine id: only the entries that had a cloud id."""
    older: dict[str, dict[str, Any]] = {}
    for machine_id, entry in entries.items():
        if isinstance(entry, dict) and any(k in entry for k in LEGACY_FIELDS):
            kept = {k: entry.pop(k) for k in LEGACY_FIELDS if k in entry}
            if kept.get("provider_id"):
                older[machine_id] = kept
    return older
