"""A node that has just registered is not silent (the Kubernetes seed-pool test's second pod).

Its agent registers, then sets itself up and sends its first heartbeat. A boot watch that read
the node in between used to see it registered with no fresh heartbeat and no heartbeat TTL, so
silent from the first instant: the launch failed as ``InstanceSilent``, the machine was dropped,
its workload went back to the pool's queue and the next pass launched a second machine (pod)
for it. A registration now gives the node the heartbeat TTL it is handed to send its first
heartbeat; a node silent longer than that is still lost. On the test's redis-server, through
the API's registration route and the boot watch's own reading (the agents' overlay, then
:func:`corral.shared.observe.boot_verdict`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.providers.base import ProviderInstance
from corral.services.providers.nodes import NodeAgents
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings
from corral.services.state.nodes import NodeBook, NodeName
from corral.shared.observe import boot_verdict


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(
        redis_url=redis_url, api_token="admin-token", home=tmp_path, prefix="first-beat",
        node_secret="node-secret-for-tests",
    )  # fmt: skip


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def book(settings: Settings) -> NodeBook:
    return Deps(settings).nodes


def _verdict(book: NodeBook, node: NodeName) -> str:
    """What the boot watch makes of the node's machine, which the cloud runs."""
    agents = NodeAgents(
        node.cloud, book, "https://api.example", source="wheel", source_sha256="0" * 64
    )
    machine = ProviderInstance(
        provider_id=f"pod-{node.attempt_id}",
        cloud=node.cloud,
        region="lab",
        zone="default",
        instance_type="4CPU--16GB",
        state="running",
        tags={"corral-attempt": node.attempt_id, "corral-node": str(node.rank)},
    )
    return boot_verdict(agents.overlay([machine]), 1, late=False)


def test_a_node_between_registering_and_its_first_heartbeat_is_up_not_silent(
    client: TestClient, book: NodeBook
) -> None:
    node = NodeName("kubernetes", "m-first", 0)
    book.put_work(node, {"setup": None, "run": None, "envs": {}, "workdir": None})
    assert _verdict(book, node) == "booting"  # no agent yet
    answer = client.post(
        "/v1/node/register", json={}, headers={"Authorization": f"Bearer {book.ticket(node)}"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["heartbeat_ttl_s"] >= 10.0  # the defaults: the checks below are early
    # No heartbeat yet: the agent is still setting itself up.
    assert book.view(node).beat is None
    assert _verdict(book, node) == "up"  # was "silent": the launch failed, a 2nd pod followed
    book.heartbeat(node, {"activity": "idle"}, ttl_s=answer.json()["heartbeat_ttl_s"], now=1.0)
    assert _verdict(book, node) == "up"


def test_a_node_that_never_beats_after_registering_is_still_silent(book: NodeBook) -> None:
    node = NodeName("kubernetes", "m-mute", 0)
    # Registered longer ago than its heartbeat TTL, and not a beat since.
    assert book.register(node, None, time.time() - 30.0, beat_ttl_s=10.0)
    assert _verdict(book, node) == "silent"
    # Without a TTL (as before any was recorded), silent from the start.
    other = NodeName("kubernetes", "m-bare", 0)
    assert book.register(other, None, time.time())
    assert _verdict(book, other) == "silent"


def test_a_node_resumed_after_a_stop_is_up_until_its_first_heartbeat_is_due(
    client: TestClient, book: NodeBook
) -> None:
    """``corral stop`` then ``start``: the agent resumes with the token it kept. Its last
    heartbeat predates the stop by far more than a TTL; the resume gives it one TTL again."""
    node = NodeName("kubernetes", "m-resumed", 0)
    book.put_work(node, {"setup": None, "run": None, "envs": {}, "workdir": None})
    assert book.register(node, None, time.time() - 600.0, beat_ttl_s=10.0)
    book.heartbeat(node, {"activity": "idle"}, ttl_s=10.0, now=time.time() - 590.0)
    book.pause(node, time.time() - 500.0)
    book.finish(node, None, "its machine stopped", time.time() - 499.0)  # the agent's last words
    assert book.view(node).beat is None
    token = book.token(node)
    answer = client.post("/v1/node/resume", json={}, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert not book.paused(node)
    assert _verdict(book, node) == "up"  # was "silent": a relaunch of a machine just started
    # Silent for longer than a TTL after resuming: lost, as any node.
    book.resume(node, time.time() - 30.0, beat_ttl_s=10.0)
    assert _verdict(book, node) == "silent"
