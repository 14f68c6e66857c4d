"""`corral catalog update` against local endpoints that play the clouds' APIs: moto's server for
EC2 (describe_instance_types, describe_instance_type_offerings, describe_spot_price_history),
a local Pricing API (moto has none: tests/fakes/aws_pricing.py), the Compute API fake's
machineTypes / acceleratorTypes lists (tests/fakes/gcp_compute.py) and a Cloud Billing catalog
fake (tests/fakes/gcp_billing.py). The console script runs in a process of its own, its
settings from the environment; then show-gpus and plan read what it wrote."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.aws_faults import FaultyMoto
from fakes.aws_pricing import FakePricing, product
from fakes.gcp_billing import FakeBilling, sku
from fakes.gcp_compute import FakeCompute

pytestmark = pytest.mark.integration

CORRAL = str(Path(sys.executable).parent / "corral")
REGIONS = ("us-east-1", "ap-south-1")

# The Pricing API's answers (USD per hour), and one entry a Linux filter must not bring back.
PRODUCTS = [
    product("g6e.xlarge", "us-east-1", "1.8610000000"),
    product("g6e.xlarge", "ap-south-1", "2.0940000000"),
    product("m5.large", "us-east-1", "0.0960000000"),
    product("m5.large", "ap-south-1", "0.1010000000"),
    product("p4d.24xlarge", "us-east-1", "21.9576000000"),
    product("m5.large", "us-east-1", "0.1880000000", operatingSystem="Windows"),
]


def _n1(name: str, cpus: int, memory_mb: int) -> dict[str, object]:
    return {"name": name, "guestCpus": cpus, "memoryMb": memory_mb}


MACHINE_TYPES = {
    "us-central1-a": [
        _n1("n1-standard-2", 2, 7680),
        _n1("n1-standard-8", 8, 30720),
        {
            "name": "g2-standard-4",
            "guestCpus": 4,
            "memoryMb": 16384,
            "accelerators": [{"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}],
        },
        _n1("m1-ultramem-40", 40, 961 * 1024),  # a family the catalog leaves out
    ],
    "europe-west1-b": [_n1("n1-standard-2", 2, 7680), _n1("n1-standard-8", 8, 30720)],
}
ACCELERATOR_TYPES = {
    "us-central1-a": [
        {"name": "nvidia-tesla-t4", "maximumCardsPerInstance": 4},
        {"name": "nvidia-l4", "maximumCardsPerInstance": 8},
    ],
    "europe-west1-b": [{"name": "nvidia-tesla-t4", "maximumCardsPerInstance": 4}],
}
SKUS = [
    sku("N1 Predefined Instance Core running in Americas", ["us-central1"], 0.031611),
    sku("N1 Predefined Instance Ram running in Americas", ["us-central1"], 0.004237, "GiBy.h"),
    sku(
        "Spot Preemptible N1 Predefined Instance Core running in Americas", ["us-central1"], 0.00698
    ),
    sku(
        "Spot Preemptible N1 Predefined Instance Ram running in Americas",
        ["us-central1"],
        0.000936,
        "GiBy.h",
    ),
    sku("N1 Predefined Instance Core running in EMEA", ["europe-west1"], 0.034806),
    sku("N1 Predefined Instance Ram running in EMEA", ["europe-west1"], 0.004664, "GiBy.h"),
    sku("G2 Instance Core running in Americas", ["us-central1"], 0.024988),
    sku("G2 Instance Ram running in Americas", ["us-central1"], 0.002928, "GiBy.h"),
    sku("Nvidia L4 GPU running in Americas", ["us-central1"], 0.56),
    sku("Nvidia Tesla T4 GPU running in Americas", ["us-central1"], 0.35),
    sku("Spot Preemptible Nvidia Tesla T4 GPU running in Americas", ["us-central1"], 0.14),
    sku("Nvidia Tesla T4 GPU running in EMEA", ["europe-west1"], 0.41),
    sku("Commitment v1: N1 Cpu in Americas for 1 Year", ["us-central1"], 0.019915),
]


@pytest.fixture(scope="module")
def endpoints() -> Iterator[dict[str, str]]:
    with (
        FaultyMoto() as moto,
        FakePricing(PRODUCTS) as pricing,
        FakeCompute(
            project="catalog-project",
            zone_machine_types=MACHINE_TYPES,
            zone_accelerator_types=ACCELERATOR_TYPES,
        ) as compute,
        FakeBilling(SKUS) as billing,
    ):
        yield {
            "CORRAL_AWS_ENDPOINT_URL": moto.url,
            "CORRAL_AWS_PRICING_ENDPOINT_URL": pricing.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "not-a-real-secret-value",
            "AWS_DEFAULT_REGION": "us-east-1",
            "CORRAL_GCP_API_ENDPOINT": compute.url,
            "CORRAL_GCP_PROJECT": "catalog-project",
            "CORRAL_GCP_ANONYMOUS": "true",
            "CORRAL_GCP_BILLING_ENDPOINT": billing.url,
        }


def _corral(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "AWS_", "GOOGLE_"))}
    base.update(
        {
            "HOME": str(home),
            "CORRAL_HOME": str(home / ".corral"),
            "CORRAL_CLOUDS": '["aws", "gcp"]',
            "KUBECONFIG": "",
        }
    )
    base.update(env)
    return subprocess.run([CORRAL, *args], capture_output=True, text=True, env=base, timeout=300)


def _region_args() -> list[str]:
    return [
        arg for region in (*REGIONS, "us-central1", "europe-west1") for arg in ("--region", region)
    ]


def test_update_rebuilds_both_clouds_from_their_apis(
    endpoints: dict[str, str], tmp_path: Path
) -> None:
    done = _corral(tmp_path, "catalog", "update", *_region_args(), **endpoints)
    assert done.returncode == 0, done.stderr
    # Progress per region and cloud, on stderr; a summary per cloud on stdout.
    assert "aws us-east-1:" in done.stderr and "aws ap-south-1:" in done.stderr
    assert "gcp: 6 machine types and 3 accelerator types in 2 zones" in done.stderr
    assert "aws: " in done.stdout and "gcp: " in done.stdout
    assert "not-a-real-secret-value" not in done.stdout + done.stderr

    folder = tmp_path / ".corral" / "catalog"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("aws.csv", "gcp.csv", "snapshot.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name

    # show-gpus reads the rebuilt list: L40S in both regions moto offers g6e.xlarge in.
    shown = _corral(tmp_path, "show-gpus", "L40S", "--json", **endpoints)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    [g6e] = [o for o in data["offerings"] if o["instance_type"] == "g6e.xlarge"]
    assert (g6e["price_usd_per_hour"], g6e["region"]) == (1.861, "us-east-1")
    assert g6e["spot_price_usd_per_hour"] == 0.00001  # what moto's spot price history says
    # The regions not read keep their shipped rows (g6e.48xlarge in eu-north-1, ...).
    assert "g6e.48xlarge" in {o["instance_type"] for o in data["offerings"]}
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert data["snapshots"]["aws"] == {
        "date": today,
        "source": "aws apis (corral catalog update)",
        "user": True,
    }
    assert data["snapshots"]["gcp"]["date"] == today

    rows = (folder / "aws.csv").read_text().splitlines()
    zones = sorted(
        r.split(",")[-1]
        for r in rows
        if r.startswith("g6e.xlarge,") and r.split(",")[-2] in REGIONS
    )
    assert zones == ["ap-south-1a", "ap-south-1b", *(f"us-east-1{z}" for z in "abcd")]
    assert not any(r.startswith("p4d.24xlarge,") and "ap-south-1" in r for r in rows)  # unpriced
    assert any(r.startswith("m5.large,,,2,8,0.101,") for r in rows)  # not Windows' 0.188

    gcp_rows = (folder / "gcp.csv").read_text().splitlines()
    assert not any(r.startswith("m1-ultramem-40,") for r in gcp_rows)
    # n1-standard-2 in europe-west1: 2 vCPUs and 7.5 GiB at EMEA's prices, no spot SKU there.
    assert "n1-standard-2,,,2,7.5,0.104592,,europe-west1,europe-west1-b" in gcp_rows
    # N1 with an attached T4: the host plus the GPU; its spot price from both spot SKUs.
    assert "n1-standard-8,T4,1,8,30,0.729998,0.22392,us-central1,us-central1-a" in gcp_rows
    assert "g2-standard-4,L4,1,4,16,0.7068,,us-central1,us-central1-a" in gcp_rows

    # plan (and so launch) plans on it: n1-standard-2 in europe-west1, unknown to the shipped list.
    task = tmp_path / "task.yaml"
    task.write_text(
        "resources:\n  infra: gcp/europe-west1\n  instance_type: n1-standard-2\nrun: 'true'\n"
    )
    planned = _corral(tmp_path, "plan", str(task), "--json", **endpoints)
    assert planned.returncode == 0, planned.stderr
    [first, *_] = json.loads(planned.stdout)["candidates"]
    assert (first["zone"], round(first["cost_usd_per_hour"], 4)) == ("europe-west1-b", 0.1046)


def test_an_update_of_some_regions_keeps_the_others(
    endpoints: dict[str, str], tmp_path: Path
) -> None:
    first = _corral(
        tmp_path, "catalog", "update", "--cloud", "aws", *_region_args()[:4], **endpoints
    )
    assert first.returncode == 0, first.stderr
    again = _corral(
        tmp_path, "catalog", "update", "--cloud", "aws", "--region", "ap-south-1", **endpoints
    )
    assert again.returncode == 0, again.stderr
    assert "aws us-east-1:" not in again.stderr
    rows = (tmp_path / ".corral" / "catalog" / "aws.csv").read_text()
    assert "us-east-1a" in rows and "ap-south-1a" in rows
    # gcp was not asked: its shipped list stays in use, with its own date.
    shown = json.loads(_corral(tmp_path, "show-gpus", "--json", **endpoints).stdout)
    assert shown["snapshots"]["gcp"]["user"] is False and shown["snapshots"]["aws"]["user"]
    reset = _corral(tmp_path, "catalog", "reset", **endpoints)
    assert reset.returncode == 0 and "removed 2 files" in reset.stdout
    shown = json.loads(_corral(tmp_path, "show-gpus", "--json", **endpoints).stdout)
    assert shown["snapshots"]["aws"]["user"] is False


def test_without_credentials_it_says_so_and_keeps_the_shipped_catalog(tmp_path: Path) -> None:
    done = _corral(tmp_path, "catalog", "update")
    assert done.returncode == 1
    assert "no credentials found for aws" in done.stderr and "Traceback" not in done.stderr
    named = _corral(tmp_path, "catalog", "update", "--cloud", "aws", "--cloud", "gcp")
    assert named.returncode == 1, named.stderr
    assert "error: aws: no credentials found" in named.stderr
    assert "error: gcp: no credentials found" in named.stderr
    assert not (tmp_path / ".corral" / "catalog" / "aws.csv").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud", "azure"], "--cloud: expected one of aws, gcp, got 'azure'"),
        (["--cloud", "aws", "--region", "US East"], "--region: expected a region name"),
    ],
)
def test_bad_input_is_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = _corral(tmp_path, "catalog", "update", *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
