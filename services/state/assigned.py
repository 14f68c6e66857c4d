"""A request's assignments on pooled machines, as the request paths read them.

Work a pool runs for a request is recorded as an :class:`~corral.shared.records.Assignment`:
it points at the pool machine's row of the machine table by id and copies nothing of it. It is
stored where a request's nodes are (``P:instance:<id>``, in the request's and the states'
indexes), so every path that reads a request's instances (its views, its cost, reconcile, the
metrics, retention) reads it as one: a view built from the assignment and the row
(:meth:`~corral.shared.records.Assignment.view`), the rows of every assignment read in one
pipelined round trip. A write of a view stores the assignment again with the view's lifecycle
(:meth:`~corral.shared.records.Assignment.follow`). Records stored before assignments were (a
full copy of the machine) read as they always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis

from corral.shared.records import Assignment, Instance

# What only an assignment's JSON holds (a JSON string's own quotes are escaped, so a value
# cannot hold it).
_MARK = '"machine_id":'


def is_assignment(raw: bytes | str) -> bool:
    """Whether a record stored at ``P:instance:<id>`` is an assignment (else a machine)."""
    return _MARK.encode() in raw if isinstance(raw, bytes) else _MARK in raw


def parse(raw: bytes | str) -> Instance | Assignment:
    """A record stored at ``P:instance:<id>``: a machine (a request's node, a pool's row) or
    an assignment."""
    model = Assignment if is_assignment(raw) else Instance
    return model.model_validate_json(raw)


def follow(assignment: Assignment, view: Any) -> str:
    """The JSON to store for a write of ``assignment``'s view (an :class:`Instance`)."""
    if not isinstance(view, Instance):
        raise TypeError(f"{assignment.id}: an assignment is written through its instance view")
    return assignment.follow(view).model_dump_json()


def read(
    redis: Redis, prefix: str, raws: Sequence[bytes | str]
) -> list[tuple[Instance, Assignment | None]]:
    """Each record of ``raws`` as its request reads it, with the assignment it stands for
    (None for a machine): the assignments' rows read in one round trip (none without one)."""
    parsed = [parse(raw) for raw in raws]
    wanted = sorted({p.machine_id for p in parsed if isinstance(p, Assignment)})
    rows: dict[str, Instance] = {}
    if wanted:
        pipe = redis.pipeline(transaction=False)
        for machine_id in wanted:
            pipe.hget(f"{prefix}:instance:{machine_id}", "json")
        found = zip(wanted, pipe.execute(), strict=True)
        rows = {mid: Instance.model_validate_json(raw) for mid, raw in found if raw is not None}
    return [
        (p, None) if isinstance(p, Instance) else (p.view(rows.get(p.machine_id)), p)
        for p in parsed
    ]
