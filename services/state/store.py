"""Corral's state in Redis: every write is a versioned compare-and-set.

Any number of workers per role run side by side, so no write may assume it is alone. A record
is read with its version; the change is computed on the copy; a Lua script writes it (and the
indexes) only if the stored version is still the one read. A writer that lost the race reads
again and recomputes. Each successful write bumps ``version`` by exactly 1.

Key layout (``P`` is the prefix, "corral" by default; ids and states as stored)::

    P:request:<id>                  hash {version, json}: one LaunchRequest
    P:requests:state:<STATE>        zset  id -> created_at (requests in that state)
    P:requests:project:<project>    zset  id -> created_at (a project's requests)
    P:instance:<id>                 hash {version, json}: one Instance, or one Assignment (a
                                    request's work on a pool's machine, read as an Instance
                                    through the machine's row: state/assigned.py)
    P:instances:request:<req id>    zset  id -> created_at (a request's instances)
    P:instances:state:<STATE>       zset  id -> created_at (instances in that state)
    P:events:<req id>               list of JSON {"at", "text"}: the request's progress log
    P:claim:<key>                   string owner, with a TTL: an idempotency key
    P:submission:<key>              hash {request_id | refusal, at, received}: what a task
                                    submitted under that idempotency key became

The state indexes are sorted sets scored by creation time, so listing the requests of one
state in order reads only that set. Every index is changed in the same script as the record,
so an index never disagrees with a record it points at (a fresh attempt's instance, new for
certain, is written with its indexes in one pipelined round trip instead: rows.py). An
instance is in exactly one state index, so every instance is their union: no index of all
instances is written at each creation (an older version wrote ``P:instances:created``;
retention still removes ids from it). The same holds for requests (an older version wrote
``P:requests:created``). A request submitted under an idempotency key is created in the same
script that records it under the key, so two submissions racing with one key create one
request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from redis import Redis

from corral.services.state import as_text, assigned
from corral.services.state.cas import (
    CAS_ALL_SCRIPT,
    CAS_SCRIPT,
    CREATE_SCRIPT,
    LOST,
    Lost,
    until_written,
)
from corral.services.state.cas import WriteConflict as WriteConflict  # its callers' name for it
from corral.services.state.record_changes import changed, copy_of, to_write
from corral.services.state.rows import write_fresh
from corral.shared.lifecycle import INSTANCE_STATES, InstanceState, RequestState
from corral.shared.records import Assignment, Event, Instance, LaunchRequest, Submission

RecordT = TypeVar("RecordT", LaunchRequest, Instance)
DecidedT = TypeVar("DecidedT")
# A request write's progress lines: (lines from the record as written and what was decided, time)
Logged = tuple[Callable[[Any, DecidedT], Sequence[str]], float]
# A claim the write's script takes: (its key from the record and decision, its owner, TTL s)
Claiming = tuple[Callable[[Any, DecidedT], str | None], str, float]

# A new request: KEYS[1] its hash, KEYS[2] its progress log, KEYS[3..] its index zsets. ARGV:
# id, version, json, score (created_at), its first progress line (JSON; none if empty). As
# CREATE_SCRIPT, with the line appended when it creates (one round trip for the submit's two
# writes).
_CREATE_REQUEST = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
for i = 3, #KEYS do redis.call('ZADD', KEYS[i], ARGV[4], ARGV[1]) end
if ARGV[5] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[5]) end
return 1
"""

# KEYS[1] the key's submission hash, KEYS[2] the request's hash, KEYS[3] its progress log,
# KEYS[4..] its index zsets. ARGV: id, version, json, score (created_at), its first progress
# line (JSON; none if empty). Counts the submission; creates the request with its first line
# and records it under the key unless a request holds the key already. Returns the id holding
# it.
_CREATE_KEYED = """
redis.call('HINCRBY', KEYS[1], 'received', 1)
local held = redis.call('HGET', KEYS[1], 'request_id')
if held then return held end
if redis.call('EXISTS', KEYS[2]) == 1 then return redis.error_reply('request id taken') end
redis.call('HSET', KEYS[2], 'version', ARGV[2], 'json', ARGV[3])
for i = 4, #KEYS do redis.call('ZADD', KEYS[i], ARGV[4], ARGV[1]) end
if ARGV[5] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[5]) end
redis.call('HSET', KEYS[1], 'request_id', ARGV[1], 'at', ARGV[4])
redis.call('HDEL', KEYS[1], 'refusal')
return ARGV[1]
"""

