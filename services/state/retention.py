"""Retention: finished requests, their events and instances, and keyed submissions are
exported to a JSON-lines file, then deleted, once they have been finished longer than the
retention time (``CORRAL_RETENTION_DAYS``, 30 by default).

Nothing in Redis expired before (issue #27): requests, events and submissions grew without
bound in a Redis that runs ``noeviction``, where full memory stops the control plane. A
record is deleted only after its export line was written and flushed to disk, so a crash
between the two repeats an export (a duplicate line), never loses a record. A request with a
machine not yet ended is kept whatever its age.

The export file (``<home>/exports/corral-export-<UTC date>.jsonl``, mode 0600) holds one
object per line: ``{"kind": "request", "request": {...}, "events": [...], "instances":
[...], "submissions": {key: {...}}}``, ``{"kind": "submission", "key": ..., ...}`` for a
refused submission, or ``{"kind": "machine", "machine": {...}}`` for a row of the machine table
a pool let go (its machine ended before the retention time).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.services.state import as_text
from corral.services.state.machines import MachineTable
from corral.services.state.store import Store

if TYPE_CHECKING:
    from corral.services.settings import Settings
from corral.shared.lifecycle import (
    INSTANCE_STATES,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_REQUEST_STATES,
    RequestState,
)
from corral.shared.records import Instance, LaunchRequest

DAY_S = 86_400.0


@dataclass
class Swept:
    """What one sweep exported and deleted."""

    requests: int = 0
    submissions: int = 0
    machines: int = 0  # rows of the pools' machines, ended long ago
    kept_running: list[str] = field(default_factory=list)  # finished, a machine still up
    export_file: Path | None = None


def sweep(store: Store, *, now: float, keep_s: float, export_dir: Path, batch: int = 500) -> Swept:
    """Export, then delete, what finished before ``now - keep_s`` (at most ``batch`` requests
    per state per call: the beat calls it again)."""
    cutoff = now - keep_s
    day = time.strftime("%Y%m%d", time.gmtime(now))
    export_file = export_dir / f"corral-export-{day}.jsonl"
    out = Swept(export_file=export_file)
    by_request = _submissions_by_request(store)
    for state in sorted(TERMINAL_REQUEST_STATES):
        index = store._request_state_key(state)
        # Scored by creation: a request finished before the cutoff was created before it.
        ids = [
            as_text(i) for i in store._r.zrangebyscore(index, "-inf", cutoff, start=0, num=batch)
        ]
        for req in store._load(LaunchRequest, (store._request_key(i) for i in ids)):
            if req.updated_at >= cutoff or req.state not in TERMINAL_REQUEST_STATES:
                continue
            instances = _instances(store, req.id)
            if any(i.state not in TERMINAL_INSTANCE_STATES for i in instances):
                out.kept_running.append(req.id)
                continue
            subs = by_request.get(req.id, {})
            line = {
                "kind": "request",
                "request": req.model_dump(mode="json"),
                "events": [e.model_dump(mode="json") for e in store.events(req.id)],
                "instances": [i.model_dump(mode="json") for i in instances],
                "submissions": subs,
            }
            _export(export_file, line)
            _delete_request(store, req, instances, list(subs))
            out.requests += 1
    ended = MachineTable(store._r, store.prefix).ended_before(cutoff, batch)
    for row in ended:  # a pool's machines, let go long ago (a request's go with it, above)
        _export(export_file, {"kind": "machine", "machine": row.model_dump(mode="json")})
    MachineTable(store._r, store.prefix).forget(ended)
    out.machines = len(ended)
    for key, sub in by_request.get("", {}).items():  # refused, never a request
        if float(sub.get("at") or 0) < cutoff:
            _export(export_file, {"kind": "submission", "key": key, **sub})
            store._r.delete(store._key("submission", key))
            out.submissions += 1
    return out


def sweep_for_settings(store: Store, settings: Settings, now: float | None = None) -> Swept:
    """:func:`sweep` with the settings' retention time and export folder."""
    return sweep(
        store,
        now=time.time() if now is None else now,
        keep_s=settings.retention_days * DAY_S,
        export_dir=settings.retention_export_dir or settings.home / "exports",
    )


def _submissions_by_request(store: Store) -> dict[str, dict[str, dict[str, Any]]]:
    """Every keyed submission, by the request it created ("" for refusals)."""
    prefix = store._key("submission", "")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for raw in store._r.scan_iter(match=f"{prefix}*", count=1000):
        key = as_text(raw)
        fields = {as_text(k): as_text(v) for k, v in store._r.hgetall(key).items()}
        if not fields:
            continue
        out.setdefault(fields.get("request_id", ""), {})[key[len(prefix) :]] = fields
    return out


def _instances(store: Store, request_id: str) -> list[Instance]:
    ids = store._r.zrange(store._key("instances", "request", request_id), 0, -1)
    return store._load(Instance, (store._instance_key(as_text(i)) for i in ids))


def _delete_request(
    store: Store, req: LaunchRequest, instances: list[Instance], keys: list[str]
) -> None:
    pipe = store._r.pipeline(transaction=True)
    pipe.delete(store._request_key(req.id), store._key("events", req.id))
    pipe.zrem(store._key("requests", "created"), req.id)  # an older version's index
    for state in RequestState:
        pipe.zrem(store._request_state_key(state), req.id)
    if req.project is not None:
        pipe.zrem(store._project_key(req.project), req.id)
    for inst in instances:
        pipe.delete(store._instance_key(inst.id))
        pipe.zrem(store._key("instances", "created"), inst.id)  # an older version's index
        for istate in INSTANCE_STATES:
            pipe.zrem(store._instance_state_key(istate), inst.id)
    pipe.delete(store._key("instances", "request", req.id))
    for key in keys:
        pipe.delete(store._key("submission", key))
    pipe.execute()


def _export(path: Path, line: dict[str, Any]) -> None:
    """Append one line and flush it to disk before anything it holds is deleted."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
