"""``GET /v1/node/peers``: a launch's nodes learn each other's addresses (issue #45 item 2).

Each node's agent registers with the address it reaches the API from; the route answers every
node's address by rank (SkyPilot's ``SKYPILOT_NODE_IPS``, the head first) once all have one,
and null before, so no node starts before it can reach the others. An agent that found no
address of its own is known by the one its registration came from. A stopped and started
machine may come back elsewhere: its resume carries its new address. On the test's
redis-server, through the API's routes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings
from corral.services.state.nodes import NodeBook, NodeName


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(
        redis_url=redis_url, api_token="admin-token", home=tmp_path, prefix="peers",
        node_secret="node-secret-for-tests",
    )  # fmt: skip


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), client=("10.0.0.7", 50000)) as c:
        yield c


@pytest.fixture
def book(settings: Settings) -> NodeBook:
    return Deps(settings).nodes


def _register(client: TestClient, book: NodeBook, node: NodeName, **body: object) -> str:
    answer = client.post(
        "/v1/node/register", json=body, headers={"Authorization": f"Bearer {book.ticket(node)}"}
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def _peers(client: TestClient, token: str) -> object:
    got = client.get("/v1/node/peers", headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200, got.text
    return got.json()["ips"]


def test_the_addresses_come_by_rank_once_every_node_registered(
    client: TestClient, book: NodeBook
) -> None:
    nodes = [NodeName("aws", "a-peers", rank) for rank in range(3)]
    for rank, node in enumerate(nodes):
        envs = {"CORRAL_NODE_RANK": str(rank), "CORRAL_NUM_NODES": "3"}
        book.put_work(node, {"setup": None, "run": "true", "envs": envs, "workdir": None})
    # Registered out of rank order; until the last one, nobody knows everyone.
    second = _register(client, book, nodes[2], address="10.0.0.9")
    assert _peers(client, second) is None
    head = _register(client, book, nodes[0], address="10.0.0.5")
    assert _peers(client, head) is None
    # No address of its own (no route found): the one its registration came from.
    middle = _register(client, book, nodes[1])
    ips = ["10.0.0.5", "10.0.0.7", "10.0.0.9"]
    assert _peers(client, middle) == _peers(client, head) == _peers(client, second) == ips


def test_an_address_that_is_no_ip_is_refused(client: TestClient, book: NodeBook) -> None:
    node = NodeName("gcp", "a-bad", 0)
    book.put_work(node, {"setup": None, "run": "true", "envs": {}, "workdir": None})
    answer = client.post(
        "/v1/node/register",
        json={"address": "10.0.0.5; rm -rf /"},
        headers={"Authorization": f"Bearer {book.ticket(node)}"},
    )
    assert answer.status_code == 422 and "not an IP address" in answer.text


def test_a_resumed_machine_is_known_at_its_new_address(client: TestClient, book: NodeBook) -> None:
    node = NodeName("aws", "a-moved", 0)
    envs = {"CORRAL_NODE_RANK": "0", "CORRAL_NUM_NODES": "1"}
    book.put_work(node, {"setup": None, "run": None, "envs": envs, "workdir": None})
    token = _register(client, book, node, address="10.0.0.5")
    assert _peers(client, token) == ["10.0.0.5"]
    book.pause(node, 1.0)
    resumed = client.post(
        "/v1/node/resume",
        json={"address": "10.0.3.7"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resumed.status_code == 200, resumed.text
    assert _peers(client, str(resumed.json()["token"])) == ["10.0.3.7"]
