"""The clouds Corral ships, as data: every other list of shipped clouds is derived from these.

A cloud in ``PROVIDER_CLOUDS`` has a provider package (``corral.services.providers.<cloud>``,
registered in ``corral.services.providers.registry``) and a provisioning queue of its own;
a cloud in ``CATALOG_CLOUDS`` ships a price list (``catalog/data/<cloud>.csv``). Other cloud
names (azure, lambda, ...) are read in users' files and planned only where a provider was
registered for them (the planner is handed the clouds that can launch, offerings included).
"""

from __future__ import annotations

PROVIDER_CLOUDS: tuple[str, ...] = ("aws", "gcp", "local")
CATALOG_CLOUDS: tuple[str, ...] = ("aws", "gcp")  # loaded in this order
