"""What a pool's machine and a Determined pool's agent have in common: where the cloud put it,
when it last went idle, and a status that moves only along its lifecycle's table
(:data:`~corral.shared.lifecycle.MACHINE_TRANSITIONS`,
:data:`~corral.shared.lifecycle.AGENT_TRANSITIONS`)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel

from ..lifecycle import check_move

# Where the cloud put a machine, as the provider reports it once the machine is up.
PLACE_FIELDS = ("provider_id", "cloud", "region", "zone", "instance_type", "market")


class PooledMachine(BaseModel):
    """The base of :class:`~.ledger.PoolMachine` and :class:`~.det_ledger.DetAgent`."""

    KIND: ClassVar[str]  # "machine" or "agent", for errors
    TRANSITIONS: ClassVar[Mapping[Any, frozenset[Any]]]

    status: StrEnum
    created_at: float
    idle_since: float | None = None
    provider_id: str | None = None  # the cloud's id, once up
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
        """Move to ``to`` along the table: True if it moved, False if it was there already;
        :class:`~corral.shared.lifecycle.IllegalTransition` for a move the table refuses."""
        if not check_move(self.TRANSITIONS, self.key, self.status, to, self.KIND):
            return False
        self.status = to
        return True

    def place(self, where: Mapping[str, Any]) -> None:
        """Record where the cloud put it (only the fields of :data:`PLACE_FIELDS`)."""
        for name, value in where.items():
            if name not in PLACE_FIELDS:
                raise ValueError(f"{self.KIND} {self.key}: {name!r} is not a place field")
            setattr(self, name, value)
