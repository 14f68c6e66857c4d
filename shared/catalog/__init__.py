"""Instance types per cloud with prices, regions and zones, loaded once and indexed."""

from corral.shared.catalog.catalog import (
    COLUMNS,
    DATA_DIR,
    Catalog,
    CatalogError,
    Snapshot,
    load_catalog,
    parse_offerings,
)
from corral.shared.catalog.offering import Offering

__all__ = [
    "COLUMNS",
    "DATA_DIR",
    "Catalog",
    "CatalogError",
    "Offering",
    "Snapshot",
    "load_catalog",
    "parse_offerings",
]
