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
import io
from collections.abc import Iterable, Mapping
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


class CatalogError(ValueError):
    """A catalog file is malformed (a packaging bug, not a user's mistake)."""


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


def parse_offerings(text: str, cloud: str, name: str = "<catalog>") -> list[Offering]:
    """Read one cloud's CSV text (header row first) into offerings, in file order."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise CatalogError(f"{name}: missing columns {', '.join(missing)}")
    # Line numbers: the header is line 1, so the first row is line 2.
    return [_offering_from_row(cloud, row, f"{name}:{n}") for n, row in enumerate(reader, start=2)]


def _index(offerings: tuple[Offering, ...], key: Any) -> dict[Any, tuple[int, ...]]:
    """Offering indices grouped by ``key(offering)``, each group in catalog order."""
    groups: dict[Any, list[int]] = {}
    for i, o in enumerate(offerings):
        groups.setdefault(key(o), []).append(i)
    return {k: tuple(v) for k, v in groups.items()}


class Catalog:
    """Offerings in catalog order, with the indexes the planner and ``show-gpus`` read.

    Indexes hold offering indices (positions in :attr:`offerings`), each list in catalog order.
    A catalog never changes after it is built; :meth:`with_offerings` returns a new one.
    """

    def __init__(self, offerings: Iterable[Offering]) -> None:
        self.offerings: tuple[Offering, ...] = tuple(offerings)
        offs = self.offerings
        self.clouds: tuple[str, ...] = tuple(dict.fromkeys(o.cloud for o in offs))
        self.by_group: dict[GroupKey, tuple[int, ...]] = _index(
            offs, lambda o: (o.cloud, o.accelerator, o.accelerator_count)
        )
        self.by_accelerator: dict[str, tuple[int, ...]] = {
            k: v for k, v in _index(offs, lambda o: o.accelerator).items() if k is not None
        }
        self.by_instance_type: dict[tuple[str, str], tuple[int, ...]] = _index(
            offs, lambda o: (o.cloud, o.instance_type.lower())
        )
        self.by_region: dict[tuple[str, str], tuple[int, ...]] = _index(
            offs, lambda o: (o.cloud, o.region)
        )
        self.by_zone: dict[tuple[str, str], tuple[int, ...]] = _index(
            offs, lambda o: (o.cloud, o.zone)
        )
        # Per-catalog memo for derived, immutable views (see catalog.ordering).
        self.memo: dict[Any, Any] = {}

    def __len__(self) -> int:
        return len(self.offerings)

    def __repr__(self) -> str:
        return f"Catalog({len(self.offerings)} offerings, clouds={list(self.clouds)})"

    def with_offerings(self, extra: Iterable[Offering]) -> Catalog:
        """A new catalog: these offerings followed by ``extra`` (e.g. the local cloud's), in
        the order given."""
        return Catalog((*self.offerings, *extra))

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


def read_shipped(cloud: str) -> list[Offering]:
    """The offerings of one shipped cloud file, ``data/<cloud>.csv``."""
    path = DATA_DIR / f"{cloud}.csv"
    return parse_offerings(path.read_text(encoding="utf-8"), cloud, str(path))


@cache
def load_catalog() -> Catalog:
    """The shipped catalog (aws, then gcp), read and indexed once per process."""
    offerings: list[Offering] = []
    for cloud in CATALOG_CLOUDS:  # one data/<cloud>.csv each, loaded in this order
        offerings.extend(read_shipped(cloud))
    return Catalog(offerings)
