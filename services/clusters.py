"""Autoscaled clusters in Redis: one record per cluster, every write a versioned compare-and-set.

A cluster record holds what the autoscaling worker needs between ticks: the cluster file as
validated (JSON), the cloud it is played on, the standing demand, the node types cooled down
after a failed launch, every node the cluster ever committed to launching (its launch request
id, type, kind and when it was last seen busy) and the last decision. The records follow the
same pattern as :mod:`corral.services.store`: read with the version, compute on a copy, write
only if the stored version is still the one read; a writer that lost the race reads again.

Key layout (``P`` is the prefix)::

    P:cluster:<name>    hash {version, json}: one ClusterRecord
    P:clusters          set of cluster names
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from redis import Redis

# KEYS[1] the record, KEYS[2] the set of names; ARGV: name, version, json.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""

# KEYS[1] the record; ARGV: expected version, new version, json.
# Returns 1 if written, 0 if the version moved on (lost race), -1 if the record is gone.
_CAS = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return -1 end
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
return 1
"""

# KEYS[1] the record, KEYS[2] the set of names; ARGV: name, expected version.
_DELETE = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return -1 end
if current ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
"""

NodeKind = Literal["head", "worker"]
DECISIONS_KEPT = 20


class ClusterNode(BaseModel):
    """One node the cluster committed to launching: a launch request of its own."""

    model_config = ConfigDict(extra="allow")

    request_id: str  # the node's id too: terminating the node cancels this request
    node_type: str
    kind: NodeKind
    launch_hash: str
    committed_at: float  # when the decision that launched it was committed
    last_busy_at: float | None = None  # last tick its agent reported work (setup or run)
    terminate_sent_at: float | None = None  # when the autoscaler decided to terminate it
    ended: str | None = None  # why it no longer counts (its request ended, or never could start)


class ClusterRecord(BaseModel):
    """A cluster as stored. ``version`` is bumped by every write (compare-and-set checks it)."""

    model_config = ConfigDict(extra="allow")  # a newer worker's fields survive an older one

    name: str
    uid: str  # differs between two clusters of the same name: request ids stay unique
    file_name: str  # the cluster file's name, for messages
    cluster: dict[str, Any]  # the cluster file as validated, in JSON form
    cloud: str | None = None  # the --cloud override ("local"), None: the file's provider
    state: Literal["active", "down"] = "active"
    demand: dict[str, Any] | None = None  # the standing demand (a Demand as JSON); None: none
    cooldowns: dict[str, float] = Field(default_factory=dict)  # node type -> until (epoch s)
    nodes: dict[str, ClusterNode] = Field(default_factory=dict)  # by request id
    last_decision: dict[str, Any] | None = None  # {launch, terminate, reasons, at, version}
    # The last decisions that launched or terminated something, oldest first (at most
    # DECISIONS_KEPT): what `cluster status` shows of the cluster's recent past.
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    version: int = 0
    created_at: float
    updated_at: float
    down_at: float | None = None

    def live_nodes(self) -> list[ClusterNode]:
        """The nodes that still count (their request has not ended)."""
        return [n for n in self.nodes.values() if n.ended is None]


class ClusterExists(ValueError):
    """A cluster of that name is already registered."""


class ClusterStore:
    """Cluster records in one Redis. Safe to share between threads."""

    def __init__(self, redis: Redis, prefix: str = "corral") -> None:
        self._r = redis
        self.prefix = prefix
        self._create = redis.register_script(_CREATE)
        self._cas = redis.register_script(_CAS)
        self._delete = redis.register_script(_DELETE)

    def _key(self, name: str) -> str:
        return f"{self.prefix}:cluster:{name}"

    @property
    def _names_key(self) -> str:
        return f"{self.prefix}:clusters"

    def create(self, record: ClusterRecord) -> bool:
        """Store a new cluster; False (nothing written) if one of that name exists."""
        args: list[str | int] = [record.name, record.version, record.model_dump_json()]
        keys = [self._key(record.name), self._names_key]
        return int(self._create(keys=keys, args=args)) == 1

    def get(self, name: str) -> ClusterRecord | None:
        """The cluster as stored, or None."""
        raw = self._r.hget(self._key(name), "json")
        return None if raw is None else ClusterRecord.model_validate_json(raw)

    def names(self) -> list[str]:
        """Every registered cluster's name, sorted."""
        return sorted(_text(n) for n in self._r.smembers(self._names_key))

    def list(self) -> list[ClusterRecord]:
        """Every cluster, by name."""
        found = (self.get(name) for name in self.names())
        return [r for r in found if r is not None]

    def write(self, record: ClusterRecord, expected_version: int) -> int:
        """Write ``record`` as version ``expected_version + 1`` if the stored version is still
        ``expected_version``: 1 written, 0 lost the race, -1 the cluster is gone. The record's
        ``version`` is set to the new one when written."""
        new = record.model_copy(update={"version": expected_version + 1})
        args: list[str | int] = [expected_version, new.version, new.model_dump_json()]
        written = int(self._cas(keys=[self._key(record.name)], args=args))
        if written == 1:
            record.version = new.version
        return written

    def update(
        self, name: str, fn: Callable[[ClusterRecord], bool], *, retries: int = 50
    ) -> ClusterRecord | None:
        """Change one cluster with ``fn`` against concurrent writers, as
        :meth:`corral.services.store.Store.update_request` does: ``fn`` mutates a fresh copy
        and returns True to write it; a lost race reads again and calls ``fn`` again. Returns
        the record as written (or as read, for a no-op), None if there is no such cluster."""
        for attempt in range(retries + 1):
            current = self.get(name)
            if current is None:
                return None
            work = current.model_copy(deep=True)
            if not fn(work):
                return current
            written = self.write(work, current.version)
            if written == 1:
                return work
            if written == -1:
                return None
            _backoff(attempt)
        raise RuntimeError(f"cluster {name}: still losing to other writers after {retries} tries")

    def delete(self, name: str, expected_version: int) -> int:
        """Remove the cluster if its version is still ``expected_version`` (1, 0 or -1 as
        :meth:`write`)."""
        keys = [self._key(name), self._names_key]
        return int(self._delete(keys=keys, args=[name, expected_version]))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _backoff(attempt: int) -> None:
    """A short jittered sleep so writers that collided do not collide again in lockstep."""
    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
