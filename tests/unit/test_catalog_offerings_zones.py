"""The catalog-backed providers' zones for a type, best first (services/providers/base.py
CatalogOfferings.zones_of): the pooled walk tries them in this order, so a machine pool's
m5.large goes to us-east-1 (0.096/h), not to af-south-1 (0.127/h), the catalog's first row."""

from __future__ import annotations

from corral.services.providers.base import CatalogOfferings
from corral.services.settings import installed_catalog


class _Aws(CatalogOfferings):
    name = "aws"


class _Gcp(CatalogOfferings):
    name = "gcp"


def test_zones_are_cheapest_first_and_keep_the_catalogs_order_among_equals() -> None:
    for provider, itype in ((_Aws(), "m5.large"), (_Gcp(), "n1-standard-2")):
        prices = {
            (o.zone, o.region): o.price_usd_per_hour
            for o in installed_catalog().instance_type(provider.name, itype)
        }
        zones = provider.zones_of(itype, None)
        assert sorted(zones) == sorted(prices)
        walked = [prices[z] for z in zones]
        assert walked == sorted(walked), itype
        assert min(prices.values()) < max(prices.values())  # the order is not trivially flat
    first = _Aws().zones_of("m5.large", None)[0]
    assert first[1] == "us-east-1"
