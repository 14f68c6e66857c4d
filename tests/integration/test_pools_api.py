"""`corral pools apply|list|delete` and `corral why` end to end: the real console script
against a real API process over a real redis-server, with the seed's machine pool file played
on the local cloud (tests/fixtures/pools/seed-pool-local.yaml on
tests/fixtures/localcloud/pools.yaml)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.services.client import Client

from harness import CORRAL, System

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
POOL = FIXTURES / "pools" / "seed-pool-local.yaml"
LOCAL = FIXTURES / "localcloud" / "pools.yaml"
TYPES = ["reserved-a100", "spot-a100", "ondemand-a100"]


@pytest.fixture(scope="module")
def shared(make_module_system: Callable[..., System]) -> System:
    """One API for the module: its start is seconds of CPU, and no test here stops it."""
    system = make_module_system(LOCAL)
    system.start_api()
    return system


@pytest.fixture
def system(shared: System) -> Iterator[System]:
    """The module's API as a fresh one: the pools a test registered are deleted after it (no
    test here launches on them, so none has a machine)."""
    yield shared
    with Client(shared.api_url, shared.token) as client:
        for pool in client.pools():
            client.delete_pool(pool.name)


def _pools(system: System) -> list[dict[str, Any]]:
    """The registered pools, of the API (`pools list --json` itself is checked once)."""
    resp = system.get("/v1/pools")
    assert resp.status_code == 200, resp.text
    found: list[dict[str, Any]] = resp.json()["pools"]
    return found


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_apply_list_replace_and_delete(system: Any, tmp_path: Path) -> None:
    done = system.cli("pools", "apply", str(POOL), "--name", "demo-machine-pool")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "registered machine pool demo-machine-pool (3 machine types, cloud local)\n"
    )

    [pool] = _json(system.cli("pools", "list", "--json"))["pools"]
    assert (pool["name"], pool["kind"], pool["cloud"]) == (
        "demo-machine-pool",
        "machine_pool",
        "local",
    )
    assert pool["file"] == "seed-pool-local.yaml"
    assert [t["machine_type"] for t in pool["machine_types"]] == TYPES
    assert [t["market"] for t in pool["machine_types"]] == ["reserved", "spot", "on_demand"]
    for machine_type in pool["machine_types"]:
        assert machine_type["partitions"] == [{"name": "any", "size": 2, "held": 0}]
    assert pool["machines"] == [] and pool["workloads"] == []

    table = system.cli("pools", "list")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "CLOUD", "MACHINES", "WORKLOADS"]
    assert lines[1].split() == ["demo-machine-pool", "machine_pool", "local", "0", "0"]
    assert [line.split() for line in lines[2:]] == [
        ["reserved-a100/any", "0/2", "reserved"],
        ["spot-a100/any", "0/2", "spot"],
        ["ondemand-a100/any", "0/2", "on_demand"],
    ]

    # Applying again under the same name replaces the file: new sizes, still one pool.
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(POOL.read_text().replace("size: 2", "size: 3"))
    again = _json(
        system.cli("pools", "apply", str(bigger), "--name", "demo-machine-pool", "--json")
    )
    assert again["replaced"] is True and again["file"] == "bigger.yaml"
    [pool] = _pools(system)
    assert {p["size"] for t in pool["machine_types"] for p in t["partitions"]} == {3}

    # The file's stem is the default name.
    stem = _json(system.cli("pools", "apply", str(POOL), "--json"))
    assert stem["name"] == "seed-pool-local" and stem["replaced"] is False
    assert sorted(p["name"] for p in _pools(system)) == ["demo-machine-pool", "seed-pool-local"]

    gone = system.cli("pools", "delete", "demo-machine-pool")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout == "deleted pool demo-machine-pool (0 machines terminated)\n"
    assert [p["name"] for p in _pools(system)] == ["seed-pool-local"]


def test_unknown_names_are_exit_2_with_a_clear_message(system: Any) -> None:
    # Each command once (both at once: a `corral` process is most of a second of start-up).
    cases = {
        ("pools", "delete", "nope"): "no pool 'nope' is registered",
        ("why", "r-nope"): "no launch request with id 'r-nope'",
    }
    with ThreadPoolExecutor(len(cases)) as pool:
        runs = {args: pool.submit(system.cli, *args) for args in cases}
    for args, message in cases.items():
        done = runs[args].result()
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert message in done.stderr, (args, done.stderr)


def test_writes_without_the_token_are_401(system: Any) -> None:
    body = {"name": "p", "kind": "machine_pool", "spec": {"kind": "ANYSCALE_MANAGED"}}
    resp = httpx.post(f"{system.api_url}/v1/pools", json=body, timeout=30)
    assert resp.status_code == 401
    assert httpx.delete(f"{system.api_url}/v1/pools/p", timeout=30).status_code == 401
    env = {**system.env, "CORRAL_API_URL": system.api_url, "CORRAL_API_TOKEN": "wrong"}
    done = subprocess.run(
        [CORRAL, "pools", "apply", str(POOL)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "unauthorized" in done.stderr
    assert _pools(system) == []


def test_why_a_plain_request_says_where_it_is_on_its_chain(system: Any) -> None:
    request_id = system.submit(
        {"name": "plain", "resources": {"cloud": "local", "instance_type": "cpu-2"}, "run": "true"}
    )
    with ThreadPoolExecutor(2) as pool:  # both at once: neither changes anything
        as_json = pool.submit(system.cli, "why", request_id, "--json")
        as_line = pool.submit(system.cli, "why", request_id)
    found = _json(as_json.result())
    assert (found["id"], found["pool"]) == (request_id, None)
    assert found["code"] in {"planning", "provisioning", "running", "succeeded"}, found
    assert isinstance(found["tried"], list) and isinstance(found["blocked"], list)
    line = as_line.result()
    assert line.returncode == 0, line.stderr
    assert line.stdout.startswith(f"{request_id} ")


GCP_SEED = FIXTURES / "seeds" / "anyscale-machine-pool-gcp.yaml"  # a2-highgpu-8g, as written
GCP_SHORT = FIXTURES / "localcloud" / "pools-gcp-short.yaml"  # plays a2-highgpu-8g too


@pytest.mark.parametrize(
    ("clouds", "cloud", "said"),
    [
        # GCP turned on: its pool goes there (issue #45: it was registered "cloud local",
        # unasked, because a2-highgpu-8g is also a local alias); GCP has no credentials here,
        # and apply says so.
        (["local", "gcp"], "gcp", "warning: GCP (gcp) has no credentials here"),
        # GCP not turned on: the local cloud plays it, and apply says why.
        (["local"], "local", "written for gcp (its advanced_instance_config"),
    ],
)
def test_the_seed_gcp_pool_goes_to_the_cloud_its_templates_are_written_for(
    make_system: Callable[..., System], clouds: list[str], cloud: str, said: str
) -> None:
    system = make_system(
        GCP_SHORT,
        env={
            "CORRAL_CLOUDS": json.dumps(clouds),
            "GOOGLE_APPLICATION_CREDENTIALS": str(FIXTURES / "no-such-credentials.json"),
            "NO_GCE_CHECK": "True",
        },
    )
    system.start_api()
    done = system.cli("pools", "apply", str(GCP_SEED), "--name", "seed-gcp", "--json")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["cloud"] == cloud
    assert said in done.stderr, done.stderr
    assert any(said.removeprefix("warning: ") in w for w in view["warnings"]), view
