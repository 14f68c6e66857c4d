"""The submit route reads its token, body, header and query itself (FastAPI's resolution of
them as dependencies was a fifth of the API's CPU per submit): the same answers, in the same
order, and the same OpenAPI document as when FastAPI resolved them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Query
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOKEN = "submit-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TASK = {"resources": {"cloud": "local", "instance_type": "cpu-2"}, "run": "true"}


@pytest.fixture
def client(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        redis_url=redis_url,
        api_token=TOKEN,
        home=tmp_path,
        clouds=["local"],
        local_cloud_file=FIXTURES / "localcloud" / "runtime.yaml",
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_the_token_is_checked_before_the_body(client: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        resp = client.post("/v1/requests", content=b"not json", headers=headers)
        assert resp.status_code == 401, headers
        assert resp.headers["www-authenticate"] == "Bearer"
    bad_body = client.post("/v1/requests", content=b"not json", headers=AUTH)
    assert bad_body.status_code == 422


def test_a_project_name_too_long_is_fastapis_own_422(client: TestClient) -> None:
    reference = FastAPI()

    @reference.post("/v1/requests")
    def _submit(project: str | None = Query(None, max_length=63)) -> None:
        return None

    long_name = "p" * 64
    ours = client.post(f"/v1/requests?project={long_name}", json={"task": TASK}, headers=AUTH)
    with TestClient(reference) as ref:
        theirs = ref.post(f"/v1/requests?project={long_name}")
    assert (ours.status_code, ours.json()) == (422, theirs.json())
    assert ours.json()["detail"][0]["loc"] == ["query", "project"]


def test_the_key_and_the_project_reach_the_submit(client: TestClient) -> None:
    keyed = {**AUTH, "Idempotency-Key": "order-1"}
    first = client.post("/v1/requests", json={"task": TASK}, headers=keyed)
    again = client.post("/v1/requests", json={"task": TASK}, headers=keyed)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    unknown = client.post("/v1/requests?project=nowhere", json={"task": TASK}, headers=AUTH)
    assert unknown.status_code == 422 and "no project 'nowhere'" in unknown.text


def test_the_openapi_document_still_names_the_parameters_and_the_token(
    client: TestClient,
) -> None:
    spec: dict[str, Any] = client.get("/openapi.json", headers=AUTH).json()
    op = spec["paths"]["/v1/requests"]["post"]
    params = {(p["in"], p["name"]): p for p in op["parameters"]}
    assert set(params) == {("query", "project"), ("header", "Idempotency-Key")}
    assert params["query", "project"]["schema"]["anyOf"][0] == {"type": "string", "maxLength": 63}
    assert op["security"] == [{"HTTPBearer": []}]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert set(op["requestBody"]["content"]) >= {"application/json", "application/yaml"}
