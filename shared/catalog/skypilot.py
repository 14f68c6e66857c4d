"""Read SkyPilot's public catalogs (its ``aws/vms.csv`` and ``gcp/vms.csv``) into Corral's rows
(pure: text in, offerings out). ``ops/catalog_from_skypilot.py`` writes the shipped files with
it; prices and offerings are facts, so a public catalog may seed ours.

SkyPilot's AWS file has a row per (type, zone) like ours, with more columns, and names zones by
their AZ ID (``use1-az2``) where Corral launches by zone name (``us-east-1c``): the ids are
mapped with a table (which name an id has differs per account; ``corral catalog update`` reads
the account's own). Its GCP file prices a machine type's host alone and each GPU count in a
zone on a row of its own (no instance type): a2/a3/a4/g2 machines, which always carry their
GPUs, are priced host + GPUs, and N1 hosts are offered with the GPUs they can attach
(:data:`corral.shared.catalog.rebuild.N1_HOSTS`). TPUs are left out (Corral plans no TPU).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from corral.shared.catalog.families import keep_type
from corral.shared.catalog.offering import Offering
from corral.shared.catalog.rebuild import (
    N1_GPUS,
    N1_HOSTS,
    MachineType,
    Rebuilt,
    make_row,
    sort_rows,
)

AZ_ID = re.compile(r"^[a-z]{2,}[0-9]*-az[0-9]+$")  # use1-az2, apne1-az4
# A Local Zone's id (usw2-lax1-az1): a zone an account must opt in to, left out.
LOCAL_ZONE_ID = re.compile(r"^[a-z]{2,}[0-9]*-[a-z]+[0-9]+-az[0-9]+$")

# GCP machine types that always carry their GPUs: name pattern -> (accelerator, count or None:
# the count is the pattern's number).
GCP_BUILT_IN: tuple[tuple[re.Pattern[str], str, int | None], ...] = (
    (re.compile(r"a2-highgpu-(\d+)g"), "A100", None),
    (re.compile(r"a2-megagpu-(\d+)g"), "A100", None),
    (re.compile(r"a2-ultragpu-(\d+)g"), "A100-80GB", None),
    (re.compile(r"a3-highgpu-(\d+)g"), "H100", None),
    (re.compile(r"a3-edgegpu-(\d+)g"), "H100", None),
    (re.compile(r"a3-megagpu-(\d+)g"), "H100-MEGA", None),
    (re.compile(r"a3-ultragpu-(\d+)g"), "H200", None),
    (re.compile(r"a4-highgpu-(\d+)g"), "B200", None),
    (re.compile(r"g2-standard-(4|8|12|16|32)"), "L4", 1),
    (re.compile(r"g2-standard-24"), "L4", 2),
    (re.compile(r"g2-standard-48"), "L4", 4),
    (re.compile(r"g2-standard-96"), "L4", 8),
)


class SkypilotFormatError(ValueError):
    """A SkyPilot file that is not what this reader expects: FILE:LINE and the column."""


def gcp_built_in(instance_type: str) -> tuple[str, int] | None:
    """``a2-highgpu-4g`` -> ("A100", 4); ``g2-standard-24`` -> ("L4", 2); None for others."""
    for pattern, name, count in GCP_BUILT_IN:
        found = pattern.fullmatch(instance_type)
        if found:
            return name, count if count is not None else int(found.group(1))
    return None


@dataclass(frozen=True)
class _Line:
    where: str
    row: dict[str, str]

    def text(self, column: str) -> str:
        return (self.row.get(column) or "").strip()

    def number(self, column: str) -> float | None:
        value = self.text(column)
        if not value:
            return None
        try:
            return float(value)
        except ValueError:
            raise SkypilotFormatError(
                f"{self.where}: {column}: expected a number, got {value!r}"
            ) from None


def _lines(text: str, name: str, needed: tuple[str, ...]) -> list[_Line]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in needed if c not in (reader.fieldnames or ())]
    if missing:
        raise SkypilotFormatError(f"{name}: missing columns {', '.join(missing)}")
    return [_Line(f"{name}:{n}", row) for n, row in enumerate(reader, start=2)]


def _accelerator(name: str) -> str:
    return name.strip().upper().replace(" ", "-")


AWS_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
               "Price", "SpotPrice", "Region", "AvailabilityZone")  # fmt: skip


def from_skypilot_aws(
    text: str, zone_names: Mapping[str, str] | None = None, name: str = "aws/vms.csv"
) -> Rebuilt:
    """SkyPilot's AWS rows of GPU types and the common CPU families, zones by name."""
    out = Rebuilt()
    left: set[str] = set()
    for line in _lines(text, name, AWS_COLUMNS):
        itype = line.text("InstanceType")
        accelerator = _accelerator(line.text("AcceleratorName")) or None
        count = line.number("AcceleratorCount") or 0
        if accelerator and (count < 1 or count != int(count)):
            left.add(itype)  # a fraction of a GPU (g6f): not a machine a GPU request gets
            continue
        if not itype or not keep_type("aws", itype, accelerator):
            left.add(itype)
            continue
        price = line.number("Price")
        if price is None or price <= 0:
            out.left_out_unpriced += 1
            continue
        zone = line.text("AvailabilityZone")
        if LOCAL_ZONE_ID.match(zone):
            continue
        if AZ_ID.match(zone):
            if zone_names is None or zone not in zone_names:
                raise SkypilotFormatError(
                    f"{line.where}: AvailabilityZone: {zone!r} is an AZ id with no zone name "
                    "in the table given"
                )
            zone = zone_names[zone]
        spec = MachineType(
            itype, line.number("vCPUs") or 0, line.number("MemoryGiB") or 0, accelerator, int(count)
        )
        spot = line.number("SpotPrice")
        out.offerings.append(make_row("aws", spec, price, spot, line.text("Region"), zone))
    out.left_out_family = len(left)
    out.offerings = _dedupe(out.offerings)
    return out


