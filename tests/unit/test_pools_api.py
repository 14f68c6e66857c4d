"""The pool routes of the HTTP API, in process over a real redis-server: the file checked
again, its cloud chosen, errors as statuses."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOCAL = FIXTURES / "localcloud" / "pools.yaml"
POOL: dict[str, Any] = yaml.safe_load((FIXTURES / "pools" / "seed-pool-local.yaml").read_text())
AWS_POOL: dict[str, Any] = yaml.safe_load(
    (FIXTURES / "seeds" / "anyscale-machine-pool-aws.yaml").read_text()
)
TOKEN = "pool-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NO_AUTH = {"Authorization": ""}  # overrides a client's default header: no token sent


@pytest.fixture
def client(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(redis_url=redis_url, api_token=TOKEN, home=tmp_path, local_cloud_file=LOCAL)
    with TestClient(create_app(settings), headers=AUTH) as c:
        yield c


def _apply(client: TestClient, spec: dict[str, Any], **extra: Any) -> Any:
    body = {"name": "p", "kind": "machine_pool", "file_name": "p.yaml", "spec": spec, **extra}
    return client.post("/v1/pools", json=body, headers=AUTH)


def test_local_types_play_on_the_local_cloud(client: TestClient) -> None:
    resp = _apply(client, POOL)
    assert resp.status_code == 201, resp.text
    view = resp.json()
    assert (view["cloud"], view["replaced"], view["file"]) == ("local", False, "p.yaml")
    assert [t["machine_type"] for t in view["machine_types"]] == [
        "reserved-a100",
        "spot-a100",
        "ondemand-a100",
    ]
    assert _apply(client, POOL).json()["replaced"] is True


def test_a_type_only_a_catalog_sells_goes_to_that_cloud(client: TestClient) -> None:
    resp = _apply(client, AWS_POOL)
    assert resp.status_code == 201, resp.text
    assert resp.json()["cloud"] == "aws"


def test_a_type_no_cloud_sells_is_422_naming_the_field(client: TestClient) -> None:
    spec = copy.deepcopy(POOL)
    spec["machine_types"][1]["launch_templates"][0]["instance_type"] = "warp-9"
    resp = _apply(client, spec)
    assert resp.status_code == 422
    [issue] = resp.json()["detail"]["issues"]
    assert issue["field"] == "machine_types[1].launch_templates[0].instance_type"
    assert "no cloud sells 'warp-9'" in issue["message"]
    assert client.get("/v1/pools/p").status_code == 404


def test_a_cloud_asked_for_must_sell_the_types(client: TestClient) -> None:
    resp = _apply(client, AWS_POOL, cloud="local")
    assert resp.status_code == 422
    issues = resp.json()["detail"]["issues"]
    assert len(issues) == 3
    assert "'p4de.24xlarge' is not an instance type of the local cloud file" in issues[0]["message"]
    assert "expected one of local, aws, gcp" in _apply(client, POOL, cloud="azure").text


def test_an_invalid_spec_is_422_naming_the_field_and_what_was_expected(
    client: TestClient,
) -> None:
    spec = copy.deepcopy(POOL)
    spec["machine_types"][0]["partitions"][0]["size"] = "two"
    spec["kind"] = "SELF_MANAGED"
    resp = _apply(client, spec)
    assert resp.status_code == 422
    detail = resp.json()["detail"]
    assert detail["error"] == "invalid machine pool"
    by_field = {i["field"]: i["message"] for i in detail["issues"]}
    assert "expected one of ANYSCALE_MANAGED, CUSTOMER_MANAGED" in by_field["kind"]
    assert "integer" in by_field["machine_types[0].partitions[0].size"]
    assert "kind 'pool': expected one of" in _apply(client, POOL, kind="pool").text
    assert "pool name '../x'" in _apply(client, POOL, name="../x").text


def test_a_master_config_takes_its_providers_cloud(client: TestClient) -> None:
    master = {
        "resource_manager": {
            "default_aux_resource_pool": "a",
            "default_compute_resource_pool": "b",
        },
        "resource_pools": [
            {"pool_name": "a", "provider": {"type": "aws", "instance_type": "m5.large"}},
            {"pool_name": "b", "provider": {"type": "local", "instance_type": "cpu-2"}},
        ],
    }
    resp = _apply(client, master, kind="master_config", name="det")
    assert resp.status_code == 201, resp.text
    assert (resp.json()["cloud"], resp.json()["resource_pools"]) == ("local", ["a", "b"])
    # The name is a master config's now: a machine pool may not replace it.
    assert _apply(client, POOL, name="det").status_code == 409
    wrong = copy.deepcopy(master)
    wrong["resource_manager"]["default_compute_resource_pool"] = "gpu"
    resp = _apply(client, wrong, kind="master_config", name="det")
    assert resp.status_code == 422
    assert (
        resp.json()["detail"]["issues"][0]["field"]
        == "resource_manager.default_compute_resource_pool"
    )


def test_list_show_delete_and_why(client: TestClient) -> None:
    assert _apply(client, POOL).status_code == 201
    [view] = client.get("/v1/pools").json()["pools"]
    assert view["machine_types"][0]["partitions"] == [{"name": "any", "size": 2, "held": 0}]
    assert client.delete("/v1/pools/p", headers=NO_AUTH).status_code == 401
    gone = client.delete("/v1/pools/p", headers=AUTH)
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    missing = client.delete("/v1/pools/p", headers=AUTH)
    assert missing.status_code == 404 and "no pool 'p' is registered" in missing.text
    assert client.get("/v1/requests/r-nope/why").status_code == 404
