"""The local cloud's own records in Redis: its "cloud database".

Shared by the provider (which launches and terminates) and the node agent (which heartbeats and
reports its exit), so at run time it imports only the standard library (redis-py for type
hints). Every key starts with ``<prefix>:local:``:

=================================  =================================================================
``instances``                      set of every instance id the local cloud knows
``instance:<id>``                  hash: the instance record (:class:`InstanceRecord`)
``heartbeat:<id>``                 JSON ``{ts, activity, assignment, assignments, queued, pid,
                                   vcpus, memory_gib, accelerators}``, rewritten by the agent
                                   every heartbeat, with a TTL; ``assignments`` maps the id of
                                   each assignment it runs to its phase (setup | running |
                                   serving)
``assign:<id>``                    hash: assignment id -> JSON ``{id, setup, run, envs,
                                   workdir}``: the work the control plane gives an idle machine
                                   (a warm one, launched without a run), all run at once; a
                                   field deleted withdraws that one
``assign-result:<id>``             hash: assignment id -> JSON ``{id, exit_code, reason, at}``:
                                   how each ended (``completed``, ``setup_failed`` or
                                   ``withdrawn``); kept a day
``attempt:<attempt id>``           the JSON list of the instance ids that attempt created, bound
                                   by the script that takes their capacity (a worker of an
                                   earlier version wrote ``pending:<token>`` before it)
``attempt:<attempt id>:boot``      the resume lease: the token of a caller that starts the
                                   agents of an attempt whose launcher died before it started
                                   them (its launcher has a few seconds from the records'
                                   creation to start them, no key of its own); it lapses
``pool:<zone>:<type>``             set of live instance ids on the zone's on-demand/spot capacity
``reservation:<id>``               set of live instance ids on a reservation
``faults:<zone>:<type>``           how many launches met the zone's injected error
``high-water``                     hash: pool key -> the most slots it ever had in use at once
=================================  =================================================================
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import TYPE_CHECKING, Any

from corral.shared.liveness import silent_too_long

if TYPE_CHECKING:
    import redis

# Instance states (the ``state`` field). ``running`` is never stored: it is derived from a
# fresh heartbeat by :func:`derive_state`.
# The injected fault whose machines start but never register (their agents stay silent), and
# the tag their records carry for the agent to play it.
UNREGISTERED = "unregistered"
TAG_FAULT = "corral.local/fault"

PENDING = "pending"
RUNNING = "running"
TERMINATING = "terminating"
TERMINATED = "terminated"
LOST = "lost"
ENDED = frozenset({TERMINATED, LOST})

# How long the mapping attempt -> instance ids is kept: longer than any redelivery of a task.
ATTEMPT_TTL_S = 7 * 24 * 3600
# Local machines are processes on this host and share its network: each is reached at the
# loopback address (a service's ports are this host's; two asking for one port collide).
LOCAL_ADDRESS = "127.0.0.1"
# How long an ended instance's record stays visible to describe().
ENDED_RECORD_TTL_S = 24 * 3600
# Ends of work kept for the control plane to take (reconcile takes them every few seconds).
WORK_ENDED_KEPT = 10_000


class Keys:
    """The key names of one local cloud (one prefix)."""

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}:local"
        self.instances = f"{self.base}:instances"
        self.high_water = f"{self.base}:high-water"

    def record(self, instance_id: str) -> str:
        return f"{self.base}:instance:{instance_id}"

    def heartbeat(self, instance_id: str) -> str:
        return f"{self.base}:heartbeat:{instance_id}"

    def attempt(self, attempt_id: str) -> str:
        return f"{self.base}:attempt:{attempt_id}"

    def start_lease(self, attempt_id: str) -> str:
        """Held while a caller starts the agents of an attempt whose launcher died."""
        return f"{self.base}:attempt:{attempt_id}:boot"

    def pool(self, zone: str, instance_type: str) -> str:
        return f"{self.base}:pool:{zone}:{instance_type}"

    def reservation(self, reservation_id: str) -> str:
        return f"{self.base}:reservation:{reservation_id}"

    def faults(self, zone: str, instance_type: str) -> str:
        return f"{self.base}:faults:{zone}:{instance_type}"

    def assign(self, instance_id: str) -> str:
        return f"{self.base}:assign:{instance_id}"

    def assign_result(self, instance_id: str) -> str:
        return f"{self.base}:assign-result:{instance_id}"

    def work_ended(self) -> str:
        """The ids of machines whose agents recorded an assignment's end, oldest first, until
        the control plane takes them (:meth:`LocalState.take_ended_work`)."""
        return f"{self.base}:work-ended"


@dataclass
class InstanceRecord:
    """One instance as the local cloud stores it (a Redis hash of strings)."""

    id: str
    request_id: str
    attempt_id: str
    region: str
    zone: str
    instance_type: str
    market: str
    pool: str  # the key of the capacity set this instance holds a slot in
    log_path: str
    created_at: float
    vcpus: float
    memory_gib: float
    accelerators: dict[str, int] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    envs: dict[str, str] = field(default_factory=dict)
    setup: str | None = None
    run: str | None = None
    workdir: str | None = None
    files: dict[str, Any] = field(default_factory=dict)  # a bundle to unpack, a repo to clone
    reservation_id: str | None = None
    state: str = PENDING
    pid: int | None = None  # the agent process
    # When the launcher starts the agent (its boot's end; it was handed the start then): no
    # agent has started before it, and none is to be started by anyone else.
    start_at: float | None = None
    child_pid: int | None = None  # the agent's current setup/run process (a group leader)
    child_pids: list[int] = field(default_factory=list)  # every assignment's group leader
    first_heartbeat_at: float | None = None
    last_beat_at: float | None = None  # the agent's latest heartbeat (the key itself expires)
    activity: str | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    end_reason: str | None = None

    _JSON = ("accelerators", "tags", "envs", "child_pids", "files")
    _FLOAT = (
        "created_at",
        "start_at",
        "vcpus",
        "memory_gib",
        "first_heartbeat_at",
        "last_beat_at",
        "ended_at",
    )
    _INT = ("pid", "child_pid", "exit_code")

    def to_hash(self) -> dict[str, str]:
        """The record as Redis hash fields; None fields are left out."""
        out: dict[str, str] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = json.dumps(value) if name in self._JSON else str(value)
        return out

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> InstanceRecord:
        """Read a record back from ``HGETALL``; unknown fields are ignored."""
        # A boot watch reads every booting machine's record on every look: one table lookup
        # per field, and the empty JSON values most records hold are not parsed.
        read = _FIELD_READERS
        return cls(**{name: read[name](text) for name, text in raw.items() if name in read})

    def with_changes(self, raw: dict[str, str]) -> InstanceRecord:
        """This record with the fields that change (:data:`MUTABLE_FIELDS`) as ``raw`` holds
        them (a brief read; a field it lacks is unset), the rest as they are here."""
        new = object.__new__(InstanceRecord)
        values = new.__dict__
        values.update(self.__dict__)
        values.update(_UNSET)
        for name, make in _UNSET_FRESH.items():
            values[name] = make()
        values["tags"] = dict(self.tags)  # handed on (ProviderInstance): never shared
        read = _FIELD_READERS
        for name in MUTABLE_FIELDS:
            if name in raw:
                values[name] = read[name](raw[name])
        return new

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


def _json_field(text: str) -> Any:
    return {} if text == "{}" else [] if text == "[]" else json.loads(text)


def _field_reader(name: str) -> Callable[[str], Any]:
    if name in InstanceRecord._JSON:
        return _json_field
    if name in InstanceRecord._FLOAT:
        return float
    return int if name in InstanceRecord._INT else str


_FIELD_READERS = {name: _field_reader(name) for name in InstanceRecord.__dataclass_fields__}


# Take `count` capacity slots at once (all or none) and bind them to the attempt. Whoever binds
# the attempt starts its agents; a caller that sees the binding waits for them, and starts
# them itself only once the binder had its time to (the records' created_at plus a margin:
# no start lease is written here, a Redis command less per launch).
# KEYS: pool, instances, attempt, high-water hash, record keys...   ARGV: limit, ids JSON,
# attempt TTL, the pool's high-water mark as the caller last saw it, record JSONs... (one per
# record key, each a flat {field: string}). Returns {1, used, high} on success, {0, used} when
# full, {-1, 0} when the attempt is bound already (another caller launched it), {-2, 0} when
# an id is already taken. An id is taken when it is in the set of every instance (which holds
# each id as long as its record exists: an id leaves it only once its record expired): the
# SADD that adds it says so, so no EXISTS per record is needed (a Redis command less per
# machine); on a collision, practically never, the ids this call added are taken out again.
# The high-water hash keeps the most slots a pool ever had in use. It only grows, so the mark
# a caller saw is a floor of the stored one: a launch that stays at or under it neither reads
# nor writes the hash (a Redis command less per launch once a burst reached its height). The
# attempt is bound first, by a SET NX that says whether another caller bound it already (no
# EXISTS before it), and unbound again when the call takes nothing.
_RESERVE = """
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'EX', tonumber(ARGV[3])) then return {-1, 0} end
local n = #KEYS - 4
local used = redis.call('SCARD', KEYS[1])
if used + n > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[3])
  return {0, used}
