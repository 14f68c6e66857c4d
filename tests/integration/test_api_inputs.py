"""Malformed and hostile inputs to the API and the submission queue (issue #27, items 5 and
6): each is a 4xx with a reason, never a 500, and nothing oversized is stored. Against a real
redis-server; no worker runs (a request accepted stays PENDING)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.runtime import requests
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings

pytestmark = pytest.mark.integration

TOKEN = "inputs-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
YAML = {**AUTH, "Content-Type": "application/yaml"}

# The finding's shape: 405 bytes of anchors became a 6.9 MB stored request.
BOMB = (
    "name: bomb\nrun: 'true'\nresources: {cloud: local, instance_type: cpu-2}\n"
    "envs:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"  {c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)
    )
)


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_url, api_token=TOKEN, home=tmp_path, prefix="inp")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def _stored_keys(settings: Settings) -> int:
    """Keys in Redis, less the control plane's pulses (the API's own is written by a thread of
    its own at any moment, nothing a request stored)."""
    keys = Deps(settings).redis.keys("*")
    return sum(1 for k in keys if b":outage" not in (k if isinstance(k, bytes) else k.encode()))


def test_a_yaml_alias_bomb_is_refused_and_nothing_is_stored(
    client: TestClient, settings: Settings
) -> None:
    before = _stored_keys(settings)
    resp = client.post("/v1/requests", content=BOMB, headers=YAML)
    assert resp.status_code == 422, resp.text
    assert "alias bomb" in resp.text
    as_field = client.post("/v1/requests", json={"task_yaml": BOMB}, headers=AUTH)
    assert as_field.status_code == 422 and "alias bomb" in as_field.text
    assert _stored_keys(settings) == before


@pytest.mark.parametrize(
    "text,reason",
    [
        ("name: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper"),
        ("{a: 1}: 2\n", "a key must be a plain value"),
        ("? [a, b]\n: 2\n", "a key must be a plain value"),
    ],
)
def test_deep_nesting_and_collection_keys_are_422(
    client: TestClient, text: str, reason: str
) -> None:
    resp = client.post("/v1/requests", content=text, headers=YAML)
    assert resp.status_code == 422, resp.text
    assert reason in resp.text


def test_deep_json_is_422(client: TestClient) -> None:
    body = '{"task": {"name": "x", "labels": ' + "[" * 5000 + "]" * 5000 + "}}"
    resp = client.post(
        "/v1/requests", content=body, headers={**AUTH, "Content-Type": "application/json"}
    )
    assert 400 <= resp.status_code < 500, resp.text


def test_the_stored_task_is_capped(client: TestClient, settings: Settings) -> None:
    big = "echo " + "x" * (requests.MAX_STORED_TASK_BYTES + 10)
    task = {"name": "big", "resources": {"cloud": "local", "instance_type": "cpu-2"}, "run": big}
    before = _stored_keys(settings)
    resp = client.post("/v1/requests", json={"task": task}, headers=AUTH)
    assert resp.status_code == 422, resp.text
    assert f"at most {requests.MAX_STORED_TASK_BYTES}" in resp.text
    assert _stored_keys(settings) == before


def test_the_queue_refuses_the_bomb_with_a_reason(settings: Settings) -> None:
    deps = Deps(settings)
    done = requests.submit_queued(deps, BOMB, "bomb-key")
    assert "refused" in done and "alias bomb" in json.dumps(done["refused"])
    assert deps.store.get_request("anything") is None


@pytest.mark.parametrize(
    "token",
    [
        "cn2.n.aws.att.\u0663.9999999999.AAAA",
        "cn2.n.aws.att.\u00b2.9999999999.AAAA",
        "cn2.n.aws.att." + "9" * 5000 + ".9999999999.AAAA",
        "cn2.n.aws.att.0." + "9" * 5000 + ".AAAA",
        "cn1.aws.att.\u0663.AAAA",
        "cn2.e.aws.att.0.1.AAAA",
    ],
)
def test_a_malformed_node_token_is_401_not_500(client: TestClient, token: str) -> None:
    header = {"Authorization": f"Bearer {token}".encode()}  # as a client sends raw bytes
    for method, path in (("GET", "/v1/node/assignments"), ("POST", "/v1/node/register")):
        resp = client.request(method, path, headers=header, json={})
        assert resp.status_code == 401, (path, resp.status_code, resp.text)
