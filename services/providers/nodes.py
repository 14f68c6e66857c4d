"""Node agents on cloud machines, as the AWS and Google Cloud providers use them.

With ``CORRAL_NODE_API_URL`` set, a cloud machine boots the node agent: :meth:`NodeAgents.
boot_script` writes what the node will run into the node book and returns the script that
installs the agent and starts it with the node's own token. :meth:`NodeAgents.overlay` then
reads a machine's state as the control plane must see it: the cloud's "running" is not up;
up is the agent's registration, kept by its heartbeats; the agent's last report gives the
run's exit code.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from corral.services.agent.node import NOTICE_POLL_S
from corral.services.agent.sandbox import assignment_key
from corral.services.providers.agent_wheel import agent_wheel_sha256
from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_NODE,
    LaunchSpec,
    ProviderInstance,
    check_env_names,
    checked_assignment,
    status_view,
)
from corral.services.state.nodes import NodeBook, NodeName, NodeView
from corral.shared.errors import InvalidRequestError

if TYPE_CHECKING:
    from corral.services.settings import Settings

log = logging.getLogger(__name__)

AGENT_MODULE = "corral.services.agent.node"
ROOT = "/var/lib/corral"  # where the agent lives on the machine (CORRAL_NODE_ROOT overrides)

# Fetch a wheel, check its sha256 and unpack it, with nothing but Python: a pure wheel is a
# zip of the package. A wheel whose hash differs (tampered on the way) is never unpacked.
_UNPACK = (
    "import hashlib,io,sys,urllib.request,zipfile;"
    "d=urllib.request.urlopen(sys.argv[1],timeout=60).read();"
    "h=hashlib.sha256(d).hexdigest();"
    "h==sys.argv[3] or sys.exit('corral: the agent wheel has sha256 '+h+', expected '+sys.argv[3]"
    "+'; not installing it');"
    "zipfile.ZipFile(io.BytesIO(d)).extractall(sys.argv[2])"
)
# The launch index of this machine among those one RunInstances call started (IMDSv2).
_LAUNCH_INDEX = (
    "import urllib.request as u;b='http://169.254.169.254/latest/';"
    "t=u.urlopen(u.Request(b+'api/token',method='PUT',"
    "headers={'X-aws-ec2-metadata-token-ttl-seconds':'60'}),timeout=5).read().decode();"
    "print(u.urlopen(u.Request(b+'meta-data/ami-launch-index',"
    "headers={'X-aws-ec2-metadata-token':t}),timeout=5).read().decode())"
)

_INSTANCE_ID = _LAUNCH_INDEX.replace("meta-data/ami-launch-index", "meta-data/instance-id")


def warn_if_plain_http(api_url: str) -> bool:
    """Warn, naming the risk, when machines reach the API over plain HTTP; True if so."""
    if api_url.lower().startswith("https://"):
        return False
    log.warning(
        "CORRAL_NODE_API_URL %s is not https: each node's enrollment ticket, token, work "
        "(with its envs) and output cross the network in clear text, readable and "
        "replaceable by anyone on the path; put the API behind TLS",
        api_url,
    )
    return True


class NodeBookLogs:
    """The port's log reads for a cloud whose machines' agents ship their output to the node
    book (AWS, Google Cloud, Kubernetes): a provider class inherits these; it sets ``name``,
    ``log_book`` (None: no Redis here, so no output) and ``nodes`` (None: blind boots)."""

    name: str
    log_book: NodeBook | None
    nodes: NodeAgents | None

    def _use_agents(self, nodes: NodeAgents | None, log_book: NodeBook | None) -> None:
        """Machines boot ``nodes`` (None: blind boots) and take pooled work through them; their
        output is read from the agents' book, else from ``log_book`` (the API's: it reads it
        with no agents of its own to boot)."""
        self.nodes = self.node_work = nodes
        self.log_book = nodes.book if nodes is not None else log_book

    def _seen(self, instances: list[ProviderInstance]) -> list[ProviderInstance]:
        """Machines as the control plane must see them: up once their agent registered."""
        return instances if self.nodes is None else self.nodes.overlay(instances)

    def _book_node(
        self, provider_id: str, attempt_id: str | None = None, node_index: int = 0
    ) -> tuple[NodeBook, NodeName] | None:
        """The book and the machine's node in it: as its agent registered (a pooled machine's
        is known by the cloud's id, its log holding what it ran), else as its attempt named
        it; None without a book or a node."""
        if self.log_book is None:
            return None
        node = self.log_book.node_of(self.name, provider_id)
        if node is None and attempt_id:
            node = NodeName(self.name, attempt_id, node_index)
        return None if node is None else (self.log_book, node)

    def read_log(
        self, provider_id: str, attempt_id: str | None, node_index: int, tail_bytes: int
    ) -> bytes:
        """What the machine's node agent shipped, the last ``tail_bytes``."""
        found = self._book_node(provider_id, attempt_id, node_index)
        return found[0].log(found[1])[-tail_bytes:] if found else b""

    def agent_name(self, provider_id: str, attempt_id: str | None, node_index: int) -> str:
        """The node's name in the book: as its agent registered, else as its attempt named it
        (an agent not yet registered takes it on registering). A machine no attempt launched
        goes by its id."""
        if not attempt_id:
            return provider_id
        found = self._book_node(provider_id, attempt_id, node_index)
        return str(found[1] if found else NodeName(self.name, attempt_id, node_index))

    def read_log_since(
        self, provider_id: str, attempt_id: str | None, node_index: int, offset: int
    ) -> tuple[int, bytes]:
        """What the machine's node agent shipped from byte ``offset`` on."""
        found = self._book_node(provider_id, attempt_id, node_index)
        return found[0].log_since(found[1], offset) if found else (offset, b"")

    def read_assignment_log(self, provider_id: str, aid: str, tail_bytes: int) -> bytes:
        """What the machine's agent shipped of one assignment's own output, the last
        ``tail_bytes`` (never the machine's log, nor another assignment's)."""
        found = self._book_node(provider_id)
        return found[0].log(found[1], assignment_key(aid))[-tail_bytes:] if found else b""

    def read_assignment_log_since(
        self, provider_id: str, aid: str, offset: int
    ) -> tuple[int, bytes]:
        """One assignment's own output from byte ``offset`` on."""
        found = self._book_node(provider_id)
        return found[0].log_since(found[1], offset, assignment_key(aid)) if found else (offset, b"")


