"""Autoscaled clusters in Redis: one record per cluster, every write a versioned compare-and-set.

A cluster record holds what the autoscaling worker needs between ticks: the cluster file as
validated (JSON), the cloud it is played on, the standing demand, the node types cooled down
after a failed launch, every node the cluster ever committed to launching (its launch request
id, type, kind and when it was last seen busy) and the last decision. The records follow the
same pattern as :mod:`corral.services.state.store`: read with the version, compute on a copy, write
only if the stored version is still the one read; a writer that lost the race reads again.

Key layout (``P`` is the prefix)::

    P:cluster:<name>    hash {version, json}: one ClusterRecord
    P:clusters          set of cluster names
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from redis import Redis

from corral.services.state.docstore import DocStore

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
    # provider.cache_stopped_nodes: when a scale-down stopped it (kept to start again; None:
    # not stopped), and when a scale-up decided to start it again.
    stopped_at: float | None = None
    restart_at: float | None = None
    ended: str | None = None  # why it no longer counts (its request ended, or never could start)
    failure: str | None = None  # the launcher step that failed: its command and exit code


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
    # file_mounts and cluster_synced_files as packed where `cluster up` ran (a launcher Mounts)
    mounts: dict[str, Any] | None = None
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
        """The nodes that still count (their request has not ended), stopped ones included:
        taking the cluster down terminates them too."""
        return [n for n in self.nodes.values() if n.ended is None]

    def running_nodes(self) -> list[ClusterNode]:
        """The live nodes that are not stopped (launching, up, or leaving)."""
        return [n for n in self.live_nodes() if n.stopped_at is None]

    def stopped_nodes(self) -> list[ClusterNode]:
        """The workers a scale-down stopped, kept to start again (cache_stopped_nodes)."""
        return [n for n in self.live_nodes() if n.stopped_at is not None]


class ClusterStore:
    """Cluster records in one Redis (versioned documents, :mod:`corral.services.state.docstore`).
    Safe to share between threads."""

    def __init__(self, redis: Redis, prefix: str = "corral") -> None:
        self.prefix = prefix
        self._docs: DocStore[ClusterRecord] = DocStore(
            redis, prefix, "cluster", ClusterRecord.model_validate_json
        )

    def create(self, record: ClusterRecord) -> bool:
        """Store a new cluster; False (nothing written) if one of that name exists."""
        return self._docs.create(record.name, record)

    def get(self, name: str) -> ClusterRecord | None:
        """The cluster as stored, or None."""
        return self._docs.get(name)

    def names(self) -> list[str]:
        """Every registered cluster's name, sorted."""
        return self._docs.names()

    def list(self) -> list[ClusterRecord]:
        """Every cluster, by name."""
        found = (self.get(name) for name in self.names())
        return [r for r in found if r is not None]

    def write(self, record: ClusterRecord, expected_version: int) -> int:
        """Write ``record`` as version ``expected_version + 1`` if the stored version is still
        ``expected_version``: 1 written, 0 lost the race, -1 the cluster is gone. The record's
        ``version`` is set to the new one when written."""
        return self._docs.write(record.name, record, expected_version)

    def update(
        self, name: str, fn: Callable[[ClusterRecord], bool], *, retries: int = 50
    ) -> ClusterRecord | None:
        """Change one cluster with ``fn`` against concurrent writers, as
        :meth:`corral.services.state.store.Store.update_request` does: ``fn`` mutates a fresh copy
        and returns True to write it; a lost race reads again and calls ``fn`` again. Returns
        the record as written (or as read, for a no-op), None if there is no such cluster."""
        return self._docs.update(name, fn, retries=retries)

    def delete(self, name: str, expected_version: int) -> int:
        """Remove the cluster if its version is still ``expected_version`` (1, 0 or -1 as
        :meth:`write`)."""
        return self._docs.delete(name, expected_version)
