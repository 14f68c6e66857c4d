"""A cloud machine's agent: the agent core, reporting to Corral's HTTP API with its node token.

    python3 -m corral.services.agent.node --api URL --token-file FILE --log FILE \\
        [--notice ec2-imds|gce-metadata] [--metadata-url URL|off] [--provider-id ID] \\
        [--kill-grace-s 10]

The boot script Corral gives the machine (AWS UserData, Google Cloud's startup-script)
installs this package and starts it, its output appended to ``--log``. It registers (the
control plane counts the machine up from then on, not from the cloud's "running"), receives
its work (setup, run, envs, workdir; nothing on a pool machine), then runs it as every agent
does (:mod:`.core`), heartbeating through the API. The log file is shipped to the API as it
grows (``corral logs`` reads it there). The token is read from a file, never the command
line; it names this node only, and stops working once the node has ended: refused (HTTP 403),
the agent stops its work and exits. On a cloud's machine it also watches the instance metadata
for a spot interruption or preemption notice and relays it (:class:`NoticeWatch`); the boot
script names the metadata service's protocol (``--notice``), which its provider declares: the
agent knows protocols, not clouds.

Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.services.agent.core import Agent
from corral.services.agent.link import Dismissed, FinalBeat, LinkError, Work, say

LOG_CHUNK = 256 * 1024
LOG_EVERY_S = 0.5


class HttpLink:
    """The agent's reports as calls to ``<api>/v1/node/...`` with the node token."""

    def __init__(
        self, api: str, token: str, timeout_s: float = 10.0, token_file: Path | None = None
    ) -> None:
        self.api = api.rstrip("/")
        self._auth = f"Bearer {token}"
        self.timeout_s = timeout_s
        self.token_file = token_file
        self.address: str | None = None  # the IP it registered with (own_address)

    def use_token(self, token: str) -> None:
        """From now on, call with ``token`` (registration's, or a renewed one), and keep it in
        the token file (the boot script's one-time ticket is spent)."""
        self._auth = f"Bearer {token}"
        if self.token_file is not None:
            tmp = self.token_file.with_suffix(".new")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(token)
            os.replace(tmp, self.token_file)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        timeout_s: float | None = None,
        as_bytes: bool = False,
    ) -> Any:
        """The API's JSON answer (``as_bytes``: its bytes); LinkError, or Dismissed on a 403
        (the token names a node that has ended)."""
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        ctype = "application/octet-stream" if raw is not None else "application/json"
        req = urllib.request.Request(self.api + path, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            if exc.code == 403:  # the token names a node that has ended
                raise Dismissed(f"{method} {path}: HTTP 403 {detail}") from None
            raise LinkError(f"{method} {path}: HTTP {exc.code} {detail}") from None
        except (OSError, ValueError) as exc:
            raise LinkError(f"{method} {path}: {exc}") from None
        return text if as_bytes else json.loads(text) if text else None

    # --- the Link protocol ------------------------------------------------------------------
    def heartbeat(
        self,
        activity: str,
        now: float,
        ttl_s: float,
        queued: dict[str, Any] | None,
        assignment: str | None,
        assignments: dict[str, str],
        status: dict[str, Any] | None = None,
    ) -> None:
        beat = {
            **(status or {}),
            "activity": activity,
            "ttl_s": ttl_s,
            "queued": queued,
            "assignment": assignment,
            "assignments": assignments,
        }
        got = self.call("POST", "/v1/node/heartbeat", beat)
        if isinstance(got, dict) and isinstance(got.get("token"), str):
            self.use_token(got["token"])  # renewed before it expires

    def assignments(self) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        got = self.call("GET", "/v1/node/assignments")
        return dict(got.get("assignments") or {}), dict(got.get("bad") or {})

    def put_results(self, results: list[dict[str, Any]], drop: list[str]) -> None:
        self.call("POST", "/v1/node/results", {"results": results, "drop": drop})

    def peers(self, count: int) -> list[str] | None:
        if count == 1 and self.address:
            return [self.address]  # a launch of one: its own address is all there is
        got = self.call("GET", "/v1/node/peers")
        ips = got.get("ips") if isinstance(got, dict) else None
        return [str(ip) for ip in ips] if isinstance(ips, list) and len(ips) == count else None

    def record_children(
        self, child_pid: int | None = None, groups: list[int] | None = None
    ) -> None:
        """The machine is the agent's own: no one else kills its processes; nothing to say."""

    def finish(
        self, exit_code: int | None, reason: str, now: float, beat: FinalBeat | None = None
    ) -> None:
        if beat is not None:
            # The last beat is a request of its own here; as it always was, its failure
            # (even a dismissal) does not keep the final report from being sent.
            try:
                self.heartbeat(**vars(beat))
            except (Dismissed, LinkError) as exc:
                say(f"the last heartbeat failed: {exc}")
        self.call("POST", "/v1/node/finish", {"exit_code": exit_code, "reason": reason})

    def take_execs(self) -> list[dict[str, Any]]:
        got = self.call("GET", "/v1/node/execs")
        return list(got.get("execs") or [])

    def take_job(self) -> dict[str, Any] | None:
        got = self.call("GET", "/v1/node/jobs/next")
        job = got.get("job") if isinstance(got, dict) else None
        return job if isinstance(job, dict) else None

    def exec_output(self, exec_id: str, data: bytes) -> None:
        self.call("POST", f"/v1/node/execs/{exec_id}/output", raw=data)

    def exec_done(self, exec_id: str, exit_code: int, error: str | None = None) -> None:
        body = {"exit_code": exit_code, **({"error": error} if error else {})}
        self.call("POST", f"/v1/node/execs/{exec_id}/done", body)

    # --- sessions (corral attach, port-forward): services/agent/sessions.py ----------------
    def session_pull(
        self, session_id: str, wait_s: float
    ) -> tuple[bytes, bool, tuple[int, int] | None]:
        path = f"/v1/node/sessions/{session_id}/input?wait_s={wait_s:g}"
        got = self.call("GET", path, timeout_s=wait_s + self.timeout_s)
        size = got.get("size")
        return (
            base64.b64decode(got.get("data") or ""),
            bool(got.get("eof")),
            (int(size[0]), int(size[1])) if isinstance(size, list) and len(size) == 2 else None,
        )

    def session_push(self, session_id: str, data: bytes, eof: bool) -> bool:
        path = f"/v1/node/sessions/{session_id}/output" + ("?eof=true" if eof else "")
        return bool(self.call("POST", path, raw=data).get("ok"))

    def session_gone(self, session_id: str) -> bool:
        try:
            self.call("GET", f"/v1/node/sessions/{session_id}")
        except LinkError as exc:
            return "HTTP 404" in str(exc)
        return False

    def fetch_bundle(self, files: dict[str, Any]) -> bytes:
        """The task's bundle, from the API with the node token (its own task's only)."""
        return self._bundle("/v1/node/bundle")

    def fetch_job_bundle(self, item: dict[str, Any]) -> bytes:
        """A queued job's workdir bundle (the API serves only those of jobs queued here)."""
        sha = urllib.parse.quote(str(item["bundle"]["sha256"]), safe="")
        return self._bundle(f"/v1/node/bundle?sha256={sha}")

    def _bundle(self, path: str) -> bytes:
        data: bytes = self.call("GET", path, timeout_s=max(60.0, self.timeout_s), as_bytes=True)
        return data


class LogShipper(threading.Thread):
    """Sends the log file's new bytes to the API every LOG_EVERY_S, and each assignment's
    own log (``streams()``: assignment id -> its file) as a stream of its own; :meth:`drain`
    sends the rest before the agent's last report."""

    def __init__(
        self, link: HttpLink, path: Path, streams: Callable[[], dict[str, Path]] | None = None
    ) -> None:
        super().__init__(name="corral-log-shipper", daemon=True)
        self.link = link
        self.path = path
        self.offset = 0
        self.streams = streams
        self.offsets: dict[str, int] = {}  # each assignment's log: what the API holds
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stop.wait(LOG_EVERY_S):
            self.ship()

    def ship(self) -> bool:
        """Send what is new (a chunk at a time); False if the API could not take it."""
        with self._lock:
            shipped = self._ship_file(self.path, None)
            for aid, path in (self.streams() if self.streams else {}).items():
                shipped = self._ship_file(path, aid) and shipped
            return shipped

    def _ship_file(self, path: Path, aid: str | None) -> bool:
        offset = self.offset if aid is None else self.offsets.get(aid, 0)
        query = "" if aid is None else "&" + urllib.parse.urlencode({"assignment": aid})
        while True:
            try:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read(LOG_CHUNK)
            except OSError:
                return True  # no log yet
            if not chunk:
                return True
            try:
                got = self.link.call("POST", f"/v1/node/logs?offset={offset}{query}", raw=chunk)
            except Dismissed:
                return True  # the node has ended: no later try will be taken either
            except LinkError:
                return False
            held = int(got.get("held", offset))
            if held <= offset:
                return True  # the API took nothing: try again later
            offset = held
            if aid is None:
                self.offset = held
            else:
                self.offsets[aid] = held

    def drain(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        while not self.ship() and time.monotonic() < deadline:
            time.sleep(0.5)


class NodeLink(HttpLink):
    """The HTTP link whose last report first ships the rest of the log."""

    shipper: LogShipper | None = None

    def finish(
        self, exit_code: int | None, reason: str, now: float, beat: FinalBeat | None = None
    ) -> None:
        if self.shipper is not None:
            self.shipper.drain()
        super().finish(exit_code, reason, now, beat)


# The instance metadata services a machine reads its cloud's warning from, by protocol (the
# provider names it in the boot script: --notice), each with its usual address; and how often
# the agent looks unless told otherwise (--notice-poll-s; EC2 posts a spot interruption notice
# two minutes ahead and suggests polling every 5 s; Compute Engine gives a preempted VM 30 s).
METADATA_URLS = {
    "ec2-imds": "http://169.254.169.254",
    "gce-metadata": "http://metadata.google.internal",
}
NOTICE_POLL_S = 5.0
METADATA_TIMEOUT_S = 2.0


class NoticeWatch(threading.Thread):
    """Looks at the machine's metadata for the cloud's warning that it is about to take the
    machine back (EC2's ``spot/instance-action``, Compute Engine's ``instance/preempted``) and
    relays it to the control plane once, so recovery starts before the machine goes."""

    def __init__(
        self, link: HttpLink, notice: str, base_url: str, poll_s: float = NOTICE_POLL_S
    ) -> None:
        super().__init__(name="corral-notice-watch", daemon=True)
        self.link = link
        self.notice = notice  # a key of METADATA_URLS: the metadata service's protocol
        self.base = base_url.rstrip("/")
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._unreachable = False

    def run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                what = self.look()
            except (OSError, ValueError) as exc:
                if not self._unreachable:
                    say(f"instance metadata at {self.base} unreachable ({exc}); still trying")
                self._unreachable = True
                continue
            self._unreachable = False
            if what and self._relay(what):
                return

    def stop(self) -> None:
        self._stop.set()

    def look(self) -> str | None:
        """The cloud's warning, if it gave one (None: none yet)."""
        if self.notice == "ec2-imds":
            return self._ec2()
        if self.notice == "gce-metadata":
            return self._gce()
        return None

    def _get(self, path: str, headers: dict[str, str], method: str = "GET") -> bytes | None:
        req = urllib.request.Request(self.base + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=METADATA_TIMEOUT_S) as resp:
                data: bytes = resp.read()
                return data
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None  # no such item: no warning
            raise

    def _ec2(self) -> str | None:
        # IMDSv2: a session token first, then the item (404 until a notice is posted).
        ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "60"}
        token = self._get("/latest/api/token", ttl, method="PUT") or b""
        item = self._get(
            "/latest/meta-data/spot/instance-action",
            {"X-aws-ec2-metadata-token": token.decode()},
        )
        if item is None:
            return None
        action = json.loads(item).get("action", "terminate")
        return f"spot interruption ({action})"

    def _gce(self) -> str | None:
        flag = self._get("/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"})
        return "preempted" if flag and flag.strip().upper() == b"TRUE" else None

    def _relay(self, what: str) -> bool:
        try:
            self.link.call("POST", "/v1/node/notice", {"what": what[:64]})
        except LinkError as exc:
            say(f"could not relay the cloud's notice ({what}): {exc}")
            return False
        say(f"the cloud is taking this machine back: {what}; told the control plane")
        return True


