"""Every list of clouds derives from one (issue #48, "a cloud is one package"):
shared/clouds.py's ``CLOUDS``, every cloud name a task may write and what Corral has for each.
The provider registry takes the shipped clouds' entries from their packages in its order; the
workers' queues, the CLI's ``--cloud`` choices, the names a task may write and the core's
default clouds derive from it, the shipped catalogs from the files themselves."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from corral.services.providers import registry
from corral.services.queues.task_names import PROVISION_QUEUE, provision_queue, role_queues
from corral.shared.catalog import DATA_DIR, load_catalog
from corral.shared.clouds import (
    CATALOG_CLOUDS,
    CLOUDS,
    KNOWN_CLOUDS,
    PROVIDER_CLOUDS,
    SHIPPED_CLOUDS,
)
from corral.shared.config.task import Resources

REPO = Path(__file__).resolve().parents[2]
PROVIDERS = REPO / "services" / "providers"


def test_every_registered_shipped_cloud_is_a_package_of_its_own() -> None:
    for cloud in registry.registered_clouds():
        assert (PROVIDERS / cloud / "provider.py").is_file(), cloud
    packages = {p.parent.name for p in PROVIDERS.glob("*/provider.py")}
    assert packages == set(registry.registered_clouds())


def test_the_cores_own_list_names_registered_clouds() -> None:
    assert set(PROVIDER_CLOUDS) <= set(registry.registered_clouds())
    assert set(CATALOG_CLOUDS) <= set(PROVIDER_CLOUDS)


def test_the_catalog_clouds_are_the_shipped_price_lists() -> None:
    assert CATALOG_CLOUDS == ("aws", "gcp")  # as declared by hand before, in that order
    assert set(load_catalog().clouds) == set(CATALOG_CLOUDS)
    assert all((DATA_DIR / f"{cloud}.csv").is_file() for cloud in CATALOG_CLOUDS)


def test_every_registered_cloud_has_its_provisioning_queue_kubernetes_too() -> None:
    provision = role_queues(registry.registered_clouds())["provision"]
    assert provision == (
        "provision.aws",
        "provision.gcp",
        "provision.kubernetes",
        "provision.local",
        PROVISION_QUEUE,
    )
    assert provision_queue("kubernetes") == "provision.kubernetes"
    assert provision_queue(None) == PROVISION_QUEUE


def test_a_cloud_registered_later_gets_its_queue_from_the_same_list() -> None:
    registry.register_cloud("moon", registry.Cloud(registry.CLOUDS["local"].build))
    try:
        assert "provision.moon" in role_queues(registry.registered_clouds())["provision"]
    finally:
        registry.CLOUDS.pop("moon")


def test_only_the_one_list_spells_out_clouds() -> None:
    """structure_counts' ``cloud_lists``: shared/clouds.py's ``CLOUDS`` alone (3 before: the
    registry's, the core's declaration, the names a task may write); the registry, the names a
    task may write and the core's default clouds derive from it."""
    spec = importlib.util.spec_from_file_location(
        "structure_counts", REPO / "ops" / "structure_counts.py"
    )
    assert spec is not None and spec.loader is not None
    counts = importlib.util.module_from_spec(spec)
    sys.modules["structure_counts"] = counts
    spec.loader.exec_module(counts)
    assert counts.count(REPO)["cloud_lists"]["where"] == ["shared/clouds.py:CLOUDS"]


def test_each_shipped_clouds_builder_lives_in_its_package() -> None:
    for cloud in ("aws", "gcp", "kubernetes", "local"):
        build = registry.CLOUDS[cloud].build
        assert build.__module__ == f"corral.services.providers.{cloud}.build", cloud
        assert (PROVIDERS / cloud / "build.py").is_file()


def test_the_registry_is_the_one_lists_shipped_clouds_each_from_its_package() -> None:
    """The registry derives from shared/clouds.py: the clouds Corral ships, in its order (the
    order ``corral check`` and the ``--cloud`` choices list them), each entry its package's
    ``build.CLOUD``; clouds registered at run time come after."""
    assert registry.registered_clouds()[: len(SHIPPED_CLOUDS)] == SHIPPED_CLOUDS
    assert SHIPPED_CLOUDS == ("local", "aws", "gcp", "kubernetes")  # the order listed before
    for cloud in SHIPPED_CLOUDS:
        package = importlib.import_module(f"corral.services.providers.{cloud}.build")
        assert registry.CLOUDS[cloud] is package.CLOUD, cloud
    assert {p.parent.name for p in PROVIDERS.glob("*/provider.py")} == set(SHIPPED_CLOUDS)


def test_a_task_may_name_every_cloud_of_the_list_and_no_other() -> None:
    assert tuple(CLOUDS) == KNOWN_CLOUDS
    assert set(SHIPPED_CLOUDS) | set(PROVIDER_CLOUDS) <= set(KNOWN_CLOUDS)
    assert PROVIDER_CLOUDS == ("aws", "gcp", "local")  # as declared by hand before
    for cloud in KNOWN_CLOUDS:
        assert Resources.model_validate({"cloud": cloud.upper()}).cloud == cloud