class NodeAgents:
    """Boot scripts and the agents' view of machines, for one cloud."""

    def __init__(
        self,
        cloud: str,
        book: NodeBook,
        api_url: str,
        *,
        source: str | None = None,
        source_sha256: str | None = None,
        kill_grace_s: float = 10.0,
        notice: str | None = None,
        notice_poll_s: float = NOTICE_POLL_S,
    ) -> None:
        """``notice``: the protocol of the instance metadata service the cloud posts its
        warning on (a key of the agent's ``METADATA_URLS``; None: the agents watch none);
        ``notice_poll_s``: how often they look (the registry passes the settings'
        ``timers.node_notice_poll_s``; 5 s as shipped)."""
        self.cloud = cloud
        self.notice = notice
        self.book = book
        self.api_url = api_url.rstrip("/")
        self.source = source or f"{self.api_url}/v1/node/agent.whl"
        # The hash the boot script checks: the served wheel's, or the one given with a source.
        self.source_sha256 = source_sha256 or (None if source else agent_wheel_sha256())
        self.kill_grace_s = kill_grace_s
        self.notice_poll_s = notice_poll_s
        warn_if_plain_http(self.api_url)
        if self.source_sha256 is None:
            log.warning(
                "node agent source %r has no sha256 (CORRAL_NODE_AGENT_SHA256): machines will "
                "run as root whatever they download from it",
                self.source,
            )
        self._bound: OrderedDict[str, NodeName] = OrderedDict()

    # --- launch ----------------------------------------------------------------------------
    def boot_script(self, spec: LaunchSpec, rank: int | None = None) -> str:
        """The script for node ``rank`` of the spec, or (None) for every node of a launch
        that starts them all with one script: each picks its token by its launch index."""
        if rank is not None:
            ranks = [rank]
        elif spec.count == 1:  # one node, maybe one replacing a given node of its request
            ranks = [int(spec.tags.get(TAG_NODE, "0"))]
        else:
            ranks = list(range(spec.count))
        tokens = {}
        for r in ranks:
            node = NodeName(self.cloud, spec.attempt_id, r)
            self.book.put_work(node, self._work(spec, r), shared_boot=len(ranks) > 1)
            tokens[r] = self.book.ticket(node)
        q = shlex.quote
        lines = [
            "#!/bin/bash",
            "# Corral: install and start the node agent; it registers (spending this node's",
            "# one-time ticket for its token and work), then runs the work and reports it.",
            "set -euo pipefail",
            f'root="${{CORRAL_NODE_ROOT:-{ROOT}}}"',
            'mkdir -p "$root" && chmod 700 "$root" && cd "$root"',
            "umask 077",
            'py="$(command -v python3 || command -v python)"',
        ]
        if len(tokens) == 1:
            [token] = tokens.values()
            lines.append(f"token={q(token)}")
        else:
            # Each node's ticket is readable by all of them (one UserData): registration
            # also names this machine, and only the machine launched as that rank is taken.
            lines.append(f'rank="$("$py" -c {q(_LAUNCH_INDEX)})"')
            lines.append(f'machine="$("$py" -c {q(_INSTANCE_ID)})"')
            lines.append('case "$rank" in')
            lines += [f"  {r}) token={q(t)} ;;" for r, t in tokens.items()]
            lines.append('  *) echo "corral: no token for launch index $rank" >&2; exit 1 ;;')
            lines.append("esac")
        # A machine started again after a stop runs this again (Compute Engine's startup
        # script runs on every boot; on EC2 cloud-init's per-boot folder holds a copy): the
        # node token its agent kept is used (the agent resumes), not the spent ticket.
        lines.append('case "$(cat node-token 2>/dev/null)" in')
        lines.append("  cn2.n.*) ;;")
        lines.append('  *) printf "%s" "$token" > node-token ;;')
        lines.append("esac")
        lines.append(
            "if [ -d /var/lib/cloud/scripts/per-boot ] && [ -w /var/lib/cloud/scripts/per-boot ]; "
            'then cp "$0" /var/lib/cloud/scripts/per-boot/corral-agent.sh 2>/dev/null '
            "&& chmod 700 /var/lib/cloud/scripts/per-boot/corral-agent.sh || true; fi"
        )
        if self.source.endswith(".whl") and "://" in self.source and self.source_sha256:
            lines.append(
                f'"$py" -c {q(_UNPACK)} {q(self.source)} "$root/agent" {q(self.source_sha256)} '
                ">> node.log 2>&1"
            )
        else:
            lines.append(
                '"$py" -m pip install --quiet --disable-pip-version-check --no-deps '
                f'--target "$root/agent" {q(self.source)} >> node.log 2>&1'
            )
        # Named only when it is not the agent's own default: an agent installed from a source
        # of its own (node_agent_source) may predate the option.
        watch = f"--notice {q(self.notice)} " if self.notice else ""
        if self.notice and self.notice_poll_s != NOTICE_POLL_S:
            watch += f"--notice-poll-s {self.notice_poll_s:g} "
        lines.append(
            f'PYTHONPATH="$root/agent" nohup "$py" -m {AGENT_MODULE} --api {q(self.api_url)} '
            f'--token-file "$root/node-token" --log "$root/node.log" '
            '${machine:+--provider-id "$machine"} '
            '--metadata-url "${CORRAL_NODE_METADATA_URL:-}" '
            f"{watch}--kill-grace-s {self.kill_grace_s:g} >> node.log 2>&1 < /dev/null &"
        )
        return "\n".join(lines) + "\n"

    def _work(self, spec: LaunchSpec, rank: int) -> dict[str, object]:
        envs = {
            "CORRAL_REQUEST_ID": spec.request_id,
            "CORRAL_ATTEMPT_ID": spec.attempt_id,
            "CORRAL_NUM_NODES": str(spec.count),
            "CORRAL_NODE_RANK": str(rank),
            **spec.envs,
        }
        check_env_names(envs)
        work: dict[str, object] = {
            "setup": spec.setup,
            "run": spec.run,
            "envs": envs,
            "workdir": spec.workdir,
        }
        if spec.files:
            work["files"] = spec.files
        return work

    # --- what the control plane sees -------------------------------------------------------
    def overlay(self, instances: Iterable[ProviderInstance]) -> list[ProviderInstance]:
        """Each machine's state as its agent tells it: pending until the agent registers;
        running while it heartbeats (with the cloud's warning, if the agent relayed one); lost
        when it falls silent; terminated with the run's exit code once it made its last
        report."""
        instances = list(instances)
        named: dict[str, NodeName] = {}
        for inst in instances:
            attempt, rank = inst.tags.get(TAG_ATTEMPT), inst.tags.get(TAG_NODE)
            if attempt and rank is not None and rank.isdigit():
                named[inst.provider_id] = NodeName(self.cloud, attempt, int(rank))
        self._bind(named)
        views = self.book.views(list(named.values())) if named else {}
        out = []
        for inst in instances:
            node = named.get(inst.provider_id)
            view = views.get(node) if node is not None else None
            if node is None or view is None or inst.state not in ("pending", "running"):
                if view is not None and view.paused:
                    pass  # stopped on Corral's word (corral stop): its token is kept
                elif node is not None and view is not None and not view.ended:
                    self.book.end(node, "the cloud ended the machine")  # its token with it
                elif view is not None and view.exit_code is not None:
                    inst = inst.model_copy(update={"exit_code": view.exit_code})
                out.append(inst)
                continue
            # The cloud's own word that it runs the machine is kept (its agent may not be up).
            started = inst.started or inst.state == "running"
            out.append(inst.model_copy(update={**_agent_state(view), "started": started}))
        return out

    def _bind(self, named: dict[str, NodeName]) -> None:
        """Tell the book which node each machine is, once per machine and process."""
        for provider_id, node in named.items():
            if provider_id not in self._bound:
                self.book.bind(provider_id, node)
                self._bound[provider_id] = node
                if len(self._bound) > BOUND_REMEMBERED:
                    self._bound.popitem(last=False)

    def end(self, provider_ids: Iterable[str], reason: str = "terminated by Corral") -> None:
        """The control plane terminates these machines: their tokens stop working (an agent
        still running is refused and stops its work)."""
        now = time.time()
        for provider_id in provider_ids:
            node = self._bound.get(provider_id) or self.book.node_of(self.cloud, provider_id)
            if node is not None:
                self.book.end(node, reason, now)

    def pause(self, provider_ids: Iterable[str]) -> None:
        """These machines are being stopped (not terminated): their agents' last reports as
        they shut down keep their tokens, for when they are started again."""
        now = time.time()
        for provider_id in provider_ids:
            node = self._bound.get(provider_id) or self.book.node_of(self.cloud, provider_id)
            if node is not None:
                self.book.pause(node, now)

    # --- work for pooled machines (NodeWork) -----------------------------------------------
    def _node(self, provider_id: str) -> NodeName:
        node = self._bound.get(provider_id) or self.book.node_of(self.cloud, provider_id)
        if node is None:
            raise InvalidRequestError(f"no node agent known for {self.cloud} {provider_id}")
        return node

    def assign(self, provider_id: str, assignment: dict[str, Any]) -> None:
        """Hand a pooled machine one more piece of work; its agent fetches it on its next
        beat (GET /v1/node/assignments)."""
        body = checked_assignment(assignment)
        node = self._node(provider_id)
        if self.book.view(node).ended:
            raise InvalidRequestError(f"{self.cloud} {provider_id} has ended; it takes no work")
        self.book.put_assignment(node, body)

    def withdraw(self, provider_id: str, assignment_id: str | None = None) -> None:
        node = self.book.node_of(self.cloud, provider_id)
        if node is not None:
            self.book.drop_assignment(node, assignment_id)

    def assignment_status(self, provider_id: str) -> dict[str, Any]:
        node = self.book.node_of(self.cloud, provider_id)
        if node is None:
            return status_view((), None, {})
        return status_view(*self.book.assignment_view(node))

    def report(self, provider_id: str) -> dict[str, Any] | None:
        node = self.book.node_of(self.cloud, provider_id)
        return None if node is None else self.book.view(node).beat

    def ended_work(self) -> list[str]:
        return self.book.take_ended_work(self.cloud)

    def hand_job_bundle(self, provider_id: str, scope: str, sha256: str) -> None:
        """Nothing: the agent fetches it (GET /v1/node/bundle?sha256=, its node token)."""


