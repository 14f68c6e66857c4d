"""What cloud machines' agents report, and the tokens they report with.

A cloud node is named by where Corral launched it: ``(cloud, attempt id, node rank)``, known
before the cloud returns an instance id (the boot script must carry its token). Keys, under
``<prefix>:node:<cloud>:<attempt>:<rank>``:

==================  ==========================================================================
``:work``           JSON ``{setup, run, envs, workdir}``: what the node runs, written at launch
``:rec``            hash: ``registered_at``, ``provider_id`` (as the node says), ``activity``,
                    ``last_beat_at``, ``beat_ttl_s`` (the silence allowed: set on
                    registering or resuming, then by each heartbeat), ``resumed_at``,
                    ``ended_at``, ``exit_code``,
                    ``reason``, ``notice``
``:beat``           JSON heartbeat ``{ts, activity, assignment, assignments, queued}``, with a
                    TTL: gone means silent
``:assign``         hash: assignment id -> JSON ``{id, setup, run, envs, workdir}``
``:assign-result``  hash: assignment id -> JSON ``{id, exit_code, reason, at}``, only for
                    ids assigned to this node (``:assigned``), at most ``RESULTS_KEPT``
``:assigned``       set of every assignment id handed to this node (withdrawn ones too)
``:log``            list of the node's output in chunks, oldest first (the last
                    ``LOG_KEPT_BYTES`` or so kept); ``:rec`` ``log_bytes`` counts all received
``:log:<key>``      the same for one assignment's own output (``<key>``: its id's
                    ``assignment_key``; ``:rec`` ``log_bytes:<key>``), apart from the machine's
==================  ==========================================================================

Per cloud, ``<prefix>:node-work-ended:<cloud>`` lists the nodes (``<attempt>:<rank>``) that
reported an assignment's end, until the control plane takes them (:meth:`NodeBook.take_ended_work`:
reconcile, which wakes their pools).

Every key expires ``NODE_TTL_S`` after the last write, but those of a stopped node (paused),
which are kept until its machine runs again or ends. Registering also marks the node's ticket
spent (``<prefix>:node-spent:...``) for longer than a ticket lives, so an expired record never
revives a spent ticket.

A node token is ``cn2.n.<cloud>.<attempt>.<rank>.<expires>.<mac>``: an HMAC-SHA256 over the
rest with a secret only the control plane holds (``CORRAL_NODE_SECRET``, else one drawn once
and kept in Redis). It names one node and nothing else, and stops working at ``expires`` (unix
seconds, inside the MAC) or once the node is revoked (``<prefix>:node-revoked:...``, kept
longer than any token lives). It never grants the admin token's rights.

The boot script carries no node token, only an enrollment ticket (``cn2.e....``): the first
registration spends it and gets the node token and the work, once (docs/security.md argues
why: a multi-node EC2 launch puts every node's ticket in one UserData).
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

from corral.services.state import as_text, relay
from corral.services.state.outage import OutageBook, outage_book
from corral.services.state.relay import Stream
from corral.shared.liveness import silent_too_long

if TYPE_CHECKING:
    from corral.services.settings import Settings

NODE_TTL_S = 7 * 24 * 3600
# A stopped node's keys, kept without expiry until it runs again or ends (pause, resume).
KEPT_PARTS = ("rec", "work", "shared-boot", "assign", "assign-result", "assigned", "log")
LOG_KEPT_BYTES = 8 * 1024 * 1024
LOG_CHUNK_MAX = 256 * 1024  # one report's output, at most
TOKEN_VERSION = "cn2"
TICKET, NODE = "e", "n"  # an enrollment ticket (boot script) or a node token (registration)
NODE_TOKEN_TTL_S = 30 * 24 * 3600  # a token's life; the heartbeat renews it past half
_RANK_DIGITS = 6
_DIGITS = re.compile(r"[0-9]{1,6}")  # ASCII only: str.isdigit() takes "²" and "٣"
_EXPIRY = re.compile(r"[0-9]{1,12}")
RESULTS_KEPT = 1_000  # results one node may hold at once
RESULT_MAX_BYTES = 4 * 1024  # one result, as JSON
WORK_ENDED_KEPT = 10_000  # ends of work kept per cloud for the control plane to take
_PART = re.compile(r"[A-Za-z0-9_-]{1,128}")


class ResultsRefused(ValueError):
    """Results a node may not store (too large, or too many held)."""


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
    """What the control plane knows of a node from its agent: its reports, not the machine
    (the caller holds the machine's record; the cloud's id the agent registered with is
    checked at registration and kept in its record here, binds it: :meth:`NodeBook.node_of`)."""

    registered_at: float | None
    beat: dict[str, Any] | None  # None: no fresh heartbeat
    ended_at: float | None
    exit_code: int | None
    reason: str | None
    notice: str | None
    # Silent (no fresh heartbeat), but only since the control plane's last outage: the node
    # could not report, so it is not charged as lost yet (corral.shared.liveness).
    held: bool = False
    # Its machine is being stopped, or is stopped, on Corral's word (corral stop, autostop):
    # the cloud's "stopped" (EC2) or TERMINATED (Compute Engine) is no end of the node.
    paused: bool = False

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
        token_ttl_s: float = NODE_TOKEN_TTL_S,
    ) -> None:
        self.token_ttl_s = token_ttl_s
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

    def ticket(self, node: NodeName, now: float | None = None) -> str:
        """The one-time enrollment ticket the boot script carries: good for one registration,
        which exchanges it for the node's token (:meth:`token`)."""
        return self._sign(TICKET, node, now)

    def token(self, node: NodeName, now: float | None = None) -> str:
        """The node's own token, as registration hands it out; it expires ``token_ttl_s``
        from ``now`` (the expiry is inside the MAC, so no record is needed to end it)."""
        return self._sign(NODE, node, now)

    def _sign(self, kind: str, node: NodeName, now: float | None) -> str:
        for part in (node.cloud, node.attempt_id):
            if not _PART.fullmatch(part):
                raise ValueError(f"not a token-safe name part: {part!r}")
        if not 0 <= node.rank < 10**_RANK_DIGITS:
            raise ValueError(f"not a node rank: {node.rank}")
        expires = int((time.time() if now is None else now) + self.token_ttl_s)
        body = f"{TOKEN_VERSION}.{kind}.{node.cloud}.{node.attempt_id}.{node.rank}.{expires}"
        return f"{body}.{self._mac(body)}"

    def _mac(self, body: str) -> str:
        mac = hmac.new(self.secret(), body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def verify(self, token: str, kind: str = NODE, now: float | None = None) -> NodeName:
        """The node a token (or, ``kind=TICKET``, a ticket) names; TokenError if it is not one
        of ours, has expired, or its node was revoked (ended)."""
        node, expires = self._parse(token, kind)
        if expires < (time.time() if now is None else now):
            raise TokenError("the node token has expired")
        pipe = self.r.pipeline(transaction=False)
        pipe.exists(self._revoked(node))
        pipe.hget(self._k(node, "rec"), "ended_at")
        revoked, ended = pipe.execute()
        if revoked or ended:
            raise TokenError(f"node {node} has ended; its token is no longer valid")
        return node

    def expires_at(self, token: str) -> float:
        """When a token (already verified) stops working."""
        return float(self._parse(token, NODE)[1])

    def _parse(self, token: str, kind: str) -> tuple[NodeName, int]:
        parts = token.split(".")
        if (
            len(parts) != 7
            or parts[0] != TOKEN_VERSION
            or parts[1] != kind
            or not _DIGITS.fullmatch(parts[4])
            or not _EXPIRY.fullmatch(parts[5])
            or not all(_PART.fullmatch(p) for p in parts[2:4])
        ):
            what = "an enrollment ticket" if kind == TICKET else "a node token"
            raise TokenError(f"not {what}")
        body = token.rsplit(".", 1)[0]
        if not hmac.compare_digest(self._mac(body).encode(), parts[6].encode()):
            raise TokenError("not a node token")
        return NodeName(parts[2], parts[3], int(parts[4])), int(parts[5])

    def _spent(self, node: NodeName) -> str:
        return f"{self.prefix}:node-spent:{node.cloud}:{node.attempt_id}:{node.rank}"

    def _revoked(self, node: NodeName) -> str:
        return f"{self.prefix}:node-revoked:{node.cloud}:{node.attempt_id}:{node.rank}"

    def revoke(self, node: NodeName) -> None:
        """End every ticket and token of the node. The mark outlives any of them: each
        expires within ``token_ttl_s`` of being issued, and none is issued after this."""
        self.r.set(self._revoked(node), "1", ex=int(self.token_ttl_s) + 86_400)

    # --- launch ----------------------------------------------------------------------------
    def put_work(self, node: NodeName, work: dict[str, Any], *, shared_boot: bool = False) -> None:
        """What the node runs. ``shared_boot``: its ticket sits in a boot script other nodes
        read too (one EC2 launch of many), so registering requires the cloud's id of the
        machine this node was launched as (:meth:`bind`)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self._k(node, "work"), json.dumps(work), ex=NODE_TTL_S)
        if shared_boot:
            pipe.set(self._k(node, "shared-boot"), "1", ex=NODE_TTL_S)
        pipe.execute()

    def shared_boot(self, node: NodeName) -> bool:
        return bool(self.r.exists(self._k(node, "shared-boot")))

    def work(self, node: NodeName) -> dict[str, Any]:
        raw = self.r.get(self._k(node, "work"))
        return json.loads(raw) if raw else {}

    # --- what the agent reports ------------------------------------------------------------
    def register(
        self,
        node: NodeName,
        provider_id: str | None,
        now: float,
        beat_ttl_s: float = 0.0,
        address: str | None = None,
    ) -> bool:
        """The agent is up; False if the node had registered before (its ticket is spent:
        nothing is written). ``beat_ttl_s``: the heartbeat TTL the agent is handed, which is
        also how long it has from registering to its first heartbeat before it counts as
        silent (0: none, it is silent until it beats). ``address``: the IP the machine reaches
        the control plane from, which its launch's other nodes learn (:meth:`peer_addresses`)."""
        key = self._k(node, "rec")
        # The spent mark outlives the ticket (a ticket expires token_ttl_s after it was made,
        # before this registration), so it stays spent whatever happens to the record.
        if not self.r.set(self._spent(node), repr(now), nx=True, ex=int(self.token_ttl_s) + 86_400):
            return False
        first = bool(self.r.hsetnx(key, "registered_at", repr(now)))  # (a record of before)
        pipe = self.r.pipeline(transaction=True)
        if first and provider_id:
            pipe.hset(key, "provider_id", provider_id)
        if first and address:
            pipe.hset(key, "address", address)
        if first and beat_ttl_s > 0:
            # Read by _held until the first heartbeat replaces it with the agent's own.
            pipe.hset(key, "beat_ttl_s", beat_ttl_s)
        pipe.expire(key, NODE_TTL_S)
        pipe.execute()
        return first

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
        """The node's last report; its token stops working. A paused node (its machine being
        stopped, :meth:`pause`) keeps its token: the agent's last words as the machine shuts
        down are no end, and it reports again once the machine is started."""
        rec_key = self._k(node, "rec")
        if self.r.hget(rec_key, "paused_at"):
            pipe = self.r.pipeline(transaction=True)
            pipe.delete(self._k(node, "beat"))
            pipe.hset(rec_key, mapping={"stopped_reason": reason})
            pipe.execute()
            return
        fields: dict[Any, Any] = {"ended_at": now, "reason": reason}
        if exit_code is not None:
            fields["exit_code"] = exit_code
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self._k(node, "rec"), mapping=fields)
        pipe.delete(self._k(node, "beat"))
        pipe.set(self._revoked(node), "1", ex=int(self.token_ttl_s) + 86_400)
        pipe.execute()

    def notice(self, node: NodeName, what: str, now: float) -> None:
        """A warning from the machine (a spot interruption notice, a preemption)."""
        self.r.hset(self._k(node, "rec"), mapping={"notice": what, "notice_at": now})

    def was_assigned(self, node: NodeName, assignment_id: str) -> bool:
        """Whether ``assignment_id`` was ever handed to this node."""
        return bool(self.r.sismember(self._k(node, "assigned"), assignment_id))

    def _log(self, node: NodeName, stream: str | None) -> Stream:
        """A log (None: the machine's own; else an assignment's key), its counters in ``:rec``."""
        part, counted, kept = "log", "log_bytes", "log_kept"
        if stream is not None:
            part, counted, kept = f"log:{stream}", f"log_bytes:{stream}", f"log_kept:{stream}"
        rec = self._k(node, "rec")
        return Stream(
            self._k(node, part), NODE_TTL_S, (rec, counted), kept, keep_bytes=LOG_KEPT_BYTES
        )

    def append_log(
        self, node: NodeName, offset: int, data: bytes, stream: str | None = None
    ) -> int:
        """Add output the node sent from ``offset`` of its log (or, ``stream``, of one
        assignment's); returns how many bytes the book now holds in all, so a node that
        resends (a lost answer) is not repeated."""
        return relay.append(self.r, self._log(node, stream), data, at=offset)

    def log(self, node: NodeName, stream: str | None = None) -> bytes:
        return relay.read_all(self.r, self._log(node, stream))

    def log_since(
        self, node: NodeName, offset: int, stream: str | None = None
    ) -> tuple[int, bytes]:
        """The node's output (or one assignment's, ``stream``) from byte ``offset`` of
        everything it sent: (the offset the bytes start at, the bytes). The start is later
        than ``offset`` when that part was no longer kept. One round trip."""
        start, data, _ = relay.read_since(self.r, self._log(node, stream), offset)
        return start, data

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
        attempt, _, rank = as_text(raw).rpartition(":")
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
                results[as_text(key)] = value
        return [as_text(a) for a in assigned or ()], json.loads(beat) if beat else None, results

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
        key, ever = self._k(node, "assign"), self._k(node, "assigned")
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(key, str(assignment["id"]), json.dumps(assignment))
        pipe.sadd(ever, str(assignment["id"]))
        pipe.expire(key, NODE_TTL_S)
        pipe.expire(ever, NODE_TTL_S)
        pipe.execute()

    def drop_assignment(self, node: NodeName, assignment_id: str | None = None) -> None:
        key = self._k(node, "assign")
        if assignment_id is None:
            self.r.delete(key)
        else:
            self.r.hdel(key, assignment_id)

    def put_results(
        self, node: NodeName, results: list[dict[str, Any]], drop: list[str]
    ) -> list[str]:
        """Keep how assignments ended, for ids handed to this node only (a node cannot fill
        Redis with results for work it never had); the ids refused are returned. Raises
        ResultsRefused when a result is too large or the node would hold too many."""
        key = self._k(node, "assign-result")
        texts = {}
        for result in results:
            text = json.dumps(result)
            if len(text) > RESULT_MAX_BYTES:
                raise ResultsRefused(
                    f"result {str(result['id'])[:64]!r} is {len(text)} bytes; "
                    f"at most {RESULT_MAX_BYTES}"
                )
            texts[str(result["id"])] = text
        ids = list(texts)
        pipe = self.r.pipeline(transaction=False)
        pipe.hlen(key)
        if ids:
            pipe.smismember(self._k(node, "assigned"), ids)
        held, *assigned = pipe.execute()
        flags = assigned[0] if assigned else []
        known = {i for i, ok in zip(ids, flags, strict=True) if ok}
        refused = [i for i in ids if i not in known]
        if held - len(set(drop)) + len(known) > RESULTS_KEPT:
            raise ResultsRefused(f"a node holds at most {RESULTS_KEPT} results; drop old ones")
        pipe = self.r.pipeline(transaction=True)
        for aid in known:
            pipe.hset(key, aid, texts[aid])
        if drop:
            pipe.hdel(key, *drop)
        pipe.expire(key, NODE_TTL_S)
        if known:  # the control plane's bell: this node's work ended (take_ended_work)
            ended = self._ended(node.cloud)
            pipe.rpush(ended, f"{node.attempt_id}:{node.rank}")
            pipe.ltrim(ended, -WORK_ENDED_KEPT, -1)
            pipe.expire(ended, NODE_TTL_S)
        pipe.execute()
        return refused

    def take_ended_work(self, cloud: str) -> list[str]:
        """The cloud's ids of ``cloud``'s nodes that reported an assignment's end since the
        last call (each once, taken), as each registered with it."""
        pipe = self.r.pipeline(transaction=True)
        pipe.lrange(self._ended(cloud), 0, -1)
        pipe.delete(self._ended(cloud))
        raw, _ = pipe.execute()
        nodes = []
        for item in dict.fromkeys(as_text(i) for i in raw):
            attempt, _, rank = item.rpartition(":")
            if attempt and rank.isdigit():
                nodes.append(NodeName(cloud, attempt, int(rank)))
        pipe = self.r.pipeline(transaction=False)
        for node in nodes:
            pipe.hget(self._k(node, "rec"), "provider_id")
        return [as_text(pid) for pid in pipe.execute() if pid] if nodes else []

    def _ended(self, cloud: str) -> str:
        return f"{self.prefix}:node-work-ended:{cloud}"

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
            rec = {as_text(k): as_text(v) for k, v in (raw[2 * i] or {}).items()}
            beat = raw[2 * i + 1]
            held = False
            if not beat and rec.get("registered_at") and not rec.get("ended_at"):
                if outage_end is None:  # pulse once, before judging anyone's silence
                    outage_end = self.listening_since()
                held = _held(rec, time.time(), outage_end)
            out[node] = NodeView(
                registered_at=_float(rec.get("registered_at")),
                beat=json.loads(beat) if beat else None,
                ended_at=_float(rec.get("ended_at")),
                exit_code=int(rec["exit_code"]) if rec.get("exit_code") else None,
                reason=rec.get("reason") or None,
                notice=rec.get("notice") or None,
                held=held,
                paused=bool(rec.get("paused_at")),
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

    def pause(self, node: NodeName, now: float) -> None:
        """The control plane stops the node's machine (corral stop, autostop): its agent's
        final report as the machine shuts down does not end it (:meth:`finish`)."""
        key = self._k(node, "rec")
        self.r.hset(key, "paused_at", repr(now))
        # Kept while the machine exists, however long it stays stopped: resume needs its
        # record and work (issue #47: a week's expiry left it unable to come back).
        pipe = self.r.pipeline(transaction=False)
        for part in KEPT_PARTS:
            pipe.persist(self._k(node, part))
        pipe.execute()

    def resume(
        self, node: NodeName, now: float, beat_ttl_s: float = 0.0, address: str | None = None
    ) -> None:
        """The node's machine was started again and its agent is back: a later final report
        ends it as usual. As at registering, it has ``beat_ttl_s`` from ``now`` to send its
        first heartbeat (its last one predates the stop: without this it reads as silent).
        ``address``: where it is now (a started machine may come back at another IP)."""
        key = self._k(node, "rec")
        pipe = self.r.pipeline(transaction=True)
        pipe.hdel(key, "paused_at", "stopped_reason")
        pipe.hset(key, "resumed_at", repr(now))
        if address:
            pipe.hset(key, "address", address)
        if beat_ttl_s > 0:
            pipe.hset(key, "beat_ttl_s", beat_ttl_s)
        for part in KEPT_PARTS:  # running again: expiring after NODE_TTL_S of silence again
            pipe.expire(self._k(node, part), NODE_TTL_S)
        pipe.execute()

    def peer_addresses(self, node: NodeName, count: int) -> list[str] | None:
        """The addresses of the ``count`` nodes of ``node``'s launch (ranks 0 .. count-1, the
        head first) once every one has registered with its address; None before."""
        pipe = self.r.pipeline(transaction=False)
        for rank in range(count):
            pipe.hget(self._k(NodeName(node.cloud, node.attempt_id, rank), "rec"), "address")
        found = [as_text(a) if a else None for a in pipe.execute()]
        return None if any(a is None for a in found) else [str(a) for a in found]

    def paused(self, node: NodeName) -> bool:
        return bool(self.r.hget(self._k(node, "rec"), "paused_at"))

    def end(self, node: NodeName, reason: str, now: float | None = None) -> None:
        """The control plane ended the node (terminated it): its token stops working."""
        key = self._k(node, "rec")
        self.revoke(node)
        self.r.hsetnx(key, "ended_at", repr(time.time() if now is None else now))
        self.r.hsetnx(key, "reason", reason)
        pipe = self.r.pipeline(transaction=False)
        for part in KEPT_PARTS:  # a stopped machine's kept keys expire again once it is gone
            pipe.expire(self._k(node, part), NODE_TTL_S)
        pipe.execute()

    def _k(self, node: NodeName, part: str) -> str:
        return f"{node.key(self.prefix)}:{part}"


def _held(rec: dict[str, str], now: float, outage_end: float) -> bool:
    """A node without a fresh heartbeat that has not been silent for a whole heartbeat TTL
    of the control plane's listening time (its silence overlaps the last outage)."""
    last = max(
        _float(rec.get("last_beat_at")) or _float(rec.get("registered_at")) or 0.0,
        _float(rec.get("resumed_at")) or 0.0,
    )
    ttl_s = _float(rec.get("beat_ttl_s")) or 0.0
    return not silent_too_long(last, now, ttl_s, outage_end)


def _float(value: str | None) -> float | None:
    return float(value) if value else None
