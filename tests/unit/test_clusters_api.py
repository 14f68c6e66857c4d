"""The cluster routes of the HTTP API, in process over a real redis-server (no workers: the
ticks they dispatch wait in the queue)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "fixtures" / "seeds" / "ray-cluster-node-types.yaml"
LOCAL = REPO / "tests" / "fixtures" / "localcloud" / "cluster.yaml"
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NO_AUTH = {"Authorization": ""}  # overrides a client's default header: no token sent


@pytest.fixture
def client(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(redis_url=redis_url, api_token=TOKEN, home=tmp_path, local_cloud_file=LOCAL)
    with TestClient(create_app(settings), headers=AUTH) as c:
        yield c


def _up(client: TestClient, **extra: object) -> object:
    body = {"cluster_yaml": SEED.read_text(), "file_name": "seed.yaml", "cloud": "local", **extra}
    return client.post("/v1/clusters", json=body, headers=AUTH)


def test_register_list_show_demand_and_down(client: TestClient) -> None:
    resp = _up(client)
    assert resp.status_code == 201, resp.text
    assert resp.json()["name"] == "multi-node-type" and resp.json()["cloud"] == "local"
    assert _up(client).status_code == 409
    assert _up(client, name="second").status_code == 201
    names = [c["name"] for c in client.get("/v1/clusters").json()["clusters"]]
    assert names == ["multi-node-type", "second"]

    view = client.get("/v1/clusters/multi-node-type").json()
    assert view["nodes"] == [] and view["demand"] is None and view["last_decision"] is None

    demand = {"demand_yaml": "bundles: [{resources: {GPU: 1}, count: 2}]\n"}
    resp = client.put("/v1/clusters/multi-node-type/demand", json=demand, headers=AUTH)
    assert resp.status_code == 200, resp.text
    assert resp.json()["demand"]["bundles"] == [{"resources": {"GPU": 1.0}, "count": 2}]
    cleared = client.put("/v1/clusters/multi-node-type/demand", json={}, headers=AUTH)
    assert cleared.json()["demand"] is None

    gone = client.delete("/v1/clusters/second", headers=AUTH)
    assert gone.status_code == 200 and gone.json()["state"] == "down"


def test_writes_need_the_token_and_wrong_input_is_422_with_lines(client: TestClient) -> None:
    body = {"cluster_yaml": SEED.read_text(), "cloud": "local"}
    assert client.post("/v1/clusters", json=body, headers=NO_AUTH).status_code == 401
    bad = {"cluster_yaml": "cluster_name: x\nprovider: {type: aws}\nmax_workers: -1\n"}
    resp = client.post("/v1/clusters", json={**bad, "file_name": "c.yaml"}, headers=AUTH)
    assert resp.status_code == 422
    [issue] = resp.json()["detail"]["issues"]
    assert (issue["file"], issue["line"], issue["field"]) == ("c.yaml", 3, "max_workers")

    _up(client)
    wrong = {"demand_yaml": "bundles: [{resources: {CPU: 1}, cuont: 2}]\n"}
    resp = client.put("/v1/clusters/multi-node-type/demand", json=wrong, headers=AUTH)
    assert resp.status_code == 422
    assert client.get("/v1/clusters/nope").status_code == 404
    assert client.delete("/v1/clusters/nope", headers=AUTH).status_code == 404


def test_a_file_for_another_cloud_or_a_bad_name_is_refused(client: TestClient) -> None:
    # The seed is written for AWS: it runs there or on the local cloud, not on GCP.
    resp = _up(client, cloud="gcp")
    assert resp.status_code == 422  # type: ignore[attr-defined]
    assert "written for aws" in resp.text  # type: ignore[attr-defined]
    azure = SEED.read_text().replace("type: aws", "type: azure")
    resp = client.post(
        "/v1/clusters", json={"cluster_yaml": azure, "file_name": "az.yaml"}, headers=AUTH
    )
    assert resp.status_code == 422 and "no provider for 'azure'" in resp.text
    # A name the API could not address again (a slash) is refused before anything launches.
    resp = _up(client, name="team/exp1")
    assert resp.status_code == 422  # type: ignore[attr-defined]
    assert "cluster name" in resp.text  # type: ignore[attr-defined]
    assert client.get("/v1/clusters").json()["clusters"] == []


def test_the_shipped_example_runs_as_written_without_cloud(redis_url: str, tmp_path: Path) -> None:
    # Issue #22: examples/clusters/local-lab.yaml without --cloud was stored with no cloud, so
    # no node type resolved and 12 x {CPU: 2} was "unsatisfiable". The file's provider is
    # the cloud now, and the same demand launches cpu workers.
    from corral.services.runtime import autoscaling
    from corral.services.runtime.deps import Deps

    example = REPO / "examples" / "clusters" / "local-lab.yaml"
    settings = Settings(redis_url=redis_url, api_token=TOKEN, home=tmp_path)  # packaged cloud
    body = {"cluster_yaml": example.read_text(), "file_name": "local-lab.yaml"}
    with TestClient(create_app(settings), headers=AUTH) as client:
        resp = client.post("/v1/clusters", json=body)
        assert resp.status_code == 201, resp.text
        assert resp.json()["cloud"] == "local"
        demand = {"demand_yaml": "bundles: [{resources: {CPU: 2}, count: 12}]\n"}
        assert client.put("/v1/clusters/local-lab/demand", json=demand).status_code == 200
    deps = Deps(settings)
    rec = autoscaling.clusters(deps).get("local-lab")
    assert rec is not None and rec.cloud == "local"
    _new, launched, _ = autoscaling.decide_once(deps, rec)
    kinds = Counter((n.kind, n.node_type) for n in launched)
    assert kinds[("head", "head")] == 1 and kinds[("worker", "cpu")] >= 2, kinds
    assert not any("unsatisfiable" in r for r in _new.last_decision["reasons"])  # type: ignore[index]


def test_file_mounts_are_checked_by_the_api(client: TestClient) -> None:
    import base64
    import hashlib

    raw = b"not really a tarball, but bytes"
    good = {
        "archive_b64": base64.b64encode(raw).decode(),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "targets": ["/tmp/x"],
        "size_bytes": len(raw),
    }
    wrong_sum = {**good, "sha256": "0" * 64}
    resp = _up(client, mounts=wrong_sum)
    assert resp.status_code == 422 and "sha256" in resp.text  # type: ignore[attr-defined]
    too_big = {**good, "size_bytes": 2 * 1024 * 1024}
    assert _up(client, mounts=too_big).status_code == 422  # type: ignore[attr-defined]
    resp = _up(client, mounts=good)
    assert resp.status_code == 201, resp.text  # type: ignore[attr-defined]


def test_cache_stopped_nodes_on_a_cloud_that_cannot_stop_is_noticed(client: TestClient) -> None:
    """An AWS file that sets cache_stopped_nodes, played on the local cloud (which cannot stop
    a machine): `cluster up` says its workers are terminated instead; without the field, or
    on AWS itself (tests/integration/test_cluster_stopped_nodes.py), nothing is said."""
    text = SEED.read_text().replace(
        "    region: us-west-2\n", "    region: us-west-2\n    cache_stopped_nodes: true\n"
    )
    body = {"cluster_yaml": text, "file_name": "seed.yaml", "cloud": "local"}
    resp = client.post("/v1/clusters", json=body, headers=AUTH)
    assert resp.status_code == 201, resp.text
    assert [w for w in resp.json()["warnings"] if "cache_stopped_nodes" in w] == [
        "provider.cache_stopped_nodes: accepted; the local cloud cannot stop a machine: Corral "
        "terminates the workers it scales down and launches new ones to scale up"
    ]
    plain = _up(client, name="plain")
    assert not [w for w in plain.json()["warnings"] if "cache_stopped" in w]  # type: ignore[attr-defined]
