"""The HTTP API against a real redis-server: submit, read, cancel, auth, errors, OpenAPI.

No worker runs here, so a submitted request stays PENDING and its admission message stays on
the ``schedule`` queue, where these tests can see it.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import SecretStr

from corral.services.api import create_app
from corral.services.queues import dispatch
from corral.services.settings import Settings
from corral.services.state.store import Store
from corral.shared.records import Instance

pytestmark = pytest.mark.integration

TOKEN = "s3cret-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NO_AUTH = {"Authorization": ""}  # overrides a client's default header: no token sent
VALID_TASK = {
    "name": "hello",
    "resources": {"cloud": "local", "instance_type": "cpu-2"},
    "run": "echo hello",
}
# No cloud Corral can launch on sells 64 H100s in one node.
IMPOSSIBLE_TASK = {"resources": {"cloud": "local", "accelerators": "H100:64"}, "run": "true"}
INVALID_YAML = """\
name: typo
resources:
  cloud: local
  acelerators: A100:8
num_nodes: 0
"""


def _settings(redis_url: str, home: Path, token: str | None = TOKEN) -> Settings:
    return Settings(redis_url=redis_url, api_token=token, home=home, prefix="corral")


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return _settings(redis_url, tmp_path)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=AUTH) as c:
        yield c


@pytest.fixture
def store(settings: Settings) -> Store:
    assert settings.redis_url
    return Store(redis.Redis.from_url(settings.redis_url), prefix=settings.prefix)


def _submit(client: TestClient, task: dict[str, object] | None = None) -> dict[str, object]:
    response = client.post("/v1/requests", json={"task": task or VALID_TASK}, headers=AUTH)
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_submit_a_valid_task_stores_it_pending(client: TestClient, store: Store) -> None:
    body = _submit(client)
    assert body["state"] == "PENDING"
    assert body["attempts"] == [] and body["instances"] == []
    assert str(body["id"]).startswith("r-")
    stored = store.get_request(str(body["id"]))
    assert stored is not None and stored.task["run"] == "echo hello"
    assert client.get(f"/v1/requests/{body['id']}").json() == body


def test_submit_accepts_yaml_text_and_a_raw_yaml_body(client: TestClient) -> None:
    text = "resources:\n  cloud: local\n  instance_type: cpu-2\nrun: echo from-yaml\n"
    as_text = client.post("/v1/requests", json={"task_yaml": text}, headers=AUTH)
    raw = client.post(
        "/v1/requests", content=text, headers={**AUTH, "Content-Type": "application/yaml"}
    )
    assert as_text.status_code == 201, as_text.text
    assert raw.status_code == 201, raw.text
    assert as_text.json()["id"] != raw.json()["id"]


def test_a_submitted_request_is_on_its_clouds_provisioning_queue(
    client: TestClient, redis_url: str
) -> None:
    """Its chain was planned at submit: admission goes to its first cloud's queue, where the
    same task runs the first attempt."""
    body = _submit(client)
    broker = redis.Redis.from_url(redis_url)
    queue = dispatch.provision_queue("local")
    assert broker.llen(queue) > 0
    message = json.loads(broker.lindex(queue, 0) or b"{}")
    assert message["headers"]["task"] == dispatch.ADMIT
    args = json.loads(base64.b64decode(message["body"]))[0]
    assert args == [body["id"], "local"]


def test_an_invalid_task_is_422_naming_field_and_line(client: TestClient, store: Store) -> None:
    response = client.post("/v1/requests", json={"task_yaml": INVALID_YAML}, headers=AUTH)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail["error"] == "invalid task"
    by_field = {i["field"]: i for i in detail["issues"]}
    assert by_field["resources.acelerators"]["line"] == 4
    assert "unknown field" in by_field["resources.acelerators"]["message"]
    assert by_field["num_nodes"]["line"] == 5
    assert store.list_requests() == []


def test_a_compute_config_must_come_inline(client: TestClient) -> None:
    by_path = client.post(
        "/v1/requests", json={"task": {**VALID_TASK, "compute_config": "cc.yaml"}}, headers=AUTH
    )
    assert by_path.status_code == 422
    [issue] = by_path.json()["detail"]["issues"]
    assert issue["field"] == "compute_config" and "inline" in issue["message"]
    inline = {"head_node": {"instance_type": "cpu-2"}, "worker_nodes": [{"instance_type": "x"}]}
    inline["flags"] = {
        "instance_ranking_strategy": [
            {"ranker_type": "custom_group_order", "ranker_config": {"group_order": ["nope"]}}
        ]
    }
    crossed = client.post(
        "/v1/requests", json={"task": {**VALID_TASK, "compute_config": inline}}, headers=AUTH
    )
    assert crossed.status_code == 422
    fields = [i["field"] for i in crossed.json()["detail"]["issues"]]
    expected = "compute_config.flags.instance_ranking_strategy[0].ranker_config.group_order[0]"
    assert fields == [expected]


def test_a_malformed_body_is_422(client: TestClient) -> None:
    both = client.post("/v1/requests", json={"task": VALID_TASK, "task_yaml": "x: 1"}, headers=AUTH)
    bad_yaml = client.post(
        "/v1/requests", content="a: [1,", headers={**AUTH, "Content-Type": "text/yaml"}
    )
    assert both.status_code == 422 and "exactly one" in both.text
    assert bad_yaml.status_code == 422
    assert bad_yaml.json()["detail"]["issues"][0]["message"].startswith("not valid YAML")


def test_an_impossible_task_is_422_with_reasons(client: TestClient, store: Store) -> None:
    response = client.post("/v1/requests", json={"task": IMPOSSIBLE_TASK}, headers=AUTH)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail["error"] == "impossible"
    assert detail["reasons"] and all(isinstance(r, str) and r for r in detail["reasons"])
    assert store.list_requests() == []


def test_writes_need_the_token(client: TestClient, store: Store) -> None:
    missing = client.post("/v1/requests", json={"task": VALID_TASK}, headers=NO_AUTH)
    wrong = client.post(
        "/v1/requests", json={"task": VALID_TASK}, headers={"Authorization": "Bearer nope"}
    )
    basic = client.post(
        "/v1/requests", json={"task": VALID_TASK}, headers={"Authorization": f"Basic {TOKEN}"}
    )
    assert [r.status_code for r in (missing, wrong, basic)] == [401, 401, 401]
    assert store.list_requests() == []
    request_id = _submit(client)["id"]
    assert client.post(f"/v1/requests/{request_id}/cancel", headers=NO_AUTH).status_code == 401
    assert client.get(f"/v1/requests/{request_id}").json()["state"] == "PENDING"


def test_without_a_configured_token_nothing_but_health_answers(
    redis_url: str, tmp_path: Path
) -> None:
    with TestClient(create_app(_settings(redis_url, tmp_path, token=None))) as c:
        response = c.post("/v1/requests", json={"task": VALID_TASK}, headers=AUTH)
        assert response.status_code == 503
        assert "no token configured" in response.json()["detail"]
        assert c.get("/v1/requests").status_code == 503  # reads too: never open by accident
        assert c.get("/healthz").status_code == 200


def test_reads_need_the_token_too(settings: Settings) -> None:
    with TestClient(create_app(settings)) as anonymous:
        for path in ("/v1/requests", "/v1/instances", "/v1/pools", "/v1/clusters"):
            assert anonymous.get(path).status_code == 401, path
        wrong = anonymous.get("/v1/requests", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert anonymous.get("/healthz").status_code == 200


def test_the_token_may_come_from_the_home_file(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "api-token").write_text("from-file\n")
    with TestClient(create_app(_settings(redis_url, tmp_path, token=None))) as c:
        ok = c.post(
            "/v1/requests", json={"task": VALID_TASK}, headers={"Authorization": "Bearer from-file"}
        )
        refused = c.post("/v1/requests", json={"task": VALID_TASK}, headers=AUTH)
    assert (ok.status_code, refused.status_code) == (201, 401)


def test_list_requests_newest_first_with_filters(client: TestClient) -> None:
    first = _submit(client)["id"]
    time.sleep(0.01)  # distinct creation times, so the order is defined
    second = _submit(client)["id"]
    assert client.post(f"/v1/requests/{first}/cancel", headers=AUTH).status_code == 200
    listed = client.get("/v1/requests").json()["requests"]
    assert [r["id"] for r in listed] == [second, first]
    cancelled = client.get("/v1/requests", params={"state": "CANCELLED"}).json()["requests"]
    assert [r["id"] for r in cancelled] == [first]
    assert len(client.get("/v1/requests", params={"limit": 1}).json()["requests"]) == 1
    assert client.get("/v1/requests", params={"state": "NAPPING"}).status_code == 422


def test_cancel_a_pending_request_keeps_its_history(client: TestClient, store: Store) -> None:
    request_id = str(_submit(client)["id"])
    response = client.post(f"/v1/requests/{request_id}/cancel", headers=AUTH)
    assert response.status_code == 200 and response.json()["state"] == "CANCELLED"
    stored = store.get_request(request_id)
    assert stored is not None
    assert [(t.from_state, t.to_state) for t in stored.history] == [
        (None, "PENDING"),
        ("PENDING", "CANCELLED"),
    ]
    # A finished request is left as it is, by cancel and terminate alike.
    again = client.post(f"/v1/requests/{request_id}/terminate", headers=AUTH)
    assert again.status_code == 200 and again.json()["state"] == "CANCELLED"
    after = store.get_request(request_id)
    assert after is not None and len(after.history) == 2


def test_events_are_paged_by_sequence_number(client: TestClient) -> None:
    request_id = _submit(client)["id"]
    page = client.get(f"/v1/requests/{request_id}/events").json()
    assert page["state"] == "PENDING"
    assert [e["seq"] for e in page["events"]] == [1]
    assert "accepted" in page["events"][0]["text"]
    client.post(f"/v1/requests/{request_id}/cancel", headers=AUTH)
    later = client.get(f"/v1/requests/{request_id}/events", params={"after": 1}).json()
    assert later["state"] == "CANCELLED"
    assert [e["seq"] for e in later["events"]] == [2]
    assert "CANCELLED" in later["events"][0]["text"]


def test_unknown_ids_are_404_naming_the_id(client: TestClient) -> None:
    reads = [
        client.get("/v1/requests/r-missing"),
        client.get("/v1/requests/r-missing/events"),
        client.get("/v1/requests/r-missing/logs"),
    ]
    writes = [
        client.post("/v1/requests/r-missing/cancel", headers=AUTH),
        client.post("/v1/requests/r-missing/terminate", headers=AUTH),
        client.post("/v1/instances/i-missing/terminate", headers=AUTH),
    ]
    for response in reads + writes:
        assert response.status_code == 404, response.request.url
        assert "missing" in response.json()["detail"]


def _instance(store: Store, request_id: str, index: int, provider_id: str) -> Instance:
    inst = Instance.new(
        f"i-{request_id[2:]}-{index}", request_id, index, time.time(),
        cloud="local", region="lab-east", zone="lab-east-a", instance_type="cpu-2",
        market="on_demand", provider_id=provider_id, pid=4242,
    )  # fmt: skip
    assert store.create_instance(inst)
    return inst


def test_instances_listing_logs_and_terminating_one(
    client: TestClient, store: Store, settings: Settings, redis_url: str
) -> None:
    request_id = str(_submit(client)["id"])
    other_id = str(_submit(client)["id"])
    inst = _instance(store, request_id, 0, "local-abc")
    _instance(store, other_id, 0, "local-def")
    settings.logs.mkdir(parents=True, exist_ok=True)
    (settings.logs / "local-abc.log").write_text("hello from the node\n")

    mine = client.get("/v1/instances", params={"request": request_id}).json()["instances"]
    assert [(i["id"], i["request_id"], i["pid"], i["state"]) for i in mine] == [
        (inst.id, request_id, 4242, "REQUESTED")
    ]
    assert len(client.get("/v1/instances").json()["instances"]) == 2
    assert client.get("/v1/instances", params={"state": "RUNNING"}).json()["instances"] == []
    view = client.get(f"/v1/requests/{request_id}").json()
    assert [i["provider_id"] for i in view["instances"]] == ["local-abc"]

    logs = client.get(f"/v1/requests/{request_id}/logs")
    assert logs.status_code == 200 and "hello from the node" in logs.text
    wrong = client.get(f"/v1/requests/{other_id}/logs", params={"instance": inst.id})
    assert wrong.status_code == 404

    broker = redis.Redis.from_url(redis_url)
    queued = broker.llen(dispatch.PROVISION_QUEUE)
    response = client.post(f"/v1/instances/{inst.id}/terminate", headers=AUTH)
    assert response.status_code == 200 and response.json()["id"] == request_id
    assert broker.llen(dispatch.PROVISION_QUEUE) == queued + 1


def _admits(redis_url: str) -> list[str]:
    """The request ids of the admission messages waiting (on the local cloud's queue)."""
    broker = redis.Redis.from_url(redis_url)
    found = []
    for raw in broker.lrange(dispatch.provision_queue("local"), 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == dispatch.ADMIT:
            found.append(json.loads(base64.b64decode(message["body"]))[0][0])
    return found


def test_an_idempotency_key_creates_one_request(
    client: TestClient, store: Store, redis_url: str
) -> None:
    keyed = {**AUTH, "Idempotency-Key": "order-1234"}
    first = client.post("/v1/requests", json={"task": VALID_TASK}, headers=keyed)
    again = client.post("/v1/requests", json={"task": VALID_TASK}, headers=keyed)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert [r.id for r in store.list_requests()] == [first.json()["id"]]
    # A duplicate of a PENDING request hands it to scheduling again (the first submitter may
    # have died before it could); admission is idempotent.
    assert _admits(redis_url) == [first.json()["id"]] * 2
    accepted = [e.text for e in store.events(first.json()["id"])]
    assert accepted == ["accepted: hello (idempotency key 'order-1234')"]

    found = client.get("/v1/submissions/order-1234", headers=AUTH).json()
    assert found["state"] == "accepted" and found["received"] == 2
    assert found["request_id"] == first.json()["id"] and found["request"] == first.json()
    assert found["refusal"] is None


def test_a_refusal_is_recorded_under_its_key_and_does_not_use_it_up(
    client: TestClient, store: Store
) -> None:
    keyed = {**AUTH, "Idempotency-Key": "batch/7"}
    refused = client.post("/v1/requests", json={"task_yaml": INVALID_YAML}, headers=keyed)
    assert refused.status_code == 422
    found = client.get("/v1/submissions/batch%2F7", headers=AUTH).json()
    assert found["state"] == "refused" and found["request_id"] is None
    assert found["refusal"] == refused.json()["detail"]  # the API's own answer, kept

    impossible = client.post("/v1/requests", json={"task": IMPOSSIBLE_TASK}, headers=keyed)
    assert impossible.status_code == 422
    assert (
        client.get("/v1/submissions/batch%2F7", headers=AUTH).json()["refusal"]
        == impossible.json()["detail"]
    )
    assert store.list_requests() == []

    fixed = client.post("/v1/requests", json={"task": VALID_TASK}, headers=keyed)
    assert fixed.status_code == 201
    found = client.get("/v1/submissions/batch%2F7", headers=AUTH).json()
    assert (found["state"], found["request_id"], found["refusal"]) == (
        "accepted",
        fixed.json()["id"],
        None,
    )
    assert found["received"] == 3


def test_a_bad_idempotency_key_or_an_unknown_one(client: TestClient, store: Store) -> None:
    long_key = {**AUTH, "Idempotency-Key": "k" * 256}
    response = client.post("/v1/requests", json={"task": VALID_TASK}, headers=long_key)
    assert response.status_code == 422
    assert response.json()["detail"]["error"] == "invalid idempotency key"
    assert "at most 255" in response.json()["detail"]["reasons"][0]
    assert store.list_requests() == []
    unknown = client.get("/v1/submissions/never-sent", headers=AUTH)
    assert unknown.status_code == 404 and "never-sent" in unknown.json()["detail"]


def test_openapi_lists_every_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    expected = {
        "/v1/requests": {"get", "post"},
        "/v1/requests/{request_id}": {"get"},
        "/v1/requests/{request_id}/events": {"get"},
        "/v1/requests/{request_id}/logs": {"get"},
        "/v1/requests/{request_id}/logs/since": {"get"},
        "/v1/requests/{request_id}/exec": {"post"},
        "/v1/execs/{exec_id}": {"get"},
        "/v1/requests/{request_id}/jobs": {"get", "post"},
        "/v1/requests/{request_id}/jobs/cancel": {"post"},
        "/v1/requests/{request_id}/usage": {"get"},
        "/v1/requests/{request_id}/sessions": {"post"},
        "/v1/sessions/{session_id}/input": {"post"},
        "/v1/sessions/{session_id}/output": {"get"},
        "/v1/bundles/{sha256}": {"head", "put"},
        "/v1/requests/{request_id}/cancel": {"post"},
        "/v1/requests/{request_id}/terminate": {"post"},
        "/v1/requests/{request_id}/stop": {"post"},
        "/v1/requests/{request_id}/start": {"post"},
        "/v1/requests/{request_id}/autostop": {"post"},
        # A replicated service's endpoint: its load balancer relays any method.
        "/v1/services/{request_id}/{path}": {
            "get",
            "post",
            "put",
            "patch",
            "delete",
            "head",
            "options",
        },
        "/v1/instances": {"get"},
        "/v1/costs": {"get"},
        "/v1/instances/{instance_id}/terminate": {"post"},
        "/v1/clusters": {"get", "post"},
        "/v1/clusters/{name}": {"get", "delete"},
        "/v1/clusters/{name}/demand": {"put"},
        "/v1/pools": {"get", "post"},
        "/v1/pools/{name}": {"get", "delete"},
        "/v1/requests/{request_id}/why": {"get"},
        "/v1/submissions/{key}": {"get"},
        "/v1/whoami": {"get"},
        "/v1/users": {"get", "post"},
        "/v1/users/{name}/revoke": {"post"},
        "/v1/projects": {"get", "post"},
        "/v1/projects/{name}/quota": {"put"},
        "/healthz": {"get"},
        "/v1/node/register": {"post"},
        "/v1/node/resume": {"post"},
        "/v1/node/heartbeat": {"post"},
        "/v1/node/assignments": {"get"},
        "/v1/node/results": {"post"},
        "/v1/node/finish": {"post"},
        "/v1/node/notice": {"post"},
        "/v1/node/logs": {"post"},
        "/v1/node/agent.whl": {"get"},
        "/v1/node/bundle": {"get"},
        "/v1/node/execs": {"get"},
        "/v1/node/jobs/next": {"get"},
        "/v1/node/peers": {"get"},
        "/v1/node/execs/{exec_id}/output": {"post"},
        "/v1/node/execs/{exec_id}/done": {"post"},
        "/v1/node/sessions/{session_id}": {"get"},
        "/v1/node/sessions/{session_id}/input": {"get"},
        "/v1/node/sessions/{session_id}/output": {"post"},
    }
    assert {path: set(ops) for path, ops in spec["paths"].items()} == expected
    assert "RequestView" in spec["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_the_apis_description_needs_a_token(settings: Settings) -> None:
    """Issue #47 item 7: /openapi.json and /docs answered without a token. The description
    now needs one (any user's); the browser page is the console's, behind its session."""
    with TestClient(create_app(settings)) as anonymous:
        assert anonymous.get("/openapi.json").status_code == 401
        assert anonymous.get("/redoc").status_code == 404
        docs = anonymous.get("/docs", follow_redirects=False)
        assert docs.status_code == 303 and docs.headers["location"] == "/console/docs"
        page = anonymous.get("/console/docs", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/console/login")
        assert anonymous.get("/console/openapi.json", follow_redirects=False).status_code == 303
        assert anonymous.get("/healthz").status_code == 200  # probes still ask without one
        spec = anonymous.get("/openapi.json", headers=AUTH).json()
        assert "/v1/requests" in spec["paths"]
        shown = anonymous.get("/console/docs", headers=AUTH)
        assert shown.status_code == 200 and "/console/openapi.json" in shown.text


def test_metrics_are_open_unless_a_scrape_token_is_set(settings: Settings) -> None:
    """Issue #47 item 7: /metrics answered anyone. It stays open by default (counts and gauges,
    what the chart's ServiceMonitor and pod annotations scrape without a token); with
    CORRAL_METRICS_TOKEN it answers that token only (not even the admin's)."""
    with TestClient(create_app(settings)) as anonymous:
        assert anonymous.get("/metrics").status_code == 200
    scrape = "scrape-token-not-secret"
    guarded = settings.model_copy(update={"metrics_token": SecretStr(scrape)})
    with TestClient(create_app(guarded)) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers=AUTH).status_code == 401
        assert c.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        served = c.get("/metrics", headers={"Authorization": f"Bearer {scrape}"})
        assert served.status_code == 200 and "corral_store_up 1.0" in served.text


def _dead_redis_url() -> str:
    """A Redis URL on a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def test_health_and_reads_say_503_when_redis_is_down(client: TestClient, tmp_path: Path) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "detail": None}
    # The API waits redis_patience_s for a Redis that is away (a restart): not this long here.
    down_settings = _settings(_dead_redis_url(), tmp_path)
    down_settings.timers.redis_patience_s = 0.5
    with TestClient(create_app(down_settings)) as down:
        health = down.get("/healthz")
        listing = down.get("/v1/requests", headers=AUTH)
    assert health.status_code == 503 and health.json()["status"] == "unavailable"
    assert listing.status_code == 503 and "unreachable" in listing.json()["detail"]
