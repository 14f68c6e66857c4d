"""The failover scenarios on AWS (boto3 against moto's server, faults injected by a proxy) and
on Google Cloud (google-cloud-compute against a local Compute API), through real workers:
a sold-out first region, the memory of it, a regional quota, a pinned region, throttling."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from corral.shared.catalog import load_catalog
from corral.shared.config.task import Task
from corral.shared.planner import plan

from fakes.aws_faults import FaultyMoto
from fakes.gcp_api import Fault as GcpFault
from fakes.gcp_compute import FakeCompute
from harness import System

pytestmark = pytest.mark.integration

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def chain(cloud: str, instance_type: str) -> list[tuple[str, str]]:
    task = Task.model_validate({"resources": {"cloud": cloud, "instance_type": instance_type}})
    return [(c.region, c.zone) for c in plan(task, load_catalog(), clouds=(cloud,)).candidates]


def regions(cloud: str, instance_type: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for region, zone in chain(cloud, instance_type):
        if not out or out[-1][0] != region:
            out.append((region, []))
        out[-1][1].append(zone)
    return out


def trail(req: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["zone"], a["outcome"]) for a in req["attempts"]]


def start(system: System) -> System:
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    return system


def launch(
    system: System, cloud: str, itype: str, *, fail_fast: bool = False, **resources: Any
) -> dict[str, Any]:
    task: dict[str, Any] = {
        "name": "t",
        "resources": {"cloud": cloud, "instance_type": itype, **resources},
    }
    if fail_fast:  # an exhausted chain fails at once instead of waiting for capacity
        task["retry_until_up"] = False
    return system.wait_state(system.submit(task), {"RUNNING", "FAILED"}, 120)


# ---------------------------------------------------------------------------------------- AWS


@pytest.fixture
def moto() -> Iterator[FaultyMoto]:
    with FaultyMoto() as proxy:
        yield proxy


def test_aws_failover_scenarios(make_system: Callable[..., System], moto: FaultyMoto) -> None:
    env = {
        **AWS_ENV,
        "CORRAL_CLOUDS": json.dumps(["aws"]),
        "CORRAL_AWS_ENDPOINT_URL": moto.url,
        "CORRAL_AWS_DEFAULT_IMAGE_ID": "ami-12c6146b",
    }
    system = start(make_system(env=env, BLOCKED_TTL_S="300"))

    # Throttling is retried in the same zone.
    (_first_region, first_zones), *_ = regions("aws", "m5.large")
    moto.add_fault("RequestLimitExceeded", zone=first_zones[0], instance_type="m5.large", count=2)
    req = launch(system, "aws", "m5.large")
    assert req["state"] == "RUNNING"
    z = first_zones[0]
    assert trail(req) == [(z, "throttled"), (z, "throttled"), (z, "ok")]

    # A sold-out first region: every zone there fails, the next region runs it, in chain order.
    (r1, r1_zones), (_r2, r2_zones), *_ = regions("aws", "p3.8xlarge")
    moto.add_fault("InsufficientInstanceCapacity", region=r1, instance_type="p3.8xlarge")
    req = launch(system, "aws", "p3.8xlarge")
    assert req["state"] == "RUNNING"
    assert trail(req) == [(z, "capacity") for z in r1_zones] + [(r2_zones[0], "ok")]
    assert req["instances"][0]["zone"] == r2_zones[0]
    # Within the TTL the next request never sends a launch to the sold-out zones.
    sent_before = len(moto.requests())
    req = launch(system, "aws", "p3.8xlarge")
    assert trail(req) == [(z, "blocked") for z in r1_zones] + [(r2_zones[0], "ok")]
    assert [r.zone for r in moto.requests()[sent_before:]] == [r2_zones[0]]

    # A pinned region never leaves it.
    (g_r1, g_zones), *_ = regions("aws", "g5.xlarge")
    moto.add_fault("InsufficientInstanceCapacity", region=g_r1, instance_type="g5.xlarge")
    req = launch(system, "aws", "g5.xlarge", region=g_r1, fail_fast=True)
    assert req["state"] == "FAILED"
    assert {a["region"] for a in req["attempts"]} == {g_r1}
    assert [a["zone"] for a in req["attempts"]] == g_zones

    # A regional quota error skips the rest of that region.
    (_q_r1, q_zones), (_q_r2, q_r2_zones), *_ = regions("aws", "m5.large")
    moto.clear_faults()
    moto.add_fault("VcpuLimitExceeded", zone=q_zones[0], instance_type="m5.large")
    req = launch(system, "aws", "m5.large")
    assert req["state"] == "RUNNING"
    assert trail(req)[0] == (q_zones[0], "quota")
    assert {o for _, o in trail(req)[1:-1]} <= {"blocked"}
    assert trail(req)[-1] == (q_r2_zones[0], "ok")
    # Every launch carried the attempt's idempotency token and Corral's tags.
    for sent in moto.requests():
        assert sent.params["ClientToken"].startswith("corral-")
        assert sent.tags().get("corral-request")


# --------------------------------------------------------------------------------------- GCP


def test_gcp_failover_scenarios(make_system: Callable[..., System]) -> None:
    with FakeCompute(project="corral-test") as fake:
        env = {
            "CORRAL_CLOUDS": json.dumps(["gcp"]),
            "CORRAL_GCP_API_ENDPOINT": fake.url,
            "CORRAL_GCP_PROJECT": "corral-test",
            "CORRAL_GCP_ANONYMOUS": "true",
            "NO_GCE_CHECK": "true",
        }
        system = start(make_system(env=env, BLOCKED_TTL_S="300"))

        (r1, r1_zones), (_r2, r2_zones), *_ = regions("gcp", "a2-highgpu-8g")
        for zone in r1_zones:
            fake.add_fault(GcpFault("stockout", zone=zone, machine_type="a2-highgpu-8g"))
        req = launch(system, "gcp", "a2-highgpu-8g")
        assert req["state"] == "RUNNING"
        assert trail(req) == [(z, "capacity") for z in r1_zones] + [(r2_zones[0], "ok")]
        req = launch(system, "gcp", "a2-highgpu-8g")
        assert trail(req) == [(z, "blocked") for z in r1_zones] + [(r2_zones[0], "ok")]

        req = launch(system, "gcp", "a2-highgpu-8g", region=r1, fail_fast=True)
        assert req["state"] == "FAILED"
        assert {a["region"] for a in req["attempts"]} == {r1}

        (_n_r1, n_zones), (_n_r2, n_r2_zones), *_ = regions("gcp", "n2-standard-8")
        fake.add_fault(
            GcpFault("rate_limit", zone=n_zones[0], machine_type="n2-standard-8", count=2)
        )
        req = launch(system, "gcp", "n2-standard-8")
        assert trail(req) == [(n_zones[0], "throttled")] * 2 + [(n_zones[0], "ok")]

        # Issue #46: a quota blocks its own metric in the region. The fake's A100 quota (a
        # misfit for an N2 machine) blocks no N2; the N2 vCPU quota blocks the region's N2s.
        fake.add_fault(GcpFault("quota_region_n2", zone=n_zones[1], machine_type="n2-standard-8"))
        req = launch(system, "gcp", "n2-standard-8", zone=n_zones[1], fail_fast=True)
        assert trail(req) == [(n_zones[1], "quota")]
        req = launch(system, "gcp", "n2-standard-8")
        # The region is remembered as over its N2 quota: only the next region is tried.
        assert trail(req)[-1] == (n_r2_zones[0], "ok")
        assert {o for _, o in trail(req)[:-1]} == {"blocked"}
