"""A record written where none can be yet, without the creation script's look for one.

The store creates a record, and adds it to its indexes, in one script that first looks whether
the id is taken (:data:`~corral.services.state.store.CREATE_SCRIPT`): 5 Redis commands with
the script's own. A caller that knows the id is new (an instance of an attempt that the
caller's own compare-and-set just started: no earlier run of the attempt can have written it)
writes the record and then its indexes in one pipelined round trip, 3 commands. An index never
points at a record that is not there: the record goes first, and nobody reads a row by an id
no index holds yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis


def write_fresh(
    r: Redis, keys: Sequence[str], record_id: str, version: int, json: str, score: float
) -> bool:
    """Write the record at ``keys[0]`` (``{version, json}``) and add ``record_id`` to each
    index zset of ``keys[1:]`` with ``score``; True (it is created)."""
    pipe = r.pipeline(transaction=False)
    pipe.hset(keys[0], mapping={"version": version, "json": json})
    for index in keys[1:]:
        pipe.zadd(index, {record_id: score})
    pipe.execute()
    return True