end
local recs = {}
for i = 5, #KEYS do
  recs[i] = cjson.decode(ARGV[i])
  if redis.call('SADD', KEYS[2], recs[i]['id']) == 0 then
    for j = 5, i - 1 do redis.call('SREM', KEYS[2], recs[j]['id']) end
    redis.call('DEL', KEYS[3])
    return {-2, 0}
  end
end
for i = 5, #KEYS do
  local rec = recs[i]
  local flat = {}
  for f, v in pairs(rec) do flat[#flat + 1] = f; flat[#flat + 1] = v end
  redis.call('HSET', KEYS[i], unpack(flat))
  redis.call('SADD', KEYS[1], rec['id'])
end
local now_used = used + n  -- every id is new (checked above), so each SADD added one
local high = tonumber(ARGV[4])
if now_used > high then
  high = tonumber(redis.call('HGET', KEYS[4], KEYS[1]) or '0')
  if now_used > high then
    redis.call('HSET', KEYS[4], KEYS[1], now_used)
    high = now_used
  end
end
return {1, now_used, high}
"""

# End an instance once: set its final state and free its capacity slot; with the agent's last
# beat (ARGV[6] set), write it too, in the same step (the heartbeat key, the record's activity
# and last_beat_at, and first_heartbeat_at if the agent was never heard and the record has
# none: read with the record's end, written in the same HSET).
# KEYS: record, pool, heartbeat   ARGV: state, exit code ('' = none), reason, now, record TTL,
# beat JSON ('' = none), beat TTL ms, activity, beat time, first ('1': never heard). Returns 1
# when this call ended it, 0 when it had ended already or is unknown (an unknown record gets no
# beat either).
_FINISH = """
local held = redis.call('HMGET', KEYS[1], 'id', 'ended_at', 'first_heartbeat_at')
if not held[1] then return 0 end
local fields = {}
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[3], ARGV[6], 'PX', tonumber(ARGV[7]))
  fields = {'activity', ARGV[8], 'last_beat_at', ARGV[9]}
  if ARGV[10] == '1' and not held[3] then
    fields[5] = 'first_heartbeat_at'; fields[6] = ARGV[9]
  end