# KEYS[1] the key's submission hash. ARGV: the refusal (JSON), now. Counts the submission;
# records the refusal unless a request holds the key (that outcome stands). 1 if recorded.
_REFUSE_KEYED = """
redis.call('HINCRBY', KEYS[1], 'received', 1)
if redis.call('HEXISTS', KEYS[1], 'request_id') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'refusal', ARGV[1], 'at', ARGV[2])
return 1
"""

# KEYS[1] the claim; ARGV[1] the owner, ARGV[2] the new TTL in ms. Extends it only if that
# owner still holds it.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# KEYS[1] the claim; ARGV[1] the owner. Deletes it only if that owner still holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class WriteListener(Protocol):
    """Told of every write that won, once per write (only the winner of a compare-and-set is
    told): what observes the state (the event metrics) without the store knowing it. Deps
    wires the listeners; the store imports none of them."""

    def created(self, record: LaunchRequest | Instance) -> None: ...

    def written(
        self, before: LaunchRequest | Instance, after: LaunchRequest | Instance
    ) -> None: ...


class Store:
    """Launch requests, instances, progress logs and idempotency keys in one Redis.

    ``redis`` may decode responses or not; the store handles both. Safe to share between
    threads (redis-py clients are; every method keeps its state in locals). ``listeners`` are
    told of each write that won (:class:`WriteListener`).
    """

    def __init__(
        self, redis: Redis, prefix: str = "corral", listeners: Sequence[WriteListener] = ()
    ) -> None:
        self._r = redis
        self.prefix = prefix
        self.listeners: tuple[WriteListener, ...] = tuple(listeners)
        self._create = redis.register_script(CREATE_SCRIPT)
        self._cas = redis.register_script(CAS_SCRIPT)
        self._cas_all = redis.register_script(CAS_ALL_SCRIPT)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)
        self._create_request = redis.register_script(_CREATE_REQUEST)
        self._create_keyed = redis.register_script(_CREATE_KEYED)
        self._refuse_keyed = redis.register_script(_REFUSE_KEYED)

    # ---- key names ------------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _request_key(self, request_id: str) -> str:
        return self._key("request", request_id)

    def _instance_key(self, instance_id: str) -> str:
        return self._key("instance", instance_id)

    def _request_state_key(self, state: RequestState) -> str:
        return self._key("requests", "state", state.value)

    def _project_key(self, project: str) -> str:
        return self._key("requests", "project", project)

    def _project_index(self, req: LaunchRequest) -> list[str]:
        """The project index a new request joins (none for a request without a project)."""
        return [] if req.project is None else [self._project_key(req.project)]

    def _instance_state_key(self, state: InstanceState) -> str:
        return self._key("instances", "state", state.value)

    # ---- create ---------------------------------------------------------------------------

    def create_request(self, req: LaunchRequest, event: str | None = None) -> bool:
        """Store a new request; False (and nothing written) if its id already exists, so a
        retried task that creates the same request twice is harmless. ``event``: its first
        progress line, appended in the same script when it creates."""
        keys, args = self._new_request_script_args(req, event)
        created = int(self._create_request(keys=keys, args=args)) == 1
        if created:
            for listener in self.listeners:
                listener.created(req)
        return created

    def create_keyed_request(self, req: LaunchRequest, key: str, event: str | None = None) -> str:
        """Store a new request under idempotency key ``key``, with ``event`` its first progress
        line (if given), atomically: the id of the request holding the key, ``req.id`` when
        this call created it, an earlier request's id when the key was taken (then nothing is
        written but the count of submissions)."""
        keys, args = self._new_request_script_args(req, event)
        return as_text(self._create_keyed(keys=[self._key("submission", key), *keys], args=args))

    def _new_request_script_args(
        self, req: LaunchRequest, event: str | None
    ) -> tuple[list[str], list[str | int | float]]:
        """The keys (its hash, its progress log, its indexes) and arguments (id, version, JSON,
        score, its first line or "") of a new request, as both creating scripts take them."""
        keys = [
            self._request_key(req.id),
            self._key("events", req.id),
            self._request_state_key(req.state),
            *self._project_index(req),
        ]
        line = "" if event is None else _event_entry(req.created_at, event)
        return keys, [req.id, req.version, req.model_dump_json(), req.created_at, line]

    def refuse_keyed(self, key: str, refusal: dict[str, Any], now: float) -> bool:
        """Record that the document submitted under ``key`` was refused, and why; False (and
        the refusal not recorded) when a request holds the key already."""
        args: list[str | int | float] = [json.dumps(refusal), now]
        return int(self._refuse_keyed(keys=[self._key("submission", key)], args=args)) == 1

    def submission(self, key: str) -> Submission | None:
        """What the task submitted under ``key`` became, or None if nothing was recorded."""
        raw = {
            as_text(k): as_text(v) for k, v in self._r.hgetall(self._key("submission", key)).items()
        }
        if "at" not in raw:
            return None
        refusal = json.loads(raw["refusal"]) if "refusal" in raw else None
        return Submission(
            key=key,
            request_id=raw.get("request_id"),
            refusal=refusal,
            at=float(raw["at"]),
            received=int(raw.get("received", 1)),
        )

    def count_submission(self, key: str) -> None:
        """Count one more submission under ``key`` (a duplicate answered without a write)."""
        self._r.hincrby(self._key("submission", key), "received", 1)

    def create_instance(
        self, inst: Instance, stored: Assignment | None = None, *, fresh: bool = False
    ) -> bool:
        """Store a new instance; False (and nothing written) if its id already exists.
        ``stored``: the assignment ``inst`` is the view of, stored instead (:mod:`.assigned`).
        ``fresh``: no row can hold its id (the caller's own write just started its attempt):
        written without the creation script's look for it (:mod:`.rows`)."""
        keys = [
            self._instance_key(inst.id),
            self._key("instances", "request", inst.request_id),
            self._instance_state_key(inst.state),
        ]
        row = (stored or inst).model_dump_json()
        args: list[Any] = [inst.id, inst.version, row, inst.created_at]
        created = write_fresh(self._r, keys, *args) if fresh else self._create(keys, args) == 1
        if created:
            for listener in self.listeners:
                listener.created(inst)
        return created

    # ---- read -----------------------------------------------------------------------------

    def get_request(self, request_id: str) -> LaunchRequest | None:
        """The request as stored, or None."""
        raw = self._r.hget(self._request_key(request_id), "json")
        return None if raw is None else LaunchRequest.model_validate_json(raw)

    def get_request_beside(self, request_id: str, key: str) -> tuple[LaunchRequest | None, Any]:
        """The request (or None) and the hash at ``key``, in one round trip (an admission reads
        the blocks in force with its request)."""
        pipe = self._r.pipeline(transaction=False)
        pipe.hget(self._request_key(request_id), "json")
        pipe.hgetall(key)
        raw, other = pipe.execute()
        return (None if raw is None else LaunchRequest.model_validate_json(raw)), other

    def get_instance(self, instance_id: str) -> Instance | None:
        """The instance as stored, or None."""
        raw = self._r.hget(self._instance_key(instance_id), "json")
        return None if raw is None else assigned.read(self._r, self.prefix, [raw])[0][0]

    def list_requests(
        self,
        state: RequestState | None = None,
        limit: int = 100,
        *,
        oldest_first: bool = False,
        projects: Sequence[str] | None = None,
        created_before: float | None = None,
    ) -> list[LaunchRequest]:
        """Requests, newest first (or oldest first: the order a FIFO scheduler wants), at most
        ``limit``; only those in ``state`` if given; only those of ``projects`` if given; only
        those created at or before ``created_before`` if given (oldest first)."""
        if limit <= 0:
            return []
        if projects is not None:
            return self._project_requests(projects, state, limit, oldest_first)
        # Every request is in exactly one state index: all of them are their union.
        states = list(RequestState) if state is None else [state]
        pipe = self._r.pipeline(transaction=False)
        for key in map(self._request_state_key, states):
            if created_before is not None:
                pipe.zrangebyscore(key, "-inf", created_before, start=0, num=limit, withscores=True)
            elif oldest_first:
                pipe.zrange(key, 0, limit - 1, withscores=True)
            else:
                pipe.zrevrange(key, 0, limit - 1, withscores=True)
        # In the order one index would give: by creation time, then by id.
        scored = sorted(
            ((float(score), as_text(i)) for batch in pipe.execute() for i, score in batch),
            reverse=created_before is None and not oldest_first,
        )
        ids = [i for _, i in scored[:limit]]
        found = self._load(LaunchRequest, (self._request_key(i) for i in ids))
        # A request may have moved on between reading the index and reading the records.
        return [r for r in found if state is None or r.state == state]

    def _project_requests(
        self,
        projects: Sequence[str],
        state: RequestState | None,
        limit: int,
        oldest_first: bool,
    ) -> list[LaunchRequest]:
        """The requests of ``projects`` in ``state`` (if given), newest (or oldest) first, read
        from the project indexes in batches until ``limit`` are found."""
        pipe = self._r.pipeline(transaction=False)
        for project in dict.fromkeys(projects):
            pipe.zrange(self._project_key(project), 0, -1, withscores=True)
        scored = [(float(score), as_text(i)) for batch in pipe.execute() for i, score in batch]
        scored.sort(reverse=not oldest_first)
        out: list[LaunchRequest] = []
        batch_size = max(limit, 100)
        for start in range(0, len(scored), batch_size):
            chunk = scored[start : start + batch_size]
            found = self._load(LaunchRequest, (self._request_key(i) for _, i in chunk))
            out.extend(r for r in found if state is None or r.state == state)
            if len(out) >= limit:
                break
        return out[:limit]

    def project_request_ids(self, project: str) -> list[str]:
        """Every request id of ``project``, oldest first."""
        return [as_text(i) for i in self._r.zrange(self._project_key(project), 0, -1)]

    def load_requests(self, request_ids: Iterable[str]) -> list[LaunchRequest]:
        """The requests of these ids that exist, in the order given."""
        return self._load(LaunchRequest, (self._request_key(i) for i in request_ids))

    def count_requests(self, state: RequestState | None = None) -> int:
        """How many requests there are (in ``state`` if given), without reading them."""
        if state is not None:
            return int(self._r.zcard(self._request_state_key(state)))
        pipe = self._r.pipeline(transaction=False)
        for each in RequestState:  # every request is in exactly one state index
            pipe.zcard(self._request_state_key(each))
        return sum(int(n) for n in pipe.execute())

    def list_instances(
        self, request_id: str | None = None, states: Iterable[InstanceState] | None = None
    ) -> list[Instance]:
        """Instances, oldest first (a request's nodes in launch order): a request's only if
        ``request_id`` is given, and only those in ``states`` if given."""
        wanted = None if states is None else frozenset(states)
        if request_id is not None:
            index_keys = [self._key("instances", "request", request_id)]
        else:  # every instance is in the index of its state (all of them: every instance)
            index_keys = [
                self._instance_state_key(s) for s in (INSTANCE_STATES if wanted is None else wanted)
            ]
        pipe = self._r.pipeline(transaction=False)
        for key in index_keys:
            pipe.zrange(key, 0, -1)
        ids = {as_text(i) for batch in pipe.execute() for i in batch}
        found = self._load(Instance, (self._instance_key(i) for i in sorted(ids)))
        found = [i for i in found if wanted is None or i.state in wanted]
        return sorted(found, key=lambda i: (i.created_at, i.request_id, i.node_index, i.id))

    def _load(self, model: type[RecordT], keys: Iterable[str]) -> list[RecordT]:
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.hget(key, "json")
        raws = [raw for raw in pipe.execute() if raw is not None]
        if model is Instance:  # an assignment read through its machine's row
            return cast(list[RecordT], [v for v, _ in assigned.read(self._r, self.prefix, raws)])
        return [model.model_validate_json(raw) for raw in raws]

    # ---- compare-and-set updates ----------------------------------------------------------

    def update_request(
        self,
        request_id: str,
        fn: Callable[[LaunchRequest], bool],
        *,
        retries: int = 50,
        current: LaunchRequest | None = None,
    ) -> LaunchRequest | None:
        """Change one request with ``fn``, safely against concurrent writers.

        ``fn`` gets a fresh copy of the stored request and mutates it; it returns True to write
        it, False for "no change" (nothing is written), or raises to abort (the exception
        propagates, nothing is written). If another writer got in first, the request is read
        again and ``fn`` called again (so ``fn`` must decide from the record it gets, not from
        values it captured), up to ``retries`` more times, then :class:`WriteConflict`.
        Returns the request as written (version bumped by 1), as read for a no-op, or None if
        there is no such request.

        ``current``: the request as the caller just read it (or wrote it), to start from
        instead of reading it again; the compare-and-set still checks its version, so a
        record that moved on meanwhile is read again, as after any lost race.
        """
        return self.decide_request(request_id, lambda r: (fn(r), None), retries=retries,
                                   current=current)[0]  # fmt: skip

    def decide_request(
        self,
        request_id: str,
        fn: Callable[[LaunchRequest], tuple[bool, DecidedT]],
        *,
        retries: int = 50,
        current: LaunchRequest | None = None,
        log: Logged[DecidedT] | None = None,
    ) -> tuple[LaunchRequest | None, DecidedT | None]:
        """:meth:`update_request` for a change planned from the record (plan, then apply): ``fn``
        returns whether to write and what it decided; returned with the request as written (or
        read), the decision of the run that was (None: no such request). ``log``: its progress
        lines (from the record as written and the decision) and their time, appended by the
        write's own script; a run that writes nothing appends none."""
        return self.decide_request_claiming(
            request_id, fn, retries=retries, current=current, log=log
        )[:2]

    def decide_request_claiming(
        self,
        request_id: str,
        fn: Callable[[LaunchRequest], tuple[bool, DecidedT]],
        *,
        retries: int = 50,
        current: LaunchRequest | None = None,
        log: Logged[DecidedT] | None = None,
        claim: Claiming[DecidedT] | None = None,
    ) -> tuple[LaunchRequest | None, DecidedT | None, bool]:
        """:meth:`decide_request`, and a claim (:meth:`claim`) taken by the write's own script:
        ``claim`` gives its key from the record as written and the decision (None: no claim),
        its owner and TTL. The third answer: whether the write took it (False when nobody was
        to take or someone else holds it; the write is made either way)."""
        key, carried = self._request_key(request_id), _carried(current, request_id)
        state_key = self._request_state_key
        return self._update(LaunchRequest, key, fn, retries, state_key, carried, log, claim)

    def update_instance(
        self,
        instance_id: str,
        fn: Callable[[Instance], bool],
        *,
        retries: int = 50,
        current: Instance | None = None,
    ) -> Instance | None:
        """Like :meth:`update_request`, for an instance."""
        key, carried = self._instance_key(instance_id), _carried(current, instance_id)
        state_key = self._instance_state_key
        return self._update(Instance, key, lambda i: (fn(i), None), retries, state_key, carried)[0]

    def _update(
        self,
        model: type[RecordT],
        key: str,
        fn: Callable[[RecordT], tuple[bool, DecidedT]],
        retries: int,
        state_key: Callable[[Any], str],
        carried: RecordT | None = None,
        log: Logged[DecidedT] | None = None,
        claim: Claiming[DecidedT] | None = None,
    ) -> tuple[RecordT | None, DecidedT | None, bool]:
        def one_round(attempt: int) -> tuple[RecordT | None, DecidedT | None, bool] | Lost:
            nonlocal carried
            copy, of = None, None
            if carried is not None:
                current, carried = carried, None  # the caller's read: no second one
            else:
                raw = self._r.hget(key, "json")
                if raw is None:
                    return None, None, False
                current, copy, of = self._for_update(model, raw)
            work = copy_of(current) if copy is None else copy
            wanted, decided = fn(work)
            if not to_write(current, work, wanted):
                return current, decided, False
            keys = [key, state_key(current.state), state_key(work.state)]
            stored = work.model_dump_json() if of is None else assigned.follow(of, work)
            args: list[str | int | float] = [
                work.id, current.version, work.version, stored, work.created_at
            ]  # fmt: skip
            lines: Sequence[str] = () if log is None else log[0](work, decided)
            at: float = 0.0 if log is None else log[1]
            claimed = None if claim is None else claim[0](work, decided)
            if lines or claimed is not None:
                keys.append(self._key("events", work.id))
                args += [len(lines), *(_event_entry(at, text) for text in lines)]
            if claim is not None and claimed is not None:
                keys.append(self._key("claim", claimed))
                args += [claim[1], max(1, round(claim[2] * 1000))]
            written = int(self._cas(keys=keys, args=args))
            if written in (1, 2):
                for listener in self.listeners:  # once: only the writer that won gets here
                    listener.written(current, work)
                return work, decided, written == 1 and claimed is not None
            if written == -1:
                return None, None, False
            return LOST

        return until_written(one_round, retries=retries, what=key)

    def _for_update(self, model: type[Any], raw: Any) -> tuple[Any, Any, Assignment | None]:
        """A record read for an update: as read, a copy for the update function (a second
        parse: cheaper than a deep copy), and the assignment it is the view of, if one."""
        if model is Instance and assigned.is_assignment(raw):
            [(view, of)] = assigned.read(self._r, self.prefix, [raw])
            return view, copy_of(view), of
        return model.model_validate_json(raw), model.model_validate_json(raw), None

    def update_together(
        self,
        request_id: str,
        fn: Callable[[LaunchRequest], bool],
        instance_fns: Mapping[str, Callable[[Instance], bool]],
        *,
        current: LaunchRequest | None = None,
        instances: Mapping[str, Instance] | None = None,
        retries: int = 50,
    ) -> tuple[LaunchRequest, list[Instance]] | None:
        """Change some of a request's instances (id -> its function, in ``instance_fns``)
        and the request with ``fn``, as :meth:`update_instance` and :meth:`update_request`
        would one after the other, in one compare-and-set over all of them (all written or
        none; a lost race reads them all again and calls the functions again): one script,
        not one per record.
        Returns the request and the instances as written (or as read, where a function asked
        for no change); None, with nothing written, when any of them does not exist (the
        caller takes the one-by-one way, which creates what is missing). ``current``: as for
        :meth:`update_request`; ``instances``: the same for the instances, by id (a row
        missing from it is read)."""
        n = len(instance_fns)
        keys = [self._instance_key(i) for i in instance_fns] + [self._request_key(request_id)]
        models: list[type[Any]] = [Instance] * n + [LaunchRequest]
        fns: list[Callable[[Any], bool]] = [*instance_fns.values(), fn]
        carried: list[Any] = [_carried_row(instances, i) for i in instance_fns]
        carried.append(_carried(current, request_id))

        def one_round(attempt: int) -> tuple[LaunchRequest, list[Instance]] | Lost | None:
            nonlocal carried
            read = self._read_for_update(keys, models, carried)
            if read is None:
                return None
            currents, copies = read
            carried = [None] * len(keys)  # a lost race reads every record again
            works = [changed(c, f, w) for c, f, w in zip(currents, fns, copies, strict=True)]
            writes = [(c, w) for c, w in zip(currents, works, strict=True) if w is not None]
            if writes:
                cas_keys, args = _cas_args(self, writes)
                written = int(self._cas_all(keys=cas_keys, args=args))
                if written == -1:
                    return None
                if written == 0:
                    return LOST
                for listener in self.listeners:
                    for before, after in writes:
                        listener.written(before, after)
            out = [w if w is not None else c for c, w in zip(currents, works, strict=True)]
            req = out[-1]
            assert isinstance(req, LaunchRequest)
            return req, [i for i in out[:-1] if isinstance(i, Instance)]

        return until_written(one_round, retries=retries, what=request_id)

    def update_together_many(
        self, items: Sequence[Together]
    ) -> list[tuple[LaunchRequest, list[Instance]] | None]:
        """:meth:`update_together` for several requests at once (a boot watch's look that saw
        many launches up): every record read in one round trip, every request's
        compare-and-set sent in one more (each its own script, all or none of that request's
        records written). A request that lost a race, and only it, goes the one-by-one way
        (read again, its functions called again). One result per item, in order."""
        reads: list[tuple[list[Any], list[type[Any]]]] = []
        pipe = self._r.pipeline(transaction=False)
        for item in items:
            keys = [self._instance_key(i) for i in item.instance_fns]
            keys.append(self._request_key(item.request_id))
            carried: list[Any] = [_carried_row(item.instances, i) for i in item.instance_fns]
            carried.append(_carried(item.current, item.request_id))
            for key, held in zip(keys, carried, strict=True):
                if held is None:
                    pipe.hget(key, "json")
            reads.append((carried, [Instance] * len(item.instance_fns) + [LaunchRequest]))
        raws = iter(pipe.execute() if pipe.command_stack else [])
        results: list[tuple[LaunchRequest, list[Instance]] | None] = [None] * len(items)
        pending: list[tuple[int, list[tuple[Any, Any]], list[Any]]] = []
        pipe = self._r.pipeline(transaction=False)
        for n, (item, (carried, models)) in enumerate(zip(items, reads, strict=True)):
            currents: list[Any] = []
            copies: list[Any] = []
            for model, held in zip(models, carried, strict=True):
                raw = None if held is not None else next(raws)
                if held is not None:
                    currents.append(held)
                    copies.append(copy_of(held))
                elif raw is not None:
                    currents.append(model.model_validate_json(raw))
                    copies.append(model.model_validate_json(raw))
            if len(currents) < len(models):
                continue  # one is missing: None, nothing written
            fns: list[Callable[[Any], bool]] = [*item.instance_fns.values(), item.fn]
            works = [changed(c, f, w) for c, f, w in zip(currents, fns, copies, strict=True)]
            writes = [(c, w) for c, w in zip(currents, works, strict=True) if w is not None]
            out = [w if w is not None else c for c, w in zip(currents, works, strict=True)]
            if not writes:
                results[n] = (out[-1], out[:-1])
                continue
            cas_keys, args = _cas_args(self, writes)
            self._cas_all(keys=cas_keys, args=args, client=pipe)
            pending.append((n, writes, out))
        replies = pipe.execute() if pending else []
        for (n, writes, out), written in zip(pending, replies, strict=True):
            if int(written) == 1:
                for listener in self.listeners:
                    for before, after in writes:
                        listener.written(before, after)
                results[n] = (out[-1], out[:-1])
            elif int(written) == 0:  # lost a race: this one alone, read again
                item = items[n]
                results[n] = self.update_together(item.request_id, item.fn, item.instance_fns)
        return results

    def _read_for_update(
        self, keys: list[str], models: list[type[Any]], carried: list[Any]
    ) -> tuple[list[Any], list[Any]] | None:
        """The records at ``keys`` (of ``models``): the carried ones as given, the rest read
        in one round trip; None if one is missing. With them, a copy of each for the update
        functions to change: a second parse of what was read (cheaper than a deep copy)."""
        pipe = self._r.pipeline(transaction=False)
        wanted = [k for k, c in zip(keys, carried, strict=True) if c is None]
        for key in wanted:
            pipe.hget(key, "json")
        raws = iter(pipe.execute() if wanted else [])
        out: list[Any] = []
        copies: list[Any] = []
        for model, held in zip(models, carried, strict=True):
            if held is not None:
                out.append(held)
                copies.append(copy_of(held))
                continue
            raw = next(raws)
            if raw is None:
                return None
            out.append(model.model_validate_json(raw))
            copies.append(model.model_validate_json(raw))
        return out, copies

    # ---- progress log ---------------------------------------------------------------------

    def append_event(self, request_id: str, text: str, now: float) -> int:
        """Append one line to the request's progress log; returns its sequence number."""
        return int(self._r.rpush(self._key("events", request_id), _event_entry(now, text)))

    def append_events(self, request_id: str, texts: Sequence[str], now: float) -> int:
        """Append lines to the request's progress log in one command; returns the last one's
        sequence number (0 when ``texts`` is empty: nothing is written)."""
        if not texts:
            return 0
        entries = [_event_entry(now, text) for text in texts]
        return int(self._r.rpush(self._key("events", request_id), *entries))

    def append_events_many(self, entries: Sequence[tuple[str, Sequence[str]]], now: float) -> None:
        """:meth:`append_events` for several requests, in one round trip: (request id, its
        lines) each."""
        pipe = self._r.pipeline(transaction=False)
        for request_id, texts in entries:
            if texts:
                lines = [_event_entry(now, text) for text in texts]
                pipe.rpush(self._key("events", request_id), *lines)
        if pipe.command_stack:
            pipe.execute()

    def events(self, request_id: str, after: int = 0) -> list[Event]:
        """The request's progress lines after sequence number ``after`` (0: all), in order."""
        raws = self._r.lrange(self._key("events", request_id), max(after, 0), -1)
        out = []
        for seq, raw in enumerate(raws, start=max(after, 0) + 1):
            entry = json.loads(raw)
            out.append(Event(seq=seq, at=entry["at"], text=entry["text"]))
        return out

    # ---- idempotency keys -----------------------------------------------------------------

    def claim(self, key: str, owner: str, ttl_s: float) -> bool:
        """Take ``key`` for ``owner`` for ``ttl_s`` seconds if nobody holds it. False if it is
        held, by anyone (the same owner included: a duplicate delivery of a task must not run
        twice). The TTL frees the key of an owner that died."""
        ttl_ms = max(1, round(ttl_s * 1000))
        return bool(self._r.set(self._key("claim", key), owner, nx=True, px=ttl_ms))

    def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        """Extend ``owner``'s hold on ``key`` to ``ttl_s`` from now; False if it lost it."""
        ttl_ms = max(1, round(ttl_s * 1000))
        return int(self._renew(keys=[self._key("claim", key)], args=[owner, ttl_ms])) == 1

    def is_claimed(self, key: str) -> bool:
        """Whether someone holds ``key`` now (reconcile leaves an attempt's machines alone while
        the attempt runs)."""
        return bool(self._r.exists(self._key("claim", key)))

    def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` still holds it (never someone else's claim that followed
        an expiry). True if it was released."""
        return int(self._release(keys=[self._key("claim", key)], args=[owner])) == 1


@dataclass(frozen=True)
class Together:
    """One request's part of :meth:`RedisStore.update_together_many`: the arguments of
    :meth:`RedisStore.update_together`."""

    request_id: str
    fn: Callable[[LaunchRequest], bool]
    instance_fns: Mapping[str, Callable[[Instance], bool]]
    current: LaunchRequest | None = None
    instances: Mapping[str, Instance] | None = None  # carried rows, by id (see ``current``)


def _cas_args(
    store: Store, writes: list[tuple[Any, Any]]
) -> tuple[list[str], list[str | int | float]]:
    """The keys and arguments of one compare-and-set over ``writes`` ((before, after) pairs
    of requests and instances)."""
    keys: list[str] = []
    args: list[str | int | float] = []
    for before, after in writes:
        if isinstance(before, LaunchRequest) and isinstance(after, LaunchRequest):
            keys += [
                store._request_key(before.id),
                store._request_state_key(before.state),
                store._request_state_key(after.state),
            ]
        else:
            keys += [
                store._instance_key(before.id),
                store._instance_state_key(before.state),
                store._instance_state_key(after.state),
            ]
        args += [after.id, before.version, after.version, after.model_dump_json(),
                 after.created_at]  # fmt: skip
    return keys, args


def _event_entry(at: float, text: str) -> str:
    """One line of a request's progress log, as stored."""
    return json.dumps({"at": at, "text": text})


def _carried(record: RecordT | None, record_id: str) -> RecordT | None:
    """A caller's copy of the record to start a compare-and-set from (None: read it)."""
    if record is not None and record.id != record_id:
        raise ValueError(f"carried record {record.id} is not {record_id}")
    return record


def _carried_row(rows: Mapping[str, Instance] | None, instance_id: str) -> Instance | None:
    """A caller's copy of instance ``instance_id`` to start a compare-and-set from, if it has
    one (None: read it)."""
    return None if rows is None else _carried(rows.get(instance_id), instance_id)
