"""``corral catalog update``: rebuild each cloud's price list from its own APIs and write it
under <home>/catalog, where it overrides the shipped one (corral.services.settings
.installed_catalog). Each cloud's SDK work is its package's (``<cloud>/catalog_fetch.py``);
what the rows are is decided in corral.shared.catalog.rebuild.

A cloud that fails (no credentials, refused) leaves its previous file as it was; the files
are written whole (a temporary file renamed over the old one), readable by their owner only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from corral.services.settings import Settings
from corral.shared.catalog.catalog import (
    SNAPSHOT_FILE,
    catalog_file,
    read_file,
    read_shipped,
)
from corral.shared.catalog.offering import Offering
from corral.shared.catalog.rebuild import (
    CatalogFetchError,
    Rebuilt,
    aws_rows,
    gcp_rows,
    merge_regions,
    to_csv,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CloudResult:
    cloud: str
    ok: bool
    message: str  # the summary, or the one-line cause of a failure
    rows: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"cloud": self.cloud, "ok": self.ok, "message": self.message, "rows": self.rows}


def _rebuild(
    cloud: str, settings: Settings, regions: list[str] | None, progress: Progress
) -> tuple[Rebuilt, list[str]]:
    if cloud == "aws":
        import boto3

        from corral.services.providers.aws import catalog_fetch as aws_fetch

        facts, read = aws_fetch.fetch(
            boto3.session.Session(),
            regions=regions,
            endpoint_url=settings.aws_endpoint_url,
            pricing_endpoint_url=settings.aws_pricing_endpoint_url,
            progress=progress,
        )
        return aws_rows(facts), read
    from corral.services.providers.gcp import catalog_fetch as gcp_fetch

    gfacts, read = gcp_fetch.fetch(
        project=settings.gcp_project,
        regions=regions,
        api_endpoint=settings.gcp_api_endpoint,
        billing_endpoint=settings.gcp_billing_endpoint,
        anonymous=settings.gcp_anonymous,
        progress=progress,
    )
    return gcp_rows(gfacts), read


def _previous(folder: Path, cloud: str) -> list[Offering]:
    mine = catalog_file(folder, cloud)
    return read_file(mine, cloud) if mine is not None else read_shipped(cloud)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _write(folder: Path, cloud: str, rows: list[Offering], date: str) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    _write_private(folder / f"{cloud}.csv", to_csv(rows))
    stale = folder / f"{cloud}.csv.gz"
    if stale.exists():
        stale.unlink()
    snap_path = folder / SNAPSHOT_FILE
    snapshots = json.loads(snap_path.read_text(encoding="utf-8")) if snap_path.is_file() else {}
    snapshots[cloud] = {
        "date": date,
        "source": f"{cloud} apis (corral catalog update)",
        "user": True,
    }
    _write_private(snap_path, json.dumps(snapshots, indent=2, sort_keys=True) + "\n")


def update(
    settings: Settings,
    clouds: Iterable[str],
    regions: list[str] | None,
    today: str,
    progress: Progress,
) -> list[CloudResult]:
    """Rebuild each cloud's list (of the ``regions`` named, the others kept as they were;
    every region when None) and write it; one result per cloud."""
    results: list[CloudResult] = []
    folder = settings.catalog_dir
    for cloud in clouds:
        progress(f"{cloud}: reading offerings and prices ...")
        try:
            rebuilt, read = _rebuild(cloud, settings, regions, progress)
        except CatalogFetchError as exc:
            results.append(CloudResult(cloud, False, str(exc)))
            continue
        if not read:
            why = f"{cloud}: none of the regions named is one of its regions; left as it was"
            results.append(CloudResult(cloud, True, why))
            continue
        rows = rebuilt.offerings
        if regions is not None:
            rows = merge_regions(_previous(folder, cloud), rows, read)
        if not rebuilt.offerings:
            why = f"{cloud}: no priced offering found; the catalog is left as it was"
            results.append(CloudResult(cloud, False, why))
            continue
        _write(folder, cloud, rows, today)
        results.append(CloudResult(cloud, True, rebuilt.summary(cloud), len(rows)))
    return results