end
if held[2] then
  if #fields > 0 then redis.call('HSET', KEYS[1], unpack(fields)) end
  return 0
end
local n = #fields
fields[n + 1] = 'state'; fields[n + 2] = ARGV[1]
fields[n + 3] = 'ended_at'; fields[n + 4] = ARGV[4]
fields[n + 5] = 'end_reason'; fields[n + 6] = ARGV[3]
if ARGV[2] ~= '' then fields[n + 7] = 'exit_code'; fields[n + 8] = ARGV[2] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('SREM', KEYS[2], held[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
return 1
"""

# What of a record changes after its launch wrote it (the rest is written once, at the launch).
MUTABLE_FIELDS = (
    "state",
    "pid",
    "start_at",
    "child_pid",
    "child_pids",
    "first_heartbeat_at",
    "last_beat_at",
    "activity",
    "exit_code",
    "ended_at",
    "end_reason",
)
# The changing fields' values when unset (a brief read leaves out what is unset); a field
# whose default is made afresh for each record (a list) is made in with_changes.
_UNSET = {
    name: f.default
    for name, f in InstanceRecord.__dataclass_fields__.items()
    if name in MUTABLE_FIELDS and f.default is not MISSING
}
_UNSET_FRESH = {
    name: f.default_factory
    for name, f in InstanceRecord.__dataclass_fields__.items()
    if name in MUTABLE_FIELDS and f.default_factory is not MISSING
}

# Read records and, for each one that has not ended, its agent's last heartbeat: an ended
# record is reported as it is (derive_state never looks at its beat), so its heartbeat is not
# read (a quick job is usually over at the boot watch's first look: a GET less per machine).
# A record the reader holds already (ARGV[n] '1' for the n-th) is read in brief: its id and
# the fields that change (a boot watch looks at a thousand booting machines twice a second:
# their envs, tags and task are the same on every look).
# KEYS: record, heartbeat, record, heartbeat... Returns {fields (flat; none: no record), beat
# (nil: none, or not read)} per record.
_RECORDS = (
    """
local brief_fields = {'id', '"""
    + "', '".join(MUTABLE_FIELDS)
    + """'}
local out = {}
for i = 1, #KEYS, 2 do
  local rec
  if ARGV[(i + 1) / 2] == '1' then
    local held = redis.call('HMGET', KEYS[i], unpack(brief_fields))
    rec = {}
    if held[1] then
      for j = 1, #brief_fields do
        if held[j] then rec[#rec + 1] = brief_fields[j]; rec[#rec + 1] = held[j] end
      end
    end
  else
    rec = redis.call('HGETALL', KEYS[i])
  end
  local live = #rec > 0
  for j = 1, #rec, 2 do
    if rec[j] == 'ended_at' then live = false; break end
  end
  out[#out + 1] = rec
  out[#out + 1] = live and redis.call('GET', KEYS[i + 1]) or false
end
return out
"""
)

# Delete a key only if it still holds the value we set (a claim we own).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Set the state field unless the instance has ended or is unknown (then -1). Returns the
# agent's pid as recorded; 0 when none is yet, and then its pid field is set to 0: the mark
# that tells whoever is starting the agent (CloudState.started) that it must stop it.
_SET_STATE = """
local held = redis.call('HMGET', KEYS[1], 'id', 'ended_at', 'pid')
if not held[1] or held[2] then return -1 end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
if held[3] then return tonumber(held[3]) end
redis.call('HSET', KEYS[1], 'pid', '0')
return 0
"""


# An agent the launcher started at its boot's end records its own pid (no one else knows it),
# and only if the machine is still to start: pending, not ended, no other agent's pid (a
# terminate during the boot left its state and a pid of 0; a resumed launch started one).
# Returns 'ok' or why not (the state, 'already started' or 'gone').
_CLAIM_START = """
local held = redis.call('HMGET', KEYS[1], 'id', 'ended_at', 'state', 'pid')
if not held[1] then return 'gone' end
if held[2] or held[3] ~= ARGV[2] then return held[3] or 'ended' end
if held[4] and held[4] ~= ARGV[1] then return 'already started' end
redis.call('HSET', KEYS[1], 'pid', ARGV[1])
return 'ok'
"""


BOUND_MAX = 20_000  # attempts whose bound instance ids a process keeps


class CloudState:
    """Reads and atomic writes on the local cloud's records."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.r = client
        self.keys = Keys(prefix)
        self._reserve = client.register_script(_RESERVE)
        self._finish = client.register_script(_FINISH)
        self._release = client.register_script(_RELEASE)
        self._set_state = client.register_script(_SET_STATE)
        self._records = client.register_script(_RECORDS)
        self._claim_start = client.register_script(_CLAIM_START)
        # Each pool's high-water mark as this process last saw it (a floor of the stored one).
        self._high_seen: dict[str, int] = {}
        # The instance ids each launched attempt bound, as read: a binding never changes once
        # made (the attempt's key is set once; only a launch that failed gives it back, and a
        # failed launch is never watched), and a boot watch asks for the same attempts on
        # every look.
        self._bound: dict[str, list[str]] = {}

    # --- attempts and capacity -------------------------------------------------------------
    def launched_ids(self, attempt_ids: list[str]) -> list[str]:
        """The instance ids bound to these attempts (one round trip; an attempt still being
        launched, or never launched here, has none yet)."""
        if not attempt_ids:
            return []
        known = self._bound
        unread = [a for a in attempt_ids if a not in known]
        if unread:
            if len(known) + len(unread) > BOUND_MAX:
                known.clear()  # attempts this process no longer asks about
            for attempt, value in zip(
                unread, self.r.mget([self.keys.attempt(a) for a in unread]), strict=True
            ):
                if ids := bound_ids(value):
                    known[attempt] = ids
        return [iid for a in attempt_ids for iid in known.get(a, ())]

    def heard_nodes(self, attempt_id: str) -> list[bool]:
        """Whether each instance of the attempt, in node order, has been heard (its agent
        beat, or it ended): its address is known. Empty while nothing is bound to it. The
        agent asks this (its own client's commands only)."""
        heard = []
        for iid in bound_ids(self.r.get(self.keys.attempt(attempt_id))):
            raw = self.r.hgetall(self.keys.record(iid))
            heard.append(bool(raw.get("first_heartbeat_at") or raw.get("ended_at")))
        return heard

    def attempt_value(self, attempt_id: str) -> str | None:
        value = self.r.get(self.keys.attempt(attempt_id))
        return None if value is None else str(value)

    def release_attempt(self, attempt_id: str, value: str) -> None:
        """Give the attempt back (after a failed launch) if it still holds ``value``."""
        self._release(keys=[self.keys.attempt(attempt_id)], args=[value])

    def unbind_attempt(self, attempt_id: str, records: list[InstanceRecord]) -> None:
        """Forget what a rolled-back launch bound to the attempt, so a retry launches anew."""
        self.release_attempt(attempt_id, json.dumps([rec.id for rec in records]))

    def reserve(
        self, pool: str, limit: int, attempt_id: str, records: list[InstanceRecord]
    ) -> tuple[int, int]:
        """Atomically take ``len(records)`` slots of ``pool`` (at most ``limit`` live), write
        the records and bind their ids to the attempt, unless the attempt is bound already.
        Returns (status, used): status 1 done, 0 full, -1 the attempt was bound already, -2
        an id collided."""
        ids = json.dumps([rec.id for rec in records])
        keys = [pool, self.keys.instances, self.keys.attempt(attempt_id), self.keys.high_water]
        keys += [self.keys.record(rec.id) for rec in records]
        args: list[str | int] = [limit, ids, ATTEMPT_TTL_S, self._high_seen.get(pool, 0)]
        args += [json.dumps(rec.to_hash()) for rec in records]
        status, used, *high = self._reserve(keys=keys, args=args)
        if high:
            self._high_seen[pool] = max(int(high[0]), self._high_seen.get(pool, 0))
        return int(status), int(used)

    def started(self, records: list[InstanceRecord]) -> list[str | None]:
        """The agents of ``records`` were started: their pids written, and the state of each
        record a terminate came to meanwhile (None: no record). A pid is written only where
        none is (one command, in one round trip for all): a terminate that found no pid to
        signal left one (0, see ``_SET_STATE``), so only those records are written again and
        read back; the others are as the launch wrote them (PENDING). A caller that would
        start the agents of the attempt itself looks for agents not started first, and finds
        none once the pids are written.

        A record whose start the launcher keeps for its boot's end (``start_at``, no pid yet)
        gets that time written and its state read in the same round trip: the agent checks
        its state when it starts, and the caller stops what a terminate came to meanwhile."""
        started = [rec for rec in records if rec.pid is not None]
        kept = [rec for rec in records if rec.pid is None and rec.start_at is not None]
        pipe = self.r.pipeline(transaction=False)
        for rec in started:
            pipe.hsetnx(self.keys.record(rec.id), "pid", str(rec.pid))
        for rec in kept:
            pipe.hset(self.keys.record(rec.id), "start_at", repr(rec.start_at))
            pipe.hget(self.keys.record(rec.id), "state")
        replies = pipe.execute() if started or kept else []
        written = dict(zip((r.id for r in started), replies[: len(started)], strict=True))
        marked = [rec for rec in records if not written.get(rec.id, 1)]
        states: dict[str, str | None] = {rec.id: PENDING for rec in records}
        for rec, state in zip(kept, replies[len(started) + 1 :: 2], strict=True):
            states[rec.id] = None if state is None else str(state)
        if marked:
            pipe = self.r.pipeline(transaction=False)
            for rec in marked:
                pipe.hset(self.keys.record(rec.id), "pid", str(rec.pid))
            for rec in marked:
                pipe.hget(self.keys.record(rec.id), "state")
            replies = pipe.execute()[len(marked) :]
            for rec, state in zip(marked, replies, strict=True):
                states[rec.id] = None if state is None else str(state)
        return [states[rec.id] for rec in records]

    def claim_start(self, instance_id: str, pid: int) -> str:
        """An agent started at its boot's end records its pid: 'ok', or why it must not run
        (see ``_CLAIM_START``)."""
        return str(self._claim_start(keys=[self.keys.record(instance_id)], args=[pid, PENDING]))

    def high_water(self) -> dict[str, int]:
        """Per pool key, the most instances it ever held at once (tests check capacity by it)."""
        raw = self.r.hgetall(self.keys.high_water)
        return {str(k): int(v) for k, v in raw.items()}

    def count_fault(self, zone: str, instance_type: str) -> int:
        """Count one more launch that met the zone's injected error; returns the count."""
        return int(self.r.incr(self.keys.faults(zone, instance_type)))

    # --- records ---------------------------------------------------------------------------
    def record(self, instance_id: str) -> InstanceRecord | None:
        raw: dict[str, str] = self.r.hgetall(self.keys.record(instance_id))  # type: ignore[assignment]
        return InstanceRecord.from_hash(raw) if raw else None

    def records_and_heartbeats(
        self, ids: list[str], held: dict[str, InstanceRecord] | None = None
    ) -> list[tuple[str, InstanceRecord | None, dict[str, Any] | None]]:
        """Each id with its record and last heartbeat (None where missing, and for an ended
        record, whose beat no reader needs), in one round trip. ``held``: records the caller
        read before, by id: of those only the fields that change are read, and the rest is
        taken from the held record."""
        if not ids:
            return []
        held = held or {}
        keys = [k for iid in ids for k in (self.keys.record(iid), self.keys.heartbeat(iid))]
        brief = ["1" if iid in held else "0" for iid in ids]
        replies = self._records(keys=keys, args=brief)
        out: list[tuple[str, InstanceRecord | None, dict[str, Any] | None]] = []
        for i, iid in enumerate(ids):
            flat, beat = replies[2 * i], replies[2 * i + 1]
            raw = dict(zip(flat[0::2], flat[1::2], strict=True))
            if not raw:
                rec = None
            elif brief[i] == "1":
                rec = held[iid].with_changes(raw)
            else:
                rec = InstanceRecord.from_hash(raw)
            out.append((iid, rec, json.loads(beat) if beat else None))
        return out

    def instance_ids(self) -> list[str]:
        return sorted(str(i) for i in self.r.smembers(self.keys.instances))

    def forget(self, instance_id: str) -> None:
        """Drop an id whose record has expired from the index."""
        self.r.srem(self.keys.instances, instance_id)

    def set_fields(self, instance_id: str, **fields: str | int | float) -> None:
        self.r.hset(self.keys.record(instance_id), mapping={k: str(v) for k, v in fields.items()})

    def set_state(self, instance_id: str, state: str) -> int | None:
        """Set a live instance's state; None if it has ended or is unknown, else its agent's
        pid as recorded now (0: not started yet; its starter will stop it)."""
        pid = int(self._set_state(keys=[self.keys.record(instance_id)], args=[state]))
        return None if pid < 0 else pid

    def finish(
        self,
        rec: InstanceRecord,
        *,
        state: str,
        exit_code: int | None,
        reason: str,
        now: float,
        beat: dict[str, Any] | None = None,
        beat_ttl_s: float = 0.0,
        first: bool = False,
    ) -> bool:
        """End the instance once: final state, capacity slot freed. With
        ``beat`` (the agent's last heartbeat, as :meth:`heartbeat` builds it; ``first``: the
        agent was never heard), it is written in the same step, whether or not the instance
        had ended already."""
        keys = [self.keys.record(rec.id), rec.pool, self.keys.heartbeat(rec.id)]
        args: list[str | int | float] = [
            state,
            "" if exit_code is None else exit_code,
            reason,
            now,
            ENDED_RECORD_TTL_S,
        ]
        if beat is None:
            args += ["", 0, "", 0, ""]
        else:
            ttl_ms = max(1, int(beat_ttl_s * 1000))
            args += [json.dumps(beat), ttl_ms, beat["activity"], beat["ts"], "1" if first else ""]
        return bool(self._finish(keys=keys, args=args))

    def heartbeat(
        self,
        rec: InstanceRecord,
        activity: str,
        now: float,
        ttl_s: float,
        queued: dict[str, Any] | None = None,
        assignment: str | None = None,
        assignments: dict[str, str] | None = None,
        status: dict[str, Any] | None = None,
        first: bool = True,
        child_pid: int | None = None,
    ) -> None:
        """The agent's beat: a fresh heartbeat key, its activity, its first beat's time (and
        ``child_pid``, the task it just started, in the same write), the
        assignments it runs (id -> phase; ``assignment`` is any one of them, for older
        readers), the work queued on the node (the demand its workload reported), if any, and
        its ``status`` (idle_s, up_s, ready: see the agent's Link). ``first``: the instance has
        not been heard yet (its record, as its agent read it at start, has no first beat's
        time, and this agent has not beaten since): the beat writes its time as the first
        beat's, in the same HSET (a later beat leaves it alone, without asking)."""
        beat = beat_value(rec, activity, now, queued, assignment, assignments, status)
        # One round trip, no MULTI/EXEC: a reader that sees the new key before the record's
        # fields judges by the key (derive_state), so the beat need not be atomic.
        pipe = self.r.pipeline(transaction=False)
        pipe.set(self.keys.heartbeat(rec.id), json.dumps(beat), px=max(1, int(ttl_s * 1000)))
        fields: dict[str, str | float] = {"activity": activity, "last_beat_at": now}
        if child_pid is not None:
            fields["child_pid"] = str(child_pid)
        if first:
            fields["first_heartbeat_at"] = now
        pipe.hset(self.keys.record(rec.id), mapping=fields)  # type: ignore[arg-type]
        pipe.execute()

    # --- assignments (warm machines) -------------------------------------------------------
    def assignments(self, instance_id: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """The machine's assignments by id, and the fields that hold no readable assignment
        (id -> why): a value must be a JSON object whose ``id``, if any, is its field."""
        raw: dict[str, str] = self.r.hgetall(self.keys.assign(instance_id))  # type: ignore[assignment]
        good: dict[str, dict[str, Any]] = {}
        bad: dict[str, str] = {}
        for aid, text in raw.items():
            value = _json_or_none(text)
            if isinstance(value, dict) and value.get("id", aid) == aid:
                good[aid] = {**value, "id": aid}
            else:
                bad[aid] = f"not an assignment: {text[:80]!r}"
        return good, bad

    def next_uid(self) -> int:
        """A number never given before in this cloud (an assignment's user comes from it)."""
        return int(self.r.incr(f"{self.keys.base}:uids"))

    def put_assignment(self, instance_id: str, assignment: dict[str, Any]) -> None:
        """Add (or replace) one assignment, under its id."""
        key = self.keys.assign(instance_id)
        self.r.hset(key, str(assignment["id"]), json.dumps(assignment))

    def drop_assignment(self, instance_id: str, assignment_id: str | None = None) -> None:
        """Withdraw one assignment, or (``assignment_id`` None) all of them."""
        key = self.keys.assign(instance_id)
        if assignment_id is None:
            self.r.delete(key)
        else:
            self.r.hdel(key, assignment_id)

    def put_assign_results(
        self, instance_id: str, results: list[dict[str, Any]], drop: list[str] | None = None
    ) -> None:
        """Record how assignments ended, and forget the results in ``drop``, at once. The
        hash lives a day past its last write, like an ended instance's record."""
        key = self.keys.assign_result(instance_id)
        pipe = self.r.pipeline(transaction=True)
        for result in results:
            pipe.hset(key, str(result["id"]), json.dumps(result))
        if drop:
            pipe.hdel(key, *drop)
        pipe.pexpire(key, ENDED_RECORD_TTL_S * 1000)
        if results:  # the control plane's bell: this machine's work ended
            pipe.rpush(self.keys.work_ended(), instance_id)
            pipe.ltrim(self.keys.work_ended(), -WORK_ENDED_KEPT, -1)
        pipe.execute()

    def take_ended_work(self) -> list[str]:
        """The machines whose work ended since the last call (each once), taken."""
        pipe = self.r.pipeline(transaction=True)
        pipe.lrange(self.keys.work_ended(), 0, -1)
        pipe.delete(self.keys.work_ended())
        ids, _ = pipe.execute()
        return list(dict.fromkeys(str(i) for i in ids))

    def last_beat(self, instance_id: str) -> dict[str, Any] | None:
        """The agent's last heartbeat, None once it expired (the agent is silent)."""
        raw = self.r.get(self.keys.heartbeat(instance_id))
        beat = _json_or_none(str(raw)) if raw else None
        return beat if isinstance(beat, dict) else None

    def assignment_view(
        self, instance_id: str
    ) -> tuple[list[str], dict[str, Any] | None, dict[str, dict[str, Any]]]:
        """(assigned ids sorted, last heartbeat or None, results by id), in one round trip.
        Unreadable results are left out."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(self.keys.assign(instance_id))
        pipe.get(self.keys.heartbeat(instance_id))
        pipe.hgetall(self.keys.assign_result(instance_id))
        assigned, beat, raw_results = pipe.execute()
        results = {}
        for aid, text in (raw_results or {}).items():
            value = _json_or_none(text)
            if isinstance(value, dict):
                results[str(aid)] = value
        return sorted(str(a) for a in assigned or {}), json.loads(beat) if beat else None, results


def bound_ids(value: Any) -> list[str]:
    """The instance ids an attempt's value binds (none while it is being launched)."""
    if value is None or str(value).startswith("pending:"):
        return []
    ids = json.loads(value)
    return [str(i) for i in ids] if isinstance(ids, list) else []


def beat_value(
    rec: InstanceRecord,
    activity: str,
    now: float,
    queued: dict[str, Any] | None = None,
    assignment: str | None = None,
    assignments: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What an agent's heartbeat key holds."""
    return {
        **(status or {}),
        "ts": now,
        "activity": activity,
        "assignment": assignment,
        "assignments": assignments or {},
        "queued": queued,
        "pid": rec.pid,
        "vcpus": rec.vcpus,
        "memory_gib": rec.memory_gib,
        "accelerators": rec.accelerators,
    }


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def derive_state(
    rec: InstanceRecord,
    beat: dict[str, Any] | None,
    *,
    alive: bool,
    now: float,
    heartbeat_timeout_s: float,
    start_timeout_s: float,
    outage_end: float = 0.0,
) -> str:
    """The state describe() reports, from the record, the last heartbeat and whether the
    agent process is alive (checked by pid and command line). Silence is counted only from
    the end of the control plane's last outage (``outage_end``, see
    :mod:`corral.shared.liveness`): an agent that could not reach Redis is not lost for it."""
    if rec.ended:
        return rec.state
    if not alive:
        if rec.pid is None and now - rec.created_at < start_timeout_s:
            return PENDING  # capacity taken, the process not started yet (launch delay)
        return LOST  # gone without writing its final record
    if rec.state == TERMINATING:
        return TERMINATING
    if beat is not None and now - float(beat["ts"]) <= heartbeat_timeout_s:
        return RUNNING
    if rec.first_heartbeat_at is None:
        if not silent_too_long(rec.created_at, now, start_timeout_s, outage_end):
            return PENDING  # still starting up
        return LOST  # never reported
    last = float(beat["ts"]) if beat else rec.last_beat_at or rec.first_heartbeat_at
    if not silent_too_long(last, now, heartbeat_timeout_s, outage_end):
        return RUNNING  # quiet only since the control plane's outage: not charged for it
    return LOST  # alive but silent while the control plane listened: hung, or cut off
