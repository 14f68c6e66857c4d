"""The catalog: every offering Corral knows, read once from the shipped CSV files and indexed.

An offering is one instance type in one zone (see :mod:`corral.shared.catalog.offering`). The
CSV files under ``data/`` hold one row per zone, one file per cloud (``data/README.md`` says
where the prices come from). The local cloud's offerings are added at run time with
:meth:`Catalog.with_offerings`.

Order matters: an offering's position in the catalog (its *index*) breaks price ties, so a
plan is the same every time. Shipped files come first (aws, then gcp, each in file order),
extra offerings after them in the order given.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from corral.shared.catalog.offering import Offering
from corral.shared.clouds import CATALOG_CLOUDS

DATA_DIR = Path(__file__).resolve().parent / "data"
COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
)

# The key of a group of offerings that are interchangeable for an accelerator request:
# (cloud, accelerator name or None for CPU-only types, accelerator count).
GroupKey = tuple[str, str | None, int]


SNAPSHOT_FILE = "snapshot.json"  # beside the CSV files: each cloud's snapshot date and source


class CatalogError(ValueError):
    """A catalog file is malformed (a packaging bug, not a user's mistake)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """When one cloud's prices and offerings were read, and from where."""

    date: str  # ISO date, e.g. 2025-11-20
    source: str  # e.g. "skypilot-catalog v9", "aws apis (corral catalog update)"
    user: bool = False  # True: a catalog `corral catalog update` wrote, not the shipped one

    def to_dict(self) -> dict[str, Any]:
        return {"date": self.date, "source": self.source, "user": self.user}


def _number(row: Mapping[str, str], column: str, where: str) -> float:
    text = (row.get(column) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}: {column}: expected a number, got {text!r}") from None
    if value < 0:
        raise CatalogError(f"{where}: {column}: expected a number >= 0, got {text!r}")
    return value


def _offering_from_row(cloud: str, row: Mapping[str, str], where: str) -> Offering:
    accelerator = (row.get("AcceleratorName") or "").strip().upper() or None
    count = int(_number(row, "AcceleratorCount", where)) if accelerator else 0
    spot_text = (row.get("SpotPrice") or "").strip()
    region = (row.get("Region") or "").strip()
    zone = (row.get("AvailabilityZone") or "").strip()
    instance_type = (row.get("InstanceType") or "").strip()
    if not (region and zone and instance_type):
        raise CatalogError(f"{where}: InstanceType, Region and AvailabilityZone are required")
    if accelerator and count < 1:
        raise CatalogError(f"{where}: AcceleratorCount: expected >= 1 for {accelerator}")
    return Offering(
        cloud=cloud,
        instance_type=instance_type,
        accelerator=accelerator,
        accelerator_count=count,
        vcpus=_number(row, "vCPUs", where),
        memory_gib=_number(row, "MemoryGiB", where),
        price_usd_per_hour=_number(row, "Price", where),
        spot_price_usd_per_hour=_number(row, "SpotPrice", where) if spot_text else None,
        region=region,
        zone=zone,
    )


def _fast_row(cloud: str, cells: list[str], at: tuple[int, ...]) -> Offering | None:
    """One well-formed row read without the per-field checks of :func:`_offering_from_row`
    (the same result), or None when a cell needs them (blank, padded, negative, odd count)."""
    itype, acc, count, vcpus, mem, price, spot, region, zone = (cells[i] for i in at)
    if not (itype and region and zone) or " " in itype + region + zone:
        return None
    try:
        numbers = (float(vcpus), float(mem), float(price))
        spot_value = float(spot) if spot else None
        n = int(float(count)) if acc else 0
    except ValueError:
        return None
    if min(numbers) < 0 or (spot_value is not None and spot_value < 0) or (acc and n < 1):
        return None
    accelerator = acc.upper() if acc else None
    if accelerator is not None and accelerator != accelerator.strip():
        return None
    return Offering(
        cloud, itype, accelerator, n, numbers[0], numbers[1], numbers[2], spot_value, region, zone
    )


def parse_offerings(text: str, cloud: str, name: str = "<catalog>") -> list[Offering]:
    """Read one cloud's CSV text (header row first) into offerings, in file order."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{name}: missing columns {', '.join(missing)}")
    at = tuple(header.index(c) for c in COLUMNS)
    width = len(header)
    out: list[Offering] = []
    # Line numbers: the header is line 1, so the first row is line 2.
    for n, cells in enumerate(reader, start=2):
        fast = _fast_row(cloud, cells, at) if len(cells) == width else None
        if fast is None:  # the checked path names the line and field of anything wrong
            row = dict(zip(header, cells, strict=False))
            fast = _offering_from_row(cloud, row, f"{name}:{n}")
        out.append(fast)
    return out


def _frozen(groups: Mapping[Any, list[int]]) -> dict[Any, tuple[int, ...]]:
    return {k: tuple(v) for k, v in groups.items()}


class Catalog:
    """Offerings in catalog order, with the indexes the planner and ``show-gpus`` read.

    Indexes hold offering indices (positions in :attr:`offerings`), each list in catalog order.
    A catalog never changes after it is built; :meth:`with_offerings` returns a new one.
    """

    def __init__(
        self, offerings: Iterable[Offering], snapshots: Mapping[str, Snapshot] | None = None
    ) -> None:
        self.offerings: tuple[Offering, ...] = tuple(offerings)
        # Per cloud: when its rows were read (clouds without a price list have none).
        self.snapshots: dict[str, Snapshot] = dict(snapshots or {})
        offs = self.offerings
        self.clouds: tuple[str, ...] = tuple(dict.fromkeys(o.cloud for o in offs))
        # One pass builds every index (each group in catalog order).
        group: dict[GroupKey, list[int]] = {}
        accel: dict[str, list[int]] = {}
        itype: dict[tuple[str, str], list[int]] = {}
        region: dict[tuple[str, str], list[int]] = {}
        zone: dict[tuple[str, str], list[int]] = {}
        for i, o in enumerate(offs):
            group.setdefault((o.cloud, o.accelerator, o.accelerator_count), []).append(i)
            if o.accelerator is not None:
                accel.setdefault(o.accelerator, []).append(i)
            itype.setdefault((o.cloud, o.instance_type.lower()), []).append(i)
            region.setdefault((o.cloud, o.region), []).append(i)
            zone.setdefault((o.cloud, o.zone), []).append(i)
        self.by_group: dict[GroupKey, tuple[int, ...]] = _frozen(group)
        self.by_accelerator: dict[str, tuple[int, ...]] = _frozen(accel)
        self.by_instance_type: dict[tuple[str, str], tuple[int, ...]] = _frozen(itype)
        self.by_region: dict[tuple[str, str], tuple[int, ...]] = _frozen(region)
        self.by_zone: dict[tuple[str, str], tuple[int, ...]] = _frozen(zone)
        # Per-catalog memo for derived, immutable views (see catalog.ordering).
        self.memo: dict[Any, Any] = {}

    def __len__(self) -> int:
        return len(self.offerings)

    def __repr__(self) -> str:
        return f"Catalog({len(self.offerings)} offerings, clouds={list(self.clouds)})"

    def with_offerings(self, extra: Iterable[Offering]) -> Catalog:
        """A new catalog: these offerings followed by ``extra`` (e.g. the local cloud's), in
        the order given."""
        return Catalog((*self.offerings, *extra), self.snapshots)

    def regions(self, cloud: str) -> tuple[str, ...]:
        """The cloud's regions, in catalog order."""
        return tuple(dict.fromkeys(r for c, r in self.by_region if c == cloud))

    def zones(self, cloud: str, region: str) -> tuple[str, ...]:
        """The region's zones, in catalog order."""
        offs = self.offerings
        return tuple(dict.fromkeys(offs[i].zone for i in self.by_region.get((cloud, region), ())))

    def accelerators(self) -> tuple[str, ...]:
        """Every accelerator name in the catalog, sorted."""
        return tuple(sorted(self.by_accelerator))

    def instance_type(self, cloud: str, name: str) -> tuple[Offering, ...]:
        """Every offering of one instance type (case-insensitive name), in catalog order."""
        return tuple(
            self.offerings[i] for i in self.by_instance_type.get((cloud, name.lower()), ())
        )


def read_snapshots(folder: Path) -> dict[str, Snapshot]:
    """The ``snapshot.json`` of a catalog folder: ``{cloud: Snapshot}`` ({} when absent)."""
    path = folder / SNAPSHOT_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {
            cloud: Snapshot(str(v["date"]), str(v.get("source", "")), bool(v.get("user", False)))
            for cloud, v in data.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CatalogError(f"{path}: expected {{cloud: {{date, source}}}}: {exc}") from None


def catalog_file(folder: Path, cloud: str) -> Path | None:
    """``<cloud>.csv`` or ``<cloud>.csv.gz`` in ``folder``, whichever exists."""
    for name in (f"{cloud}.csv", f"{cloud}.csv.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def read_file(path: Path, cloud: str) -> list[Offering]:
    """The offerings of one catalog file (plain or gzip-compressed CSV)."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return parse_offerings(raw.decode("utf-8"), cloud, str(path))


def read_shipped(cloud: str) -> list[Offering]:
    """The offerings of one shipped cloud file, ``data/<cloud>.csv[.gz]``."""
    path = catalog_file(DATA_DIR, cloud)
    if path is None:
        raise CatalogError(f"{DATA_DIR}: no {cloud}.csv")
    return read_file(path, cloud)


@cache
def load_catalog(user_dir: Path | None = None) -> Catalog:
    """The catalog (aws, then gcp), read and indexed once per process and folder.

    ``user_dir`` is a folder ``corral catalog update`` wrote (``<CORRAL_HOME>/catalog``): a
    cloud's file there replaces the shipped one, with its own snapshot date.
    """
    shipped = read_snapshots(DATA_DIR)
    users = read_snapshots(user_dir) if user_dir is not None else {}
    offerings: list[Offering] = []
    snapshots: dict[str, Snapshot] = {}
    for cloud in CATALOG_CLOUDS:  # one data/<cloud>.csv each, loaded in this order
        mine = catalog_file(user_dir, cloud) if user_dir is not None else None
        if mine is not None:
            offerings.extend(read_file(mine, cloud))
            found = users.get(cloud)
            snapshots[cloud] = Snapshot(
                found.date if found else "unknown", found.source if found else "", True
            )
        else:
            offerings.extend(read_shipped(cloud))
            if cloud in shipped:
                snapshots[cloud] = shipped[cloud]
    return Catalog(offerings, snapshots)
