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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from redis import Redis

from corral.services.state.docstore import DocStore
from corral.services.state.machines import MachineTable
from corral.shared.scheduling.det_ledger import DetLedger
from corral.shared.scheduling.ledger import PoolLedger
from corral.shared.scheduling.pooled import split_older_entries

PoolKind = Literal["machine_pool", "master_config"]

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


def det_ledgers(redis: Redis, prefix: str) -> DocStore[DetLedger]:
    """Master configs' ledgers; one stored before the machine table has its agents' cloud
    ids and places moved into the table as it is read."""
    table = MachineTable(redis, prefix)

    def read(raw: bytes | str) -> DetLedger:
        if _OLDER not in (raw if isinstance(raw, bytes) else raw.encode()):
            return DetLedger.model_validate_json(raw)  # the table's time: as stored
        doc = json.loads(raw)
        older = split_older_entries(doc.get("agents") or {})
        ledger = DetLedger.model_validate(doc)
        table.adopt(("det_pool", ledger.master), older, ledger.agents)
        return ledger

    return DocStore(redis, prefix, "det-ledger", read)


def pool_ledgers(redis: Redis, prefix: str) -> DocStore[PoolLedger]:
    """Machine pools' ledgers; one stored before the machine table has its machines' cloud
    ids and places moved into the table as it is read."""
    table = MachineTable(redis, prefix)

    def read(raw: bytes | str) -> PoolLedger:
        if _OLDER not in (raw if isinstance(raw, bytes) else raw.encode()):
            return PoolLedger.model_validate_json(raw)  # the table's time: as stored
        doc = json.loads(raw)
        older = split_older_entries(doc.get("machines") or {})
        ledger = PoolLedger.model_validate(doc)
        table.adopt(("pool", ledger.pool), older, ledger.machines)
        return ledger

    return DocStore(redis, prefix, "pool-ledger", read)