BOUND_REMEMBERED = 100_000  # machines whose node this process has already told the book


def _agent_state(view: NodeView) -> dict[str, Any]:
    """The state (and exit code, notice) of a machine the cloud runs, from its agent's word."""
    if view.ended:
        code = view.exit_code
        # An agent that stopped without a run's end is not a job's exit: the machine is lost.
        state = "lost" if code is None and view.reason != "completed" else "terminated"
        return {"state": state, "exit_code": code}
    if view.registered_at is None:
        return {"state": "pending"}
    if view.beat is None and not view.held:
        return {"state": "lost", "silent": True}  # silent while the control plane listened
    # A fresh heartbeat, or a silence that overlaps the control plane's last outage.
    return {"state": "running", "notice": view.notice}


def node_book_for(settings: Settings) -> NodeBook | None:
    """What cloud machines' agents report (their output among it), when there is a Redis."""
    if not settings.redis_url:
        return None
    from corral.services.queues.redis_conn import connect

    client = connect(settings.redis_url, patience_s=settings.timers.redis_patience_s)
    return NodeBook.for_settings(client, settings)


def node_agents_for(settings: Settings, cloud: str, notice: str | None = None) -> NodeAgents | None:
    """The node agents a cloud's machines boot, when the settings say where they report
    (``notice``: the metadata service the cloud posts its warnings on; see NodeAgents). A
    cloud package's builder hands these to its provider."""
    book = node_book_for(settings)
    if not settings.node_api_url or book is None:
        return None
    return NodeAgents(
        cloud,
        book,
        settings.node_api_url,
        source=settings.node_agent_source,
        source_sha256=settings.node_agent_sha256,
        notice=notice,
        notice_poll_s=settings.timers.node_notice_poll_s,
    )
