"""The node book (what cloud agents report) and node tokens, on a real redis-server; and how
the providers read a machine's state from its agent's reports."""

from __future__ import annotations

import uuid

import pytest
import redis

from corral.services.providers.base import LaunchSpec, ProviderInstance
from corral.services.providers.nodes import NodeAgents
from corral.services.state.nodes import NodeBook, NodeName, TokenError

pytestmark = pytest.mark.integration


@pytest.fixture
def book(redis_url: str) -> NodeBook:
    return NodeBook(redis.Redis.from_url(redis_url), f"t{uuid.uuid4().hex[:6]}")


def test_a_token_names_one_node_and_dies_with_it(book: NodeBook) -> None:
    node = NodeName("aws", "att-1", 0)
    token = book.token(node)
    assert book.verify(token) == node
    assert token.startswith("cn1.aws.att-1.0.")
    sibling = book.token(NodeName("aws", "att-1", 1))
    assert book.verify(sibling) == NodeName("aws", "att-1", 1)
    # Another node's name with this node's signature, a changed signature, other shapes.
    forged = [
        sibling.rsplit(".", 1)[0] + "." + token.rsplit(".", 1)[1],
        token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
        "cn1.aws.att-1.x." + token.rsplit(".", 1)[1],
        "test-token-not-secret",
        "",
    ]
    for bad in forged:
        with pytest.raises(TokenError):
            book.verify(bad)
    # Another book (another secret) does not accept it.
    other = NodeBook(book.r, book.prefix, secret="another-secret")
    with pytest.raises(TokenError):
        other.verify(token)
    book.finish(node, 0, "completed", 1.0)
    with pytest.raises(TokenError, match="ended"):
        book.verify(token)
    assert book.verify(sibling) == NodeName("aws", "att-1", 1)  # its sibling lives on


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
    assert book.token(node) in script and "http://api.example:8080/v1/node/agent.whl" in script
    assert book.work(node)["run"] == "echo hi"

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
        assert f"{rank}) token={book.token(NodeName('aws', 'att-5', rank))}" in script
        assert book.work(NodeName("aws", "att-5", rank))["envs"]["CORRAL_NODE_RANK"] == str(rank)
    assert "ami-launch-index" in script
