"""Registered pools in Redis: the files users applied, and each machine pool's ledger.

Key layout (``P`` is the prefix)::

    P:pool:<name>          hash {version, json}: a PoolRecord (the file as applied)
    P:pools                set of registered names
    P:pool-ledger:<name>   hash {version, json}: the pool's run-time state
                           (corral.shared.scheduling.ledger.PoolLedger)
    P:pool-ledgers         set of ledger names
    P:det-ledger:<name>    hash {version, json}: a master config's run-time state
                           (corral.shared.scheduling.det_ledger.DetLedger)

A Determined master config is registered like a pool (kind ``master_config``); one at a time.
Every write is a compare-and-set on the document's version (:mod:`corral.services.state.docstore`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from redis import Redis

from corral.services.state.docstore import DocStore
from corral.services.state.machines import MachineTable
from corral.shared.records import OwnerKind
from corral.shared.scheduling.det_ledger import DetLedger
from corral.shared.scheduling.ledger import PoolLedger
from corral.shared.scheduling.pooled import PooledMachine, split_older_entries

PoolKind = Literal["machine_pool", "master_config"]
LedgerT = TypeVar("LedgerT", PoolLedger, DetLedger)

# A ledger stored before the machine table names its machines' cloud ids: only such a ledger is
# read the slow way (no key of today's ledgers is spelled so).
_OLDER = b'"provider_id"'


class PoolRecord(BaseModel):
    """A pool file as applied: its name, kind, the file as validated, and its cloud."""

    model_config = ConfigDict(extra="allow")

    name: str
    kind: PoolKind
    file_name: str
    spec: dict[str, Any]  # the file as validated, in JSON form (the file's own spelling)
    cloud: str  # where its machines are launched
    applied_at: float
    version: int = 0


def pool_records(redis: Redis, prefix: str) -> DocStore[PoolRecord]:
    return DocStore(redis, prefix, "pool", PoolRecord.model_validate_json)


def _ledgers(
    redis: Redis,
    prefix: str,
    kind: str,
    model: type[LedgerT],
    entries: str,
    mine: Callable[[LedgerT], tuple[tuple[OwnerKind, str], Mapping[str, PooledMachine]]],
) -> DocStore[LedgerT]:
    """A ledger store whose reads move an older ledger's cloud ids and places (stored before
    the machine table) into the table: ``entries`` names its machines in the stored JSON,
    ``mine`` gives the rows' owner and the ledger's machines."""
    table = MachineTable(redis, prefix)

    def read(raw: bytes | str) -> LedgerT:
        if _OLDER not in (raw if isinstance(raw, bytes) else raw.encode()):
            return model.model_validate_json(raw)  # the table's time: as stored
        doc = json.loads(raw)
        older = split_older_entries(doc.get(entries) or {})
        ledger = model.model_validate(doc)
        owner, machines = mine(ledger)
        table.adopt(owner, older, machines)
        return ledger

    return DocStore(redis, prefix, kind, read)


def det_ledgers(redis: Redis, prefix: str) -> DocStore[DetLedger]:
    """Master configs' ledgers (an older one's agents moved into the machine table)."""
    return _ledgers(
        redis,
        prefix,
        "det-ledger",
        DetLedger,
        "agents",
        lambda x: (("det_pool", x.master), x.agents),
    )


def pool_ledgers(redis: Redis, prefix: str) -> DocStore[PoolLedger]:
    """Machine pools' ledgers (an older one's machines moved into the machine table)."""
    return _ledgers(
        redis,
        prefix,
        "pool-ledger",
        PoolLedger,
        "machines",
        lambda x: (("pool", x.pool), x.machines),
    )
