"""The machine table: one :class:`~corral.shared.records.Instance` per machine Corral holds,
keyed by Corral's machine id, holding the cloud's id, the place, the one lifecycle state and
the owner. Every write is a versioned compare-and-set (:mod:`corral.services.state.cas`).

A request's nodes are written through :class:`~corral.services.state.store.Store` (which keeps
the request's and the states' indexes the request paths walk); this module writes the rows of
the other owners (a machine pool's machines, a master config's agents) and reads any row. The
rows share one key space (``P:instance:<id>``: Corral's ids of the kinds never collide, ``i-``,
``m-``, ``a-``); a pool's rows are indexed by their owner only, so the request paths
(reconcile, the metrics, the autoscaler) never walk a machine no request holds::

    P:instance:<id>                       hash {version, json}: one row
    P:machines:owner:<kind>:<owner id>    zset  id -> created_at (the rows of one owner)

A pool's row outlives its place in the ledger (the record of where the machine was); retention
exports and deletes the rows that ended longer ago than the retention time
(:meth:`MachineTable.ended_before`, :mod:`corral.services.state.retention`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from redis import Redis

from corral.services.state import as_text
from corral.services.state.cas import CAS_SCRIPT, CREATE_SCRIPT, LOST, Lost, until_written
from corral.services.state.record_changes import check_change
from corral.shared.lifecycle import TERMINAL_INSTANCE_STATES, InstanceState, MachineState
from corral.shared.placement import Placement
from corral.shared.records import Instance, OwnerKind
from corral.shared.scheduling.pooled import PooledMachine

# The store's scripts, so a request's node written here keeps its state index right: a row
# is created with its owner's index (KEYS[2]), and written with its state's indexes.


class MachineTable:
    """The rows of the machine table in one Redis (``redis`` decoding responses or not)."""

    def __init__(self, redis: Redis, prefix: str = "corral") -> None:
        self._r = redis
        self.prefix = prefix
        self._create = redis.register_script(CREATE_SCRIPT)
        self._cas = redis.register_script(CAS_SCRIPT)

    def _key(self, machine_id: str) -> str:
        return f"{self.prefix}:instance:{machine_id}"

    def _owner_key(self, kind: str, owner_id: str) -> str:
        return f"{self.prefix}:machines:owner:{kind}:{owner_id}"

    def _state_key(self, row: Instance) -> str:
        """The state index a row is in: a request's node's state index; none for the others
        (the row's own key stands in, so the script moves nothing)."""
        if row.owner_kind in (None, "request"):
            return f"{self.prefix}:instances:state:{row.state.value}"
        return self._key(row.id)

    def create(self, row: Instance) -> bool:
        """Store a new row owned by a pool (``owner_kind`` set, not a request); False (nothing
        written) if the id is taken, so a redelivered write is harmless."""
        if row.owner_kind in (None, "request"):
            raise ValueError(f"{row.id}: a request's node is created by the store")
        kind, owner = row.owner
        keys = [self._key(row.id), self._owner_key(kind, owner)]
        args: list[str | int | float] = [row.id, row.version, row.model_dump_json(), row.created_at]
        return int(self._create(keys=keys, args=args)) == 1

    def get(self, machine_id: str) -> Instance | None:
        """The row as stored, or None."""
        raw = self._r.hget(self._key(machine_id), "json")
        return None if raw is None else Instance.model_validate_json(raw)

    def get_many(self, machine_ids: Iterable[str]) -> dict[str, Instance]:
        """The rows of ``machine_ids`` that exist, in one round trip (none for no ids)."""
        ids = list(dict.fromkeys(machine_ids))
        return self.get_many_beside(ids, None)[0] if ids else {}

    def get_many_beside(
        self, machine_ids: Iterable[str], key: str | None
    ) -> tuple[dict[str, Instance], Any]:
        """:meth:`get_many`, and the hash at ``key`` (None: none), in one round trip (a pool
        pass reads the blocks in force with its machines' rows)."""
        ids = list(dict.fromkeys(machine_ids))
        pipe = self._r.pipeline(transaction=False)
        for machine_id in ids:
            pipe.hget(self._key(machine_id), "json")
        if key is not None:
            pipe.hgetall(key)
        answers = pipe.execute()
        rows = {
            machine_id: Instance.model_validate_json(raw)
            for machine_id, raw in zip(ids, answers, strict=False)
            if raw is not None
        }
        return rows, answers[len(ids)] if key is not None else None

    def of_owner(self, kind: str, owner_id: str) -> list[Instance]:
        """The rows an owner (not a request) holds or held, oldest first."""
        ids = [as_text(i) for i in self._r.zrange(self._owner_key(kind, owner_id), 0, -1)]
        found = self.get_many(ids)
        return [found[i] for i in ids if i in found]

    def update(
        self, machine_id: str, fn: Callable[[Instance], bool], *, retries: int = 50
    ) -> Instance | None:
        """Change one row with ``fn`` (it mutates a fresh copy and returns True to write it),
        by compare-and-set on its version: a lost race reads again and calls ``fn`` again.
        Returns the row as written (or as read, for a no-op), None if there is no such row.
        ``fn`` moves the state with ``move()`` and never changes id, owner or created_at."""
        key = self._key(machine_id)

        def one_round(attempt: int) -> Instance | Lost | None:
            raw = self._r.hget(key, "json")
            if raw is None:
                return None
            current = Instance.model_validate_json(raw)
            work = Instance.model_validate_json(raw)  # a second parse: cheaper than a copy
            wanted = fn(work)
            if wanted is not True and wanted is not False:
                raise TypeError(f"update function must return True or False, not {wanted!r}")
            if not wanted:
                return current
            _check(current, work)
            work.version = current.version + 1
            keys = [key, self._state_key(current), self._state_key(work)]
            args: list[str | int | float] = [
                work.id, current.version, work.version, work.model_dump_json(), work.created_at
            ]  # fmt: skip
            written = int(self._cas(keys=keys, args=args))
            if written == 1:
                return work
            return None if written == -1 else LOST

        return until_written(one_round, retries=retries, what=key)

    def up(
        self,
        machine_id: str,
        owner: tuple[OwnerKind, str],
        provider_id: str,
        at: Placement,
        now: float,
        *,
        machine_type: str | None = None,
        created_at: float | None = None,
        reason: str = "up",
        price_usd_per_hour: float | None = None,
    ) -> bool:
        """Write the row of a pool's machine the cloud gave an id (RUNNING, at ``at``, priced
        at ``price_usd_per_hour``): False (nothing written) if it has one already, so a
        redelivered boot is harmless. A part of the place the cloud left out stays empty, as
        the cloud reported it."""
        row = Instance.new(
            machine_id,
            "",
            0,
            now if created_at is None else created_at,
            "requested by its pool",
            provider_id=provider_id,
            **at.fields(),
            machine_type=machine_type,
            price_usd_per_hour=price_usd_per_hour,
            owner_kind=owner[0],
            owner_id=owner[1],
        )
        row.move(InstanceState.RUNNING, now, reason)
        return self.create(row)

    def adopt(
        self,
        owner: tuple[OwnerKind, str],
        older: Mapping[str, Mapping[str, Any]],
        machines: Mapping[str, PooledMachine],
    ) -> int:
        """Move into the table the cloud ids and places a ledger stored by an older version
        kept in its machines' entries (``older``, by machine id: what
        :func:`~corral.shared.scheduling.pooled.split_older_entries` took out), for the
        machines still in the ledger without a row: one round trip to look, one write per
        machine moved. Returns how many rows it wrote."""
        wanted = [mid for mid in older if mid in machines]
        if not wanted:
            return 0
        have = self.get_many(wanted)
        written = 0
        for mid in wanted:
            if mid in have:
                continue
            kept, machine = older[mid], machines[mid]
            at = Placement(
                str(kept.get("cloud") or ""),
                str(kept.get("region") or ""),
                str(kept.get("zone") or ""),
                str(kept.get("instance_type") or ""),
                str(kept.get("market") or "on_demand"),
            )
            written += self.up(
                mid,
                owner,
                str(kept["provider_id"]),
                at,
                machine.created_at,
                machine_type=machine.pool_type(),
                reason="read from its pool's ledger (stored before the machine table)",
            )
        return written

    def ended_before(self, cutoff: float, batch: int = 500) -> list[Instance]:
        """Rows of the pools' machines that ended (terminating, terminated, failed, lost:
        their pool let them go) before ``cutoff``: what retention exports and forgets. At most
        ``batch`` rows per owner are looked at per call."""
        ended = (MachineState.TERMINATING, *TERMINAL_INSTANCE_STATES, MachineState.LOST)
        out: list[Instance] = []
        for raw in self._r.scan_iter(match=self._owner_key("*", "*"), count=1000):
            ids = self._r.zrangebyscore(as_text(raw), "-inf", cutoff, start=0, num=batch)
            rows = self.get_many(as_text(i) for i in ids)
            out += [r for r in rows.values() if r.state in ended and r.updated_at < cutoff]
        return out

    def forget(self, rows: Iterable[Instance]) -> None:
        """Delete rows and their owners' index entries, in one round trip."""
        pipe = self._r.pipeline(transaction=True)
        for row in rows:
            pipe.delete(self._key(row.id))
            pipe.zrem(self._owner_key(*row.owner), row.id)
        if pipe.command_stack:
            pipe.execute()

    def move(self, machine_id: str, to: InstanceState, now: float, reason: str) -> Instance | None:
        """Move a row to ``to`` unless it is there, or ended, or ``to`` is not a move its
        state has (a row gone or ended stays as it is)."""

        def step(row: Instance) -> bool:
            if row.is_terminal or row.state == to:
                return False
            try:
                return row.move(to, now, reason)
            except ValueError:  # IllegalTransition: e.g. LOST, then reaped
                return False

        return self.update(machine_id, step)


def _check(before: Instance, after: Instance) -> None:
    """Refuse the changes a row's writer must never make: the store's, and a new owner."""
    check_change(before, after)
    if after.owner != before.owner:
        raise ValueError(f"{before.id}: an update must not change owner")