def own_address(api: str) -> str | None:
    """The IP this machine reaches the API from: the source address of a UDP socket routed to
    it (nothing is sent). In a cloud network that is the machine's private IP, the one its
    launch's other nodes reach it at. None when there is no route (yet)."""
    parts = urllib.parse.urlsplit(api)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        family, _, _, _, where = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(where)
            return str(probe.getsockname()[0])
    except (OSError, IndexError, ValueError):
        pass
    try:  # no route to the API yet: the address the machine's own name resolves to
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None  # the API takes the address the registration came from


def register(
    link: HttpLink, provider_id: str | None, wait_s: float, path: str = "/v1/node/register"
) -> dict[str, Any]:
    """Register (or, ``/v1/node/resume``, come back after a stop), retrying while the API
    cannot be reached (the machine may boot before its network is up); the API's answer: the
    node's work and its heartbeat settings."""
    deadline = time.monotonic() + wait_s
    delay = 0.5
    while True:
        try:
            link.address = own_address(link.api)
            body = {"provider_id": provider_id, "pid": os.getpid(), "address": link.address}
            answer: dict[str, Any] = link.call("POST", path, body)
            return answer
        except LinkError as exc:
            if "HTTP 401" in str(exc) or "HTTP 403" in str(exc) or time.monotonic() > deadline:
                raise
            say(f"registration failed, trying again: {exc}")
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral-node", description=__doc__.split("\n")[0])
    parser.add_argument("--api", required=True, help="the API's URL as this machine reaches it")
    parser.add_argument("--token-file", required=True, type=Path)
    parser.add_argument("--log", required=True, type=Path, help="the file this agent writes to")
    parser.add_argument("--provider-id", default=None, help="the cloud's id for this machine")
    parser.add_argument("--kill-grace-s", type=float, default=10.0)
    parser.add_argument("--register-wait-s", type=float, default=600.0)
    parser.add_argument(
        "--notice",
        default=None,
        choices=sorted(METADATA_URLS),
        help="the instance metadata service to watch for the cloud's warning (its protocol)",
    )
    parser.add_argument(
        "--metadata-url",
        default="",
        help="the metadata service's address (default: the protocol's usual; 'off': do not look)",
    )
    parser.add_argument(
        "--notice-poll-s",
        type=float,
        default=NOTICE_POLL_S,
        help="how often to look at the metadata for the cloud's warning (seconds)",
    )
    args = parser.parse_args(argv)
    try:
        token = args.token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        say(f"cannot read the node token: {exc}")
        return 2
    link = NodeLink(args.api, token, token_file=args.token_file)
    try:
        # A node token (not the boot script's ticket): this machine was stopped and started
        # again; its agent resumes, with the same token and work.
        path = "/v1/node/resume" if token.startswith("cn2.n.") else "/v1/node/register"
        answer = register(link, args.provider_id, args.register_wait_s, path)
    except LinkError as exc:
        say(f"could not register with {args.api}: {exc}")
        return 3
    if isinstance(answer.get("token"), str):
        link.use_token(answer["token"])
    work = answer.get("work") or {}
    envs = {str(k): str(v) for k, v in (work.get("envs") or {}).items()}
    # Where the node's workload writes the demand it queued (a Ray head's pending tasks); the
    # agent reports it with each heartbeat, and the autoscaler packs it.
    envs.setdefault("CORRAL_DEMAND_FILE", str(args.log.parent / "demand.json"))
    heartbeat_s = float(answer.get("heartbeat_s") or 5.0)
    say(f"registered as {answer.get('node')}")
    # Each assignment's output goes to a log of its own there, shipped as its own stream.
    logs = args.log.parent / "assignment-logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    files = {**dict(work.get("files") or {}), "logs": str(logs)}
    metadata = args.metadata_url or METADATA_URLS.get(args.notice or "", "")
    if args.notice and metadata and metadata != "off":
        NoticeWatch(link, args.notice, metadata, args.notice_poll_s).start()
    agent = Agent(
        link,
        Work(
            setup=work.get("setup") or None,
            run=work.get("run") or None,
            envs=envs,
            workdir=work.get("workdir") or None,
            files=files,
        ),
        str(answer.get("node")),
        heartbeat_s=heartbeat_s,
        heartbeat_ttl_s=float(answer.get("heartbeat_ttl_s") or 3 * heartbeat_s),
        kill_grace_s=args.kill_grace_s,
    )
    link.shipper = LogShipper(link, args.log, agent.assignment_logs.copy)
    link.shipper.start()
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
