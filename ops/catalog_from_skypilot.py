"""Write Corral's shipped catalog (shared/catalog/data/) from SkyPilot's public catalogs.

    python ops/catalog_from_skypilot.py --aws aws/vms.csv --gcp gcp/vms.csv --date 2025-11-20 \\
        --source "skypilot-catalog v9" [--aws-zone-ids ids.json] [--out shared/catalog/data]

Either file may be given alone; the other cloud's file is left as it is. ``--gcp-gpu-prices``
(JSON ``{"A100": {"us-central1": 2.933908}}``, USD per GPU-hour) puts a second published
source's on-demand GPU prices in place of the file's for those accelerators (and leaves out
their rows in regions it does not price); ``--leave-out H100-MEGA,B200`` drops accelerators
whose prices could not be confirmed. SkyPilot's AWS file
names zones by AZ id: ``--aws-zone-ids`` maps them to names (JSON ``{"use1-az2":
"us-east-1c"}``); without it, the table of moto's EC2 model is used when moto is installed (one
real account's mapping; another account's names differ, which `corral catalog update` reads
from the account itself). A file over ``--gzip-over`` bytes is written gzip-compressed.
Bad input: one line naming the file and line, exit 2.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from corral.shared.catalog.catalog import DATA_DIR, SNAPSHOT_FILE, catalog_file, read_file
from corral.shared.catalog.families import family
from corral.shared.catalog.offering import Offering
from corral.shared.catalog.rebuild import to_csv
from corral.shared.catalog.skypilot import from_skypilot_aws, from_skypilot_gcp


def moto_zone_ids() -> dict[str, str]:
    """AZ id -> zone name, from moto's EC2 model (empty when moto is not installed)."""
    try:
        from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
    except ImportError:
        return {}
    return {
        zone.zone_id: zone.name for zones in RegionsAndZonesBackend.zones.values() for zone in zones
    }


def with_others(out: Path, cloud: str, rows: list[Offering]) -> list[Offering]:
    """The current file's rows of the (type, GPUs, region) the new ``rows`` do not cover, in
    their order, then ``rows`` (an N1 host's rows with GPUs stay when only its bare rows
    come)."""
    current = catalog_file(out, cloud)

    def key(o: Offering) -> tuple[str, str | None, int, str]:
        return (o.instance_type, o.accelerator, o.accelerator_count, o.region)

    covered = {key(o) for o in rows}
    kept = [
        o
        for o in (read_file(current, cloud) if current is not None else [])
        if key(o) not in covered
    ]
    return [*kept, *rows]


def write(out: Path, cloud: str, text: str, gzip_over: int) -> Path:
    for stale in (out / f"{cloud}.csv", out / f"{cloud}.csv.gz"):
        stale.unlink(missing_ok=True)
    data = text.encode()
    if len(data) > gzip_over:
        path = out / f"{cloud}.csv.gz"
        path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    else:
        path = out / f"{cloud}.csv"
        path.write_bytes(data)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--aws", type=Path, help="SkyPilot's aws/vms.csv")
    parser.add_argument("--gcp", type=Path, help="SkyPilot's gcp/vms.csv")
    parser.add_argument("--aws-zone-ids", type=Path, help="JSON {az id: zone name}")
    parser.add_argument(
        "--gcp-gpu-prices", type=Path, help="JSON {accelerator: {region: USD per GPU-hour}}"
    )
    parser.add_argument(
        "--leave-out", default="", help="accelerators to leave out, comma-separated (GCP)"
    )
    parser.add_argument(
        "--cpu-families",
        default="",
        help="keep only these CPU-only families, comma-separated (e2,n1,n2); GPU types are "
        "always kept; default: every common family (corral.shared.catalog.families)",
    )
    parser.add_argument("--date", required=True, help="the snapshot's date, YYYY-MM-DD")
    parser.add_argument("--source", required=True, help="where the files came from")
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    parser.add_argument("--gzip-over", type=int, default=1_000_000)
    parser.add_argument(
        "--keep-others",
        action="store_true",
        help="keep the current rows of every (type, GPUs, region) the file does not list "
        "(new rows follow them): a partial file adds to the catalog instead of replacing it",
    )
    args = parser.parse_args(argv)
    if not (args.aws or args.gcp):
        parser.error("give --aws, --gcp or both")
    try:
        snapshots_path = args.out / SNAPSHOT_FILE
        snapshots = json.loads(snapshots_path.read_text()) if snapshots_path.is_file() else {}
        for cloud, given in (("aws", args.aws), ("gcp", args.gcp)):
            if given is None:
                continue
            text = given.read_text(encoding="utf-8")
            if cloud == "aws":
                ids = (
                    json.loads(args.aws_zone_ids.read_text())
                    if args.aws_zone_ids
                    else moto_zone_ids()
                )
                rebuilt = from_skypilot_aws(text, ids, str(given))
            else:
                listed = (
                    json.loads(args.gcp_gpu_prices.read_text()) if args.gcp_gpu_prices else None
                )
                dropped = [a.strip().upper() for a in args.leave_out.split(",") if a.strip()]
                rebuilt = from_skypilot_gcp(text, str(given), listed, dropped)
            rows = rebuilt.offerings
            wanted = {f.strip().lower() for f in args.cpu_families.split(",") if f.strip()}
            if wanted:
                rows = [
                    o for o in rows if o.accelerator or family(cloud, o.instance_type) in wanted
                ]
                rebuilt.offerings = rows
            if args.keep_others:
                rows = with_others(args.out, cloud, rows)
            path = write(args.out, cloud, to_csv(rows), args.gzip_over)
            read_file(path, cloud)  # what was written reads back as a catalog
            snapshots[cloud] = {"date": args.date, "source": args.source}
            print(f"{rebuilt.summary(cloud)} -> {path}")
        snapshots_path.write_text(json.dumps(snapshots, indent=2, sort_keys=True) + "\n")
    except (OSError, ValueError) as exc:  # SkypilotFormatError and CatalogError are ValueErrors
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
