"""The node book (what cloud agents report) and node tokens, on a real redis-server; and how
the providers read a machine's state from its agent's reports."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from corral.services.providers.agent_wheel import build_agent_wheel
from corral.services.providers.base import LaunchSpec, ProviderInstance
from corral.services.providers.nodes import NodeAgents, warn_if_plain_http
from corral.services.state.nodes import (
    RESULT_MAX_BYTES,
    RESULTS_KEPT,
    TICKET,
    NodeBook,
    NodeName,
    ResultsRefused,
    TokenError,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def book(redis_url: str) -> NodeBook:
    return NodeBook(redis.Redis.from_url(redis_url), f"t{uuid.uuid4().hex[:6]}")


def test_a_token_names_one_node_and_dies_with_it(book: NodeBook) -> None:
    node = NodeName("aws", "att-1", 0)
    token = book.token(node)
    assert book.verify(token) == node
    assert token.startswith("cn2.n.aws.att-1.0.")
    sibling = book.token(NodeName("aws", "att-1", 1))
    assert book.verify(sibling) == NodeName("aws", "att-1", 1)
    mac = token.rsplit(".", 1)[1]
    expiry = token.split(".")[5]
    # Another node's name with this node's signature, a changed signature, other shapes
    # (issue #27: a rank of non-ASCII digits or 5,000 digits was a 500).
    forged = [
        sibling.rsplit(".", 1)[0] + "." + mac,
        token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
        f"cn2.n.aws.att-1.x.{expiry}.{mac}",
        f"cn2.n.aws.att-1.\u0663.{expiry}.{mac}",  # ARABIC-INDIC DIGIT THREE: isdigit()
        f"cn2.n.aws.att-1.\u00b2.{expiry}.{mac}",  # SUPERSCRIPT TWO: isdigit(), int() fails
        f"cn2.n.aws.att-1.{'9' * 5000}.{expiry}.{mac}",
        f"cn2.n.aws.att-1.0.{'9' * 5000}.{mac}",
        f"cn2.n.aws.att-1.0.{int(expiry) + 3600}.{mac}",  # a longer life is not signed
        "cn2.n.aws.att-1.0",
        "test-token-not-secret",
        "",
    ]
    for bad in forged:
        with pytest.raises(TokenError):
            book.verify(bad)
    # Another book (another secret) does not accept it; a ticket is not a token.
    other = NodeBook(book.r, book.prefix, secret="another-secret")
    with pytest.raises(TokenError):
        other.verify(token)
    with pytest.raises(TokenError, match="not a node token"):
        book.verify(book.ticket(node))
    with pytest.raises(TokenError, match="not an enrollment ticket"):
        book.verify(token, TICKET)
    book.finish(node, 0, "completed", 1.0)
    with pytest.raises(TokenError, match="ended"):
        book.verify(token)
    assert book.verify(sibling) == NodeName("aws", "att-1", 1)  # its sibling lives on


def test_a_token_expires_by_its_own_mac(book: NodeBook) -> None:
    node = NodeName("aws", "att-exp", 0)
    token = book.token(node, now=1_000.0)
    assert book.verify(token, now=1_000.0 + book.token_ttl_s - 1) == node
    with pytest.raises(TokenError, match="expired"):
        book.verify(token, now=1_000.0 + book.token_ttl_s + 1)


def test_a_revocation_outlives_the_node_record_and_the_token(book: NodeBook) -> None:
    # Issue #27: a node's revocation lived in a record with a 7-day TTL, after which the
    # token worked again. Now the record may go; the revocation mark stays past the token.
    node = NodeName("aws", "att-rev", 0)
    token = book.token(node)
    book.register(node, "i-rev", 1.0)
    book.end(node, "terminated by Corral")
    book.r.delete(book._k(node, "rec"))  # the 7-day record expired
    with pytest.raises(TokenError, match="ended"):
        book.verify(token)
    mark_ttl_s = book.r.ttl(book._revoked(node))
    assert mark_ttl_s > book.token_ttl_s  # outlives any token issued before the end
    assert book.expires_at(token) - time.time() < mark_ttl_s


def test_results_only_for_assigned_ids_and_capped(book: NodeBook) -> None:
    # Issue #27: 60,000 results for ids never assigned added 77 MiB to Redis.
    node = NodeName("aws", "att-res", 0)
    book.put_assignment(node, {"id": "a1", "run": "true"})
    result = {"id": "a1", "exit_code": 0, "reason": "exited", "at": 1.0}
    fakes = [{"id": f"fake-{i}", "exit_code": 0} for i in range(50)]
    refused = book.put_results(node, [result, *fakes], [])
    assert refused == [f"fake-{i}" for i in range(50)]
    assert book.r.hlen(book._k(node, "assign-result")) == 1
    _, _, results = book.assignment_view(node)
    assert set(results) == {"a1"}
    # A withdrawn assignment's result is still taken (the agent reports it after).
    book.put_assignment(node, {"id": "a2", "run": "true"})
    book.drop_assignment(node, "a2")
    assert book.put_results(node, [{**result, "id": "a2"}], []) == []
    with pytest.raises(ResultsRefused, match="bytes"):
        book.put_results(node, [{**result, "pad": "x" * RESULT_MAX_BYTES}], [])
    for i in range(RESULTS_KEPT):
        book.r.sadd(book._k(node, "assigned"), f"b{i}")
    with pytest.raises(ResultsRefused, match="at most"):
        book.put_results(node, [{**result, "id": f"b{i}"} for i in range(RESULTS_KEPT)], [])
    # Dropping old ones makes room.
    assert book.put_results(node, [{**result, "id": "b0"}], ["a1"]) == []


def test_the_nodes_whose_work_ended_are_taken_once_by_their_cloud_id(book: NodeBook) -> None:
    node, other = NodeName("aws", "att-end", 0), NodeName("aws", "att-end", 1)
    book.register(node, "i-end0", 1.0)
    book.register(other, "i-end1", 1.0)
    for n in (node, other):
        book.put_assignment(n, {"id": f"w-{n.rank}", "run": "true"})
    result = {"exit_code": 0, "reason": "exited", "at": 1.0}
    book.put_results(node, [{**result, "id": "never-assigned"}], [])  # refused: no end
    assert book.take_ended_work("aws") == []
    book.put_results(node, [{**result, "id": "w-0"}], [])
    book.put_results(other, [{**result, "id": "w-1"}], [])
    book.put_results(node, [{**result, "id": "w-0"}], [])  # a report sent again
    assert book.take_ended_work("gcp") == []  # another cloud's
    assert book.take_ended_work("aws") == ["i-end0", "i-end1"]
    assert book.take_ended_work("aws") == []  # taken


def test_log_chunks_are_kept_once_whatever_is_resent(book: NodeBook) -> None:
    node = NodeName("gcp", "att-2", 0)
    assert book.append_log(node, 0, b"hello ") == 6
    assert book.append_log(node, 0, b"hello ") == 6  # a resend (the answer was lost)
    assert book.append_log(node, 3, b"lo world") == 11  # overlaps: only the new part
    assert book.append_log(node, 20, b"gap") == 11  # a gap: refused, the node resyncs
    assert book.log(node) == b"hello world"


def _machine(state: str, attempt: str = "att-3", rank: str = "0") -> ProviderInstance:
    return ProviderInstance(
        provider_id=f"i-{attempt}-{rank}",
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="m5.large",
        state=state,
        tags={"corral-attempt": attempt, "corral-node": rank},
    )


def test_a_machine_is_up_when_its_agent_says_so(book: NodeBook) -> None:
    agents = NodeAgents("aws", book, "http://api.example:8080")
    spec = LaunchSpec(
        request_id="r-1",
        attempt_id="att-3",
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="m5.large",
        run="echo hi",
    )
    script = agents.boot_script(spec)
    node = NodeName("aws", "att-3", 0)
    assert book.verify(_ticket(script), TICKET) == node
    assert "http://api.example:8080/v1/node/agent.whl" in script
    assert book.work(node)["run"] == "echo hi"
    # The agent watches the metadata service its provider names, by protocol (none named
    # here: no watch); it is never told its cloud.
    assert "--notice" not in script and "--cloud" not in script
    watched = NodeAgents("aws", book, "http://api:1", notice="ec2-imds", notice_poll_s=2)
    assert "--notice ec2-imds --notice-poll-s 2 " in watched.boot_script(spec)

    def seen() -> ProviderInstance:
        [inst] = agents.overlay([_machine("running")])
        return inst

    assert seen().state == "pending"  # the cloud says running; no agent yet
    book.register(node, "i-att-3-0", 1.0)
    assert seen().state == "lost"  # registered, but no heartbeat is fresh
    book.heartbeat(node, {"activity": "running"}, 5.0, 2.0)
    assert seen().state == "running"
    book.finish(node, 7, "completed", 3.0)
    assert (seen().state, seen().exit_code) == ("terminated", 7)
    # A machine the cloud ended takes its token with it.
    other = NodeName("aws", "att-4", 0)
    token = book.token(other)
    book.register(other, None, 1.0)
    agents.overlay([_machine("terminated", "att-4")])
    with pytest.raises(TokenError):
        book.verify(token)


def test_a_multi_node_script_picks_its_token_by_launch_index(book: NodeBook) -> None:
    agents = NodeAgents("aws", book, "http://api:1")
    spec = LaunchSpec(
        request_id="r-1",
        attempt_id="att-5",
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="m5.large",
        count=3,
        run="true",
    )
    script = agents.boot_script(spec)
    for rank in range(3):
        ticket = script.split(f"  {rank}) token=", 1)[1].split(" ", 1)[0]
        assert book.verify(ticket, TICKET) == NodeName("aws", "att-5", rank)
        assert book.shared_boot(NodeName("aws", "att-5", rank))  # registering names the machine
        assert book.work(NodeName("aws", "att-5", rank))["envs"]["CORRAL_NODE_RANK"] == str(rank)
    assert "ami-launch-index" in script
    assert "meta-data/instance-id" in script and '--provider-id "$machine"' in script


def _ticket(script: str) -> str:
    return script.split("token=", 1)[1].split(None, 1)[0].strip("'")


def _serve(data: bytes) -> tuple[ThreadingHTTPServer, str]:
    class One(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), One)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1/node/agent.whl"


@pytest.mark.parametrize("tampered", [False, True])
def test_the_boot_script_checks_the_agent_wheels_sha256(
    book: NodeBook, tmp_path: Path, tampered: bool
) -> None:
    # Issue #27: the agent wheel was fetched over plain HTTP and run as root unchecked.
    _, wheel = build_agent_wheel()
    served = wheel + b"\0" if tampered else wheel
    server, url = _serve(served)
    try:
        agents = NodeAgents("aws", book, url.rsplit("/v1/", 1)[0])
        assert agents.source_sha256 == hashlib.sha256(wheel).hexdigest()
        spec = LaunchSpec(
            request_id="r-1", attempt_id="att-h", cloud="aws", region="us-east-1",
            zone="us-east-1a", instance_type="m5.large", run="true",
        )  # fmt: skip
        script = agents.boot_script(spec)
        assert agents.source_sha256 in script
        # Run only the install line, as the machine would.
        [line] = [ln for ln in script.splitlines() if "hashlib" in ln]
        line = line.replace('"$py"', sys.executable).replace('"$root/agent"', str(tmp_path / "a"))
        done = subprocess.run(
            ["bash", "-c", line.split(" >> ")[0]], capture_output=True, text=True, timeout=60
        )
    finally:
        server.shutdown()
    if tampered:
        assert done.returncode != 0 and "not installing" in done.stderr
        assert not (tmp_path / "a").exists()
    else:
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "a" / "corral" / "services" / "agent" / "node.py").exists()


def test_a_plain_http_api_for_nodes_is_a_loud_warning(
    book: NodeBook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    assert warn_if_plain_http("http://10.0.0.1:8080")
    assert "not https" in caplog.text and "clear text" in caplog.text
    caplog.clear()
    assert not warn_if_plain_http("https://corral.example")
    assert caplog.text == ""
    NodeAgents("aws", book, "https://corral.example", source="corral-node-agent==1.0")
    assert "has no sha256" in caplog.text  # a source of unknown content is named too


def test_a_stopped_nodes_records_are_kept_while_it_is_stopped_and_expire_once_it_ends(
    book: NodeBook,
) -> None:
    """Issue 47 (LOW): every node key expired a week after its last write, so a machine
    stopped longer could not resume (its record and work gone). A paused node's keys have no
    expiry; resuming gives them back their week, and so does its end."""
    from corral.services.state.nodes import NODE_TTL_S

    node = NodeName("aws", "att-stop", 0)
    book.put_work(node, {"run": "train"}, shared_boot=True)
    assert book.register(node, "i-1", time.time())
    book.append_log(node, 0, b"epoch 1\n")
    keys = [book._k(node, part) for part in ("rec", "work", "shared-boot", "log")]
    assert all(book.r.exists(k) for k in keys)
    book.pause(node, time.time())
    assert [book.r.ttl(k) for k in keys] == [-1] * len(keys)  # no expiry while stopped
    book.resume(node, time.time())
    assert all(NODE_TTL_S - 60 < book.r.ttl(k) <= NODE_TTL_S for k in keys)
    assert book.work(node) == {"run": "train"}
    book.pause(node, time.time())
    book.end(node, "terminated")
    assert all(0 < book.r.ttl(k) <= NODE_TTL_S for k in keys)


def test_a_spent_ticket_stays_spent_when_the_nodes_record_is_gone(book: NodeBook) -> None:
    """Issue 47 (LOW): registration was 'first' when the record had no registered_at, so a
    record that expired (or was lost) revived the spent ticket. The spent mark is a key of its
    own that outlives any ticket."""
    node = NodeName("aws", "att-spent", 0)
    ticket = book.ticket(node)
    assert book.verify(ticket, TICKET) == node
    assert book.register(node, "i-1", time.time()) is True
    assert book.register(node, "i-1", time.time()) is False
    book.r.delete(book._k(node, "rec"))  # as a week's expiry did
    assert book.register(node, "i-1", time.time()) is False
    spent = f"{book.prefix}:node-spent:aws:att-spent:0"
    assert book.r.ttl(spent) > book.token_ttl_s  # longer than the ticket could live
