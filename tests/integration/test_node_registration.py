"""Node registration through the API (issue #27, items 3, 4 and 7), on a real redis-server: a
boot script's one-time ticket is spent for the node's token and its work, once; a ticket that
other machines could read is taken only from the machine launched as its node; tokens renew
past half their life; results are kept only for work the node was given."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings
from corral.services.state.nodes import NodeBook, NodeName

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(
        redis_url=redis_url, api_token="admin-token", home=tmp_path, prefix="reg",
        node_secret="node-secret-for-tests",
    )  # fmt: skip


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def book(settings: Settings) -> NodeBook:
    return Deps(settings).nodes


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


WORK = {"setup": None, "run": "true", "envs": {"SECRET_ENV": "s3cr3t"}, "workdir": None}


def test_the_ticket_is_spent_once_for_the_token_and_the_work(
    client: TestClient, book: NodeBook
) -> None:
    node = NodeName("gcp", "att-1", 0)
    book.put_work(node, WORK)
    ticket = book.ticket(node)
    first = client.post("/v1/node/register", json={}, headers=_bearer(ticket))
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["work"]["envs"]["SECRET_ENV"] == "s3cr3t"
    token = answer["token"]
    assert token.startswith("cn2.n.gcp.att-1.0.") and book.verify(token) == node
    # The ticket again: refused, and no work in the answer.
    again = client.post("/v1/node/register", json={}, headers=_bearer(ticket))
    assert again.status_code == 403 and "spent" in again.text
    assert "s3cr3t" not in again.text
    # The token registers nothing; the ticket reaches no other route.
    assert client.post("/v1/node/register", json={}, headers=_bearer(token)).status_code == 401
    assert client.get("/v1/node/assignments", headers=_bearer(ticket)).status_code == 401
    assert client.get("/v1/node/assignments", headers=_bearer(token)).status_code == 200


def test_a_shared_ticket_is_taken_only_from_its_own_machine(
    client: TestClient, book: NodeBook
) -> None:
    a, b = NodeName("aws", "att-2", 0), NodeName("aws", "att-2", 1)
    for node in (a, b):
        book.put_work(node, WORK, shared_boot=True)
    ticket_b = book.ticket(b)

    def register(provider_id: str | None) -> int:
        body = {} if provider_id is None else {"provider_id": provider_id}
        return client.post("/v1/node/register", json=body, headers=_bearer(ticket_b)).status_code

    assert register(None) == 403  # it must name its machine
    assert register("i-bbbb") == 409  # not described yet: the agent tries again
    book.bind("i-aaaa", a)
    book.bind("i-bbbb", b)
    assert register("i-aaaa") == 403  # node A's machine with B's ticket (read from UserData)
    assert register("i-bbbb") == 200  # B itself
    assert register("i-bbbb") == 403  # and only once


def test_a_heartbeat_renews_a_token_past_half_its_life(client: TestClient, book: NodeBook) -> None:
    node = NodeName("gcp", "att-3", 0)
    beat = {"activity": "running", "ttl_s": 5}
    fresh = book.token(node)
    assert (
        "token" not in client.post("/v1/node/heartbeat", json=beat, headers=_bearer(fresh)).json()
    )
    old = book.token(node, now=time.time() - 0.6 * book.token_ttl_s)
    renewed = client.post("/v1/node/heartbeat", json=beat, headers=_bearer(old)).json()["token"]
    assert book.expires_at(renewed) > book.expires_at(old) + 0.5 * book.token_ttl_s
    expired = book.token(node, now=time.time() - book.token_ttl_s - 10)
    gone = client.post("/v1/node/heartbeat", json=beat, headers=_bearer(expired))
    assert gone.status_code == 401 and "expired" in gone.text


def test_results_for_ids_never_assigned_are_not_stored(client: TestClient, book: NodeBook) -> None:
    # Issue #27: 60,000 fake results added 77 MiB to Redis in 40 requests.
    node = NodeName("gcp", "att-4", 0)
    token = book.token(node)
    book.put_assignment(node, {"id": "real", "run": "true"})
    fakes = [{"id": f"fake-{i}", "exit_code": 0} for i in range(99)]
    body = {"results": [{"id": "real", "exit_code": 0}, *fakes]}
    resp = client.post("/v1/node/results", json=body, headers=_bearer(token))
    assert resp.status_code == 200 and len(resp.json()["refused"]) == 99
    assert book.r.hlen(book._k(node, "assign-result")) == 1
    too_many = {"results": [{"id": f"x{i}"} for i in range(101)]}
    assert client.post("/v1/node/results", json=too_many, headers=_bearer(token)).status_code == 422
    big = {"results": [{"id": "real", "pad": "x" * 10_000}]}
    assert client.post("/v1/node/results", json=big, headers=_bearer(token)).status_code == 413
