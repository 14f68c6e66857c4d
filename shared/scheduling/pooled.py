"""What a pool's machine and a Determined pool's agent have in common: the assignment of a
machine of the machine table (the one record of where the cloud put it, its id there and its
state: ``Instance``, owned by the pool) to a pool, pointing at it by Corral's machine id; when
it last went idle; and a status that moves only along the one machine lifecycle
(:data:`~corral.shared.lifecycle.MACHINE_TRANSITIONS`), which the pools' words name
(:data:`~corral.shared.lifecycle.POOL_WORDS`).

Ledgers stored before the table kept the cloud's id and the place in each machine's entry:
those fields are read into :attr:`PooledMachine.legacy` (never written back), for the store
to move them into the table on read."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, PrivateAttr, model_validator

from ..lifecycle import MACHINE_TRANSITIONS, POOL_WORDS, IllegalTransition, is_transition

# The fields an older ledger kept in each machine's entry (now the table's).
LEGACY_FIELDS = ("provider_id", "cloud", "region", "zone", "instance_type", "market")


class PooledMachine(BaseModel):
    """The base of :class:`~.ledger.PoolMachine` and :class:`~.det_ledger.DetAgent`."""

    KIND: ClassVar[str]  # "machine" or "agent", for errors

    status: StrEnum
    created_at: float
    idle_since: float | None = None
    _legacy: dict[str, Any] | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _older_entry(cls, data: Any, handler: Any) -> Any:
        """An entry stored before the table: its cloud id and place kept aside (``legacy``)."""
        if not isinstance(data, dict) or not any(k in data for k in LEGACY_FIELDS):
            return handler(data)
        kept = {k: data[k] for k in LEGACY_FIELDS if k in data}
        made = handler({k: v for k, v in data.items() if k not in LEGACY_FIELDS})
        if kept.get("provider_id"):
            made._legacy = kept
        return made

    @property
    def legacy(self) -> dict[str, Any] | None:
        """The cloud id and place an older ledger stored in this entry (None: none, or a
        machine that was not up)."""
        return self._legacy

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
