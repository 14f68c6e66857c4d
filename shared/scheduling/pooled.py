"""What a pool's machine and a Determined pool's agent have in common: where the cloud put it
(its id there and its :class:`~corral.shared.placement.Placement`, both unknown until it is
up), when it last went idle, and a status that moves only along the one machine lifecycle
(:data:`~corral.shared.lifecycle.MACHINE_TRANSITIONS`), which the pools' words name
(:data:`~corral.shared.lifecycle.POOL_WORDS`)."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel

from ..lifecycle import MACHINE_TRANSITIONS, POOL_WORDS, IllegalTransition, is_transition
from ..placement import FIELDS, Placement


class PooledMachine(BaseModel):
    """The base of :class:`~.ledger.PoolMachine` and :class:`~.det_ledger.DetAgent`."""

    KIND: ClassVar[str]  # "machine" or "agent", for errors

    status: StrEnum
    created_at: float
    idle_since: float | None = None
    provider_id: str | None = None  # the cloud's id, once up
    # The placement's fields, flat in the stored JSON; each None until the machine is up.
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    market: str | None = None

    @property
    def key(self) -> str:
        """The machine's id in its ledger."""
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

    def settle(self, provider_id: str, at: Placement | None = None) -> None:
        """Record where the cloud put it: its id there and, when known, its placement."""
        self.provider_id = provider_id
        if at is not None:
            for name, value in at.fields().items():
                setattr(self, name, value)

    def pool_type(self) -> str | None:
        """A machine pool's machine type; None for a Determined agent."""
        return None

    @property
    def held_at(self) -> Placement | None:
        """Where the cloud holds it, for the work handed to it: None until it is up (no id
        there yet); a part its cloud left out is empty (its type: the pool's machine type),
        its market on demand."""
        if not self.provider_id or not self.cloud:
            return None
        return Placement(
            self.cloud,
            self.region or "",
            self.zone or "",
            self.instance_type or self.pool_type() or "",
            self.market or "on_demand",
        )

    @property
    def place(self) -> Placement | None:
        """Where the cloud put it; None until it is up (or while a field is unknown)."""
        values = [getattr(self, name) for name in FIELDS]
        if any(v is None for v in values):
            return None
        return Placement(*values)