def _dedupe(offerings: list[Offering]) -> list[Offering]:
    """One row per (type, accelerator, count, zone): SkyPilot's files repeat a few."""
    seen: dict[tuple[str, str | None, int, str], Offering] = {}
    for o in offerings:
        seen.setdefault((o.instance_type, o.accelerator, o.accelerator_count, o.zone), o)
    return sort_rows(seen.values())


GCP_COLUMNS = ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount",
               "Region", "AvailabilityZone", "Price", "SpotPrice")  # fmt: skip

_Priced = tuple[float, float | None]  # (on-demand, spot or None)


def _add(a: _Priced, b: _Priced) -> _Priced:
    spot = a[1] + b[1] if a[1] is not None and b[1] is not None else None
    return a[0] + b[0], spot


def from_skypilot_gcp(
    text: str,
    name: str = "gcp/vms.csv",
    gpu_list_prices: Mapping[str, Mapping[str, float]] | None = None,
    leave_out: Collection[str] = (),
) -> Rebuilt:
    """SkyPilot's GCP rows joined into Corral's: each kept machine type per zone (host plus
    its built-in GPUs), and N1 hosts with each attachable GPU count the zone prices.

    ``gpu_list_prices`` ({accelerator: {region: USD per GPU-hour}}) replaces the on-demand
    price of those accelerators' rows with the list price times the count (their spot price
    stays); a row of such an accelerator in a region the mapping does not price is left out.
    Accelerators in ``leave_out`` are left out altogether."""
    hosts: dict[tuple[str, str], tuple[MachineType, str, _Priced]] = {}  # (type, zone)
    gpus: dict[tuple[str, int, str], _Priced] = {}  # (accelerator, count, zone)
    listed = gpu_list_prices or {}
    out = Rebuilt()
    left: set[str] = set()
    for line in _lines(text, name, GCP_COLUMNS):
        itype, zone = line.text("InstanceType"), line.text("AvailabilityZone")
        price = line.number("Price")
        if price is None or price <= 0:
            out.left_out_unpriced += 1
            continue
        priced = (price, line.number("SpotPrice"))
        if not itype:
            accelerator = _accelerator(line.text("AcceleratorName"))
            count = line.number("AcceleratorCount") or 0
            if not accelerator or accelerator.startswith("TPU") or count < 1:
                continue
            if accelerator in leave_out:
                out.left_out_unpriced += 1
                continue
            if accelerator in listed:
                per_gpu = listed[accelerator].get(line.text("Region"))
                if per_gpu is None:
                    out.left_out_unpriced += 1
                    continue
                priced = (round(per_gpu * count, 6), priced[1])
            gpus.setdefault((accelerator, int(count), zone), priced)
            continue
        spec = MachineType(itype, line.number("vCPUs") or 0, line.number("MemoryGiB") or 0)
        hosts.setdefault((itype, zone), (spec, line.text("Region"), priced))
    rows = []
    for (itype, zone), (spec, region, priced) in hosts.items():
        built_in = gcp_built_in(itype)
        if built_in is not None:
            gpu = gpus.get((built_in[0], built_in[1], zone))
            if gpu is None:
                out.left_out_unpriced += 1
                continue
            with_gpus = MachineType(itype, spec.vcpus, spec.memory_gib, *built_in)
            total = _add(priced, gpu)
            rows.append(make_row("gcp", with_gpus, total[0], total[1], region, zone))
            continue
        if not keep_type("gcp", itype, None):
            left.add(itype)
            continue
        rows.append(make_row("gcp", spec, priced[0], priced[1], region, zone))
    for (accelerator, count, zone), gpu in gpus.items():
        if accelerator not in N1_GPUS:
            continue
        for host in N1_HOSTS.get(count, ()):
            found = hosts.get((host, zone))
            if found is not None:
                spec, region, priced = found
                attached = MachineType(host, spec.vcpus, spec.memory_gib, accelerator, count)
                total = _add(priced, gpu)
                rows.append(make_row("gcp", attached, total[0], total[1], region, zone))
    out.offerings = _dedupe(rows)
    out.left_out_family = len(left)
    return out
