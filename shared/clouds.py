"""The one list of clouds: every cloud name a task may write (SkyPilot's cloud names, plus
Corral's own ``local``), each with what Corral has for it. Everything else derives from it:

``KNOWN_CLOUDS``: the names a task may write, in this order (validation's message names them).
``SHIPPED_CLOUDS``: the clouds Corral ships a provider for, one package each
(``services/providers/<cloud>/``, whose ``build.CLOUD`` the provider registry takes), in the
order Corral lists them (``corral check``, the ``--cloud`` choices, the workers' queues).
The registry (``corral.services.providers.registry.CLOUDS``) is built from it, with the clouds
registered at run time (``register_cloud``, a cloud outside the tree: ``tests/fakes``) after;
``tests/unit/test_cloud_lists.py`` holds the two together.
``PROVIDER_CLOUDS``: the clouds the core plans when it is given no clouds (the planner's
default).
``SIMULATED_CLOUDS``: the clouds a simulation scenario may name, each with how the simulator
plays it: ``machines`` (zones with capacity per instance type and market, billed by the hour)
or ``pods`` (a Kubernetes cluster: contexts, namespaces, nodes; :mod:`corral.shared.sim.pods`).
``CATALOG_CLOUDS``: the clouds that ship a price list, read from the files themselves
(``catalog/data/<cloud>.csv`` or ``.csv.gz``, in name order): a catalog is a file, not a line here.
Other names (azure, lambda, ...) are read in users' files and planned only where a provider
was registered for them (the planner is handed the clouds that can launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Known:
    """What Corral has for a cloud name a task may write."""

    # Corral ships its provider (services/providers/<cloud>/): its place where Corral lists
    # its clouds, 1 first; 0: none ships (a provider may still be registered at run time).
    listed: int = 0
    planned: bool = False  # planned when a task names no cloud
    # How the simulator plays it (``machines`` or ``pods``); None: a scenario cannot name it.
    played: str | None = None


NAMED = Known()  # a name a task may write; Corral ships no provider for it

CLOUDS: dict[str, Known] = {
    "aws": Known(listed=2, planned=True, played="machines"),
    "gcp": Known(listed=3, planned=True, played="machines"),
    "azure": NAMED,
    "local": Known(listed=1, planned=True, played="machines"),
    # Its offerings are its nodes, listed live; planned where CORRAL_CLOUDS names it.
    "kubernetes": Known(listed=4, played="pods"),
    "lambda": NAMED,
    "ibm": NAMED,
    "oci": NAMED,
    "scp": NAMED,
    "runpod": NAMED,
    "vast": NAMED,
    "vsphere": NAMED,
    "cudo": NAMED,
    "fluidstack": NAMED,
    "paperspace": NAMED,
    "do": NAMED,
    "nebius": NAMED,
    "hyperbolic": NAMED,
    "seeweb": NAMED,
    "shadeform": NAMED,
    "primeintellect": NAMED,
    "slurm": NAMED,
    "ssh": NAMED,
}

KNOWN_CLOUDS: tuple[str, ...] = tuple(CLOUDS)
SHIPPED_CLOUDS: tuple[str, ...] = tuple(
    sorted((name for name, known in CLOUDS.items() if known.listed), key=lambda n: CLOUDS[n].listed)
)
PROVIDER_CLOUDS: tuple[str, ...] = tuple(name for name, known in CLOUDS.items() if known.planned)
SIMULATED_CLOUDS: dict[str, str] = {
    name: known.played for name, known in CLOUDS.items() if known.played is not None
}
CATALOG_CLOUDS: tuple[str, ...] = tuple(
    sorted(
        {
            p.name.split(".")[0]
            for pattern in ("*.csv", "*.csv.gz")
            for p in (Path(__file__).resolve().parent / "catalog" / "data").glob(pattern)
        }
    )
)
