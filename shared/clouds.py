"""The clouds Corral launches on, as data: every other list of clouds is derived from these.

A cloud in ``PROVIDER_CLOUDS`` has a provider package (``corral.services.providers.<cloud>``,
registered in ``corral.services.providers.registry``) and a provisioning queue of its own;
a cloud in ``CATALOG_CLOUDS`` ships a price list (``catalog/data/<cloud>.csv``). Other cloud
names (azure, lambda, ...) are read in users' files and never planned.
"""

from __future__ import annotations

PROVIDER_CLOUDS: tuple[str, ...] = ("aws", "gcp", "local")
CATALOG_CLOUDS: tuple[str, ...] = ("aws", "gcp")  # loaded in this order
