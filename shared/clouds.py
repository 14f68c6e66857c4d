"""The clouds the pure core knows of itself. Everywhere above shared/, the list of clouds is the
provider registry's (``corral.services.providers.registry.CLOUDS``: one entry per cloud, with
its package, and the workers' queues, the CLI's choices, the API's clouds derived from it);
shared/ cannot import it, so it declares here the one list it needs, and
``tests/unit/test_cloud_lists.py`` holds it to the registry.

``PROVIDER_CLOUDS``: the clouds the core plans when it is given no clouds (the planner's
default) and the simulator plays. Each is a registered cloud.
``CATALOG_CLOUDS``: the clouds that ship a price list, read from the files themselves
(``catalog/data/<cloud>.csv`` or ``.csv.gz``, in name order): a catalog is a file, not a line here.
Other cloud names (azure, lambda, ...) are read in users' files and planned only where a
provider was registered for them (the planner is handed the clouds that can launch).
"""

from __future__ import annotations

from pathlib import Path

PROVIDER_CLOUDS: tuple[str, ...] = ("aws", "gcp", "local")
CATALOG_CLOUDS: tuple[str, ...] = tuple(
    sorted(
        {
            p.name.split(".")[0]
            for pattern in ("*.csv", "*.csv.gz")
            for p in (Path(__file__).resolve().parent / "catalog" / "data").glob(pattern)
        }
    )
)
