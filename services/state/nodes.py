"""What cloud machines' agents report, and the tokens they report with.

A cloud node is named by where Corral launched it: ``(cloud, attempt id, node rank)``, known
before the cloud returns an instance id (the boot script must carry its token). Keys, under
``<prefix>:node:<cloud>:<attempt>:<rank>``:

==================  ==========================================================================
``:work``           JSON ``{setup, run, envs, workdir}``: what the node runs, written at launch
``:rec``            hash: ``registered_at``, ``provider_id`` (as the node says), ``activity``,
                    ``last_beat_at``, ``ended_at``, ``exit_code``, ``reason``, ``notice``
``:beat``           JSON heartbeat ``{ts, activity, assignment, assignments, queued}``, with a
                    TTL: gone means silent
``:assign``         hash: assignment id -> JSON ``{id, setup, run, envs, workdir}``
``:assign-result``  hash: assignment id -> JSON ``{id, exit_code, reason, at}``
``:log``            list of the node's output in chunks, oldest first (the last
                    ``LOG_KEPT_BYTES`` or so kept); ``:rec`` ``log_bytes`` counts all received
==================  ==========================================================================

Every key expires ``NODE_TTL_S`` after the last write.

A node token is ``cn1.<cloud>.<attempt>.<rank>.<mac>``: an HMAC-SHA256 over the name with a
secret only the control plane holds (``CORRAL_NODE_SECRET``, else one drawn once and kept in
Redis). It names one node and nothing else; :meth:`NodeBook.verify` refuses it once the node
has ended. It never grants the admin token's rights.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from corral.services.state.outage import OutageBook, outage_book
from corral.shared.liveness import silent_too_long

if TYPE_CHECKING:
    from corral.services.settings import Settings

NODE_TTL_S = 7 * 24 * 3600
LOG_KEPT_BYTES = 8 * 1024 * 1024
LOG_CHUNK_MAX = 256 * 1024  # one report's output, at most
TOKEN_VERSION = "cn1"
_PART = re.compile(r"[A-Za-z0-9_-]{1,128}")


class TokenError(Exception):
    """A node token that is malformed, forged, or no longer valid (its node ended)."""


@dataclass(frozen=True)
class NodeName:
    """One cloud node, named by where Corral launched it."""

    cloud: str
    attempt_id: str
    rank: int

    def key(self, prefix: str) -> str:
        return f"{prefix}:node:{self.cloud}:{self.attempt_id}:{self.rank}"

    def __str__(self) -> str:
        return f"{self.cloud}/{self.attempt_id}/{self.rank}"


@dataclass
class NodeView:
    """What the control plane knows of a node from its agent."""

    registered_at: float | None
    provider_id: str | None
    beat: dict[str, Any] | None  # None: no fresh heartbeat
    ended_at: float | None
    exit_code: int | None
    reason: str | None
    notice: str | None
    # Silent (no fresh heartbeat), but only since the control plane's last outage: the node
    # could not report, so it is not charged as lost yet (corral.shared.liveness).
    held: bool = False

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


class NodeBook:
    """The nodes' reports in Redis, and their tokens."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        secret: str | None = None,
        outage: OutageBook | None = None,
    ) -> None:
        self.r = client
        self.prefix = prefix
        self._secret = secret.encode() if secret else None
        self.outage = outage

    @classmethod
    def for_settings(cls, client: redis.Redis, settings: Settings) -> NodeBook:
        """The book under the settings' prefix, signing with the configured secret if any."""
        secret = settings.node_secret.get_secret_value() if settings.node_secret else None
        return cls(client, settings.prefix, secret, outage_book(client, settings))

    # --- tokens ----------------------------------------------------------------------------
    def secret(self) -> bytes:
        """The signing secret: the configured one, else one drawn once and kept in Redis."""
        if self._secret is None:
            key = f"{self.prefix}:node-secret"
            self.r.set(key, secrets.token_urlsafe(32), nx=True)
            value = self.r.get(key)
            if value is None:
                raise TokenError("the node secret could not be read")
            self._secret = value if isinstance(value, bytes) else str(value).encode()
        return self._secret

    def token(self, node: NodeName) -> str:
        for part in (node.cloud, node.attempt_id):
            if not _PART.fullmatch(part):
                raise ValueError(f"not a token-safe name part: {part!r}")
        body = f"{TOKEN_VERSION}.{node.cloud}.{node.attempt_id}.{node.rank}"
        mac = hmac.new(self.secret(), body.encode(), hashlib.sha256).digest()
        return f"{body}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"

    def verify(self, token: str) -> NodeName:
        """The node a token names; TokenError if it is not one of ours or its node ended."""
        parts = token.split(".")
        if len(parts) != 5 or parts[0] != TOKEN_VERSION or not parts[3].isdigit():
            raise TokenError("not a node token")
        node = NodeName(parts[1], parts[2], int(parts[3]))
        try:
            expected = self.token(node)
        except ValueError:
            raise TokenError("not a node token") from None
        if not hmac.compare_digest(expected.encode(), token.encode()):
            raise TokenError("not a node token")
        if self.r.hget(self._k(node, "rec"), "ended_at"):
            raise TokenError(f"node {node} has ended; its token is no longer valid")
        return node

    # --- launch ----------------------------------------------------------------------------
    def put_work(self, node: NodeName, work: dict[str, Any]) -> None:
        self.r.set(self._k(node, "work"), json.dumps(work), ex=NODE_TTL_S)

    def work(self, node: NodeName) -> dict[str, Any]:
        raw = self.r.get(self._k(node, "work"))
        return json.loads(raw) if raw else {}

    # --- what the agent reports ------------------------------------------------------------
    def register(self, node: NodeName, provider_id: str | None, now: float) -> bool:
        """The agent is up; False if it had registered before (a restarted agent)."""
        key = self._k(node, "rec")
        pipe = self.r.pipeline(transaction=True)
        pipe.hsetnx(key, "registered_at", repr(now))
        if provider_id:
            pipe.hset(key, "provider_id", provider_id)
        pipe.expire(key, NODE_TTL_S)
        first = pipe.execute()[0]
        return bool(first)

    def heartbeat(self, node: NodeName, beat: dict[str, Any], ttl_s: float, now: float) -> None:
        beat = {**beat, "ts": now}
        rec = self._k(node, "rec")
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self._k(node, "beat"), json.dumps(beat), px=max(1, int(ttl_s * 1000)))
        pipe.hset(
            rec,
            mapping={
                "activity": str(beat.get("activity")),
                "last_beat_at": now,
                "beat_ttl_s": ttl_s,  # how long a silence may last before the node is lost
            },
        )
        pipe.expire(rec, NODE_TTL_S)
        pipe.execute()

    def finish(self, node: NodeName, exit_code: int | None, reason: str, now: float) -> None:
        """The node's last report; its token stops working."""
        fields: dict[Any, Any] = {"ended_at": now, "reason": reason}
        if exit_code is not None:
            fields["exit_code"] = exit_code
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self._k(node, "rec"), mapping=fields)
        pipe.delete(self._k(node, "beat"))
        pipe.execute()

    def notice(self, node: NodeName, what: str, now: float) -> None:
        """A warning from the machine (a spot interruption notice, a preemption)."""
        self.r.hset(self._k(node, "rec"), mapping={"notice": what, "notice_at": now})

    def append_log(self, node: NodeName, offset: int, data: bytes) -> int:
        """Add output the node sent from ``offset`` of its log; returns how many bytes the book
        now holds in all, so a node that resends (a lost answer) is not repeated."""
        rec = self._k(node, "rec")
        held = int(self.r.hget(rec, "log_bytes") or 0)
        if offset > held or offset + len(data) <= held:
            return held  # a gap (the node resyncs from ``held``) or all of it already here
        fresh = data[held - offset :]
        log = self._k(node, "log")
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(log, fresh)
        pipe.hincrby(rec, "log_bytes", len(fresh))
        pipe.hincrby(rec, "log_kept", len(fresh))
        pipe.expire(log, NODE_TTL_S)
        total, kept = pipe.execute()[1:3]
        while kept > LOG_KEPT_BYTES:
            dropped = self.r.lpop(log)
            if not dropped:
                break
            kept = self.r.hincrby(rec, "log_kept", -len(dropped))
        return int(total)

    def log(self, node: NodeName) -> bytes:
        chunks = self.r.lrange(self._k(node, "log"), 0, -1)
        return b"".join(c if isinstance(c, bytes) else str(c).encode() for c in chunks)

    # --- the cloud's id for a node ----------------------------------------------------------
    def bind(self, provider_id: str, node: NodeName) -> None:
        """Remember which node the cloud's machine ``provider_id`` is (the pools and the
        autoscaler know machines by the cloud's id; the book by where Corral launched them)."""
        value = f"{node.attempt_id}:{node.rank}"
        self.r.set(self._bound(node.cloud, provider_id), value, ex=NODE_TTL_S)

    def node_of(self, cloud: str, provider_id: str) -> NodeName | None:
        raw = self.r.get(self._bound(cloud, provider_id))
        if not raw:
            return None
        attempt, _, rank = _s(raw).rpartition(":")
        return NodeName(cloud, attempt, int(rank)) if attempt and rank.isdigit() else None

    def _bound(self, cloud: str, provider_id: str) -> str:
        return f"{self.prefix}:node-of:{cloud}:{provider_id}"

    # --- assignments (pool machines) -------------------------------------------------------
    def assignment_view(
        self, node: NodeName
    ) -> tuple[list[str], dict[str, Any] | None, dict[str, dict[str, Any]]]:
        """(assigned ids, last heartbeat or None, results by id), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hkeys(self._k(node, "assign"))
        pipe.get(self._k(node, "beat"))
        pipe.hgetall(self._k(node, "assign-result"))
        assigned, beat, raw = pipe.execute()
        results = {}
        for key, text in (raw or {}).items():
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                results[_s(key)] = value
        return [_s(a) for a in assigned or ()], json.loads(beat) if beat else None, results

    def assignments(self, node: NodeName) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        raw = self.r.hgetall(self._k(node, "assign"))
        good: dict[str, dict[str, Any]] = {}
        bad: dict[str, str] = {}
        for key, text in raw.items():
            aid = key.decode() if isinstance(key, bytes) else str(key)
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, dict) and value.get("id", aid) == aid:
                good[aid] = {**value, "id": aid}
            else:
                bad[aid] = "not an assignment"
        return good, bad

    def put_assignment(self, node: NodeName, assignment: dict[str, Any]) -> None:
        key = self._k(node, "assign")
        self.r.hset(key, str(assignment["id"]), json.dumps(assignment))
        self.r.expire(key, NODE_TTL_S)

    def drop_assignment(self, node: NodeName, assignment_id: str | None = None) -> None:
        key = self._k(node, "assign")
        if assignment_id is None:
            self.r.delete(key)
        else:
            self.r.hdel(key, assignment_id)

    def put_results(self, node: NodeName, results: list[dict[str, Any]], drop: list[str]) -> None:
        key = self._k(node, "assign-result")
        pipe = self.r.pipeline(transaction=True)
        for result in results:
            pipe.hset(key, str(result["id"]), json.dumps(result))
        if drop:
            pipe.hdel(key, *drop)
        pipe.expire(key, NODE_TTL_S)
        pipe.execute()

    # --- what the control plane reads ------------------------------------------------------
    def views(self, nodes: list[NodeName]) -> dict[NodeName, NodeView]:
        """Each node's state, in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for node in nodes:
            pipe.hgetall(self._k(node, "rec"))
            pipe.get(self._k(node, "beat"))
        raw = pipe.execute()
        out = {}
        outage_end: float | None = None
        for i, node in enumerate(nodes):
            rec = {_s(k): _s(v) for k, v in (raw[2 * i] or {}).items()}
            beat = raw[2 * i + 1]
            held = False
            if not beat and rec.get("registered_at") and not rec.get("ended_at"):
                if outage_end is None:  # pulse once, before judging anyone's silence
                    outage_end = self.listening_since()
                held = _held(rec, time.time(), outage_end)
            out[node] = NodeView(
                registered_at=_float(rec.get("registered_at")),
                provider_id=rec.get("provider_id") or None,
                beat=json.loads(beat) if beat else None,
                ended_at=_float(rec.get("ended_at")),
                exit_code=int(rec["exit_code"]) if rec.get("exit_code") else None,
                reason=rec.get("reason") or None,
                notice=rec.get("notice") or None,
                held=held,
            )
        return out

    def listening_since(self) -> float:
        """Since when the control plane could hear the nodes: after the last outage of Redis
        and of the API they report through (now, while the API is away)."""
        if self.outage is None:
            return 0.0
        return max(self.outage.pulse(), self.outage.api_heard_since())

    def view(self, node: NodeName) -> NodeView:
        return self.views([node])[node]

    def end(self, node: NodeName, reason: str, now: float | None = None) -> None:
        """The control plane ended the node (terminated it): its token stops working."""
        key = self._k(node, "rec")
        self.r.hsetnx(key, "ended_at", repr(time.time() if now is None else now))
        self.r.hsetnx(key, "reason", reason)
        self.r.expire(key, NODE_TTL_S)

    def _k(self, node: NodeName, part: str) -> str:
        return f"{node.key(self.prefix)}:{part}"


def _held(rec: dict[str, str], now: float, outage_end: float) -> bool:
    """A node without a fresh heartbeat that has not been silent for a whole heartbeat TTL
    of the control plane's listening time (its silence overlaps the last outage)."""
    last = _float(rec.get("last_beat_at")) or _float(rec.get("registered_at")) or 0.0
    ttl_s = _float(rec.get("beat_ttl_s")) or 0.0
    return not silent_too_long(last, now, ttl_s, outage_end)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _float(value: str | None) -> float | None:
    return float(value) if value else None
