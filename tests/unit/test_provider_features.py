"""Each shipped provider declares what it can do beyond the port (``Features``) instead of being
probed with ``getattr``: the flags as the clouds have them, and the methods a flag names
present wherever it is set."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from corral.services.providers.base import Features, can_stop, node_work_of

# The methods each feature promises.
METHODS = {
    "stop": ("stop", "start"),
    "bounded_launch": ("launch",),
    "describe_launches": ("describe_launches",),
    "agents_through_api": (),
    "subnet_zones": ("subnet_zone",),
    "shared_network": (),  # a fact of the cloud: a service's replicas each get their own port
}


def _aws(nodes: Any = None) -> Any:
    from corral.services.providers.aws.provider import AwsProvider

    return AwsProvider(nodes=nodes)


def _gcp(nodes: Any = None) -> Any:
    from corral.services.providers.gcp.provider import GcpProvider

    return GcpProvider("proj", nodes=nodes)


def _kubernetes(nodes: Any = None) -> Any:
    from corral.services.providers.kubernetes.provider import KubernetesProvider

    return KubernetesProvider(nodes=nodes)


def _local_class() -> Any:
    from corral.services.providers.local.provider import LocalProvider

    return LocalProvider  # its features are the class's (building it forks nothing, but
    # needs a Redis and a cloud file; the declaration is what is checked here)


def test_every_feature_has_its_methods_listed() -> None:
    assert set(METHODS) == set(Features.__dataclass_fields__)


@pytest.mark.parametrize(
    ("build", "stop"),
    [(_aws, True), (_gcp, True), (_kubernetes, False)],
    ids=["aws", "gcp", "kubernetes"],
)
def test_the_cloud_providers_declare_stop_and_their_agents(build: Any, stop: bool) -> None:
    blind = build()
    assert isinstance(blind.features, Features)
    assert can_stop(blind) is stop
    assert not blind.features.bounded_launch and not blind.features.describe_launches
    assert not blind.features.agents_through_api and node_work_of(blind) is None
    assert blind.features.subnet_zones is (build is _aws)  # EC2's subnets live in one zone
    assert not blind.features.shared_network  # each machine its own network
    agents = SimpleNamespace(book=None)  # what the registry hands in: NodeAgents
    booted = build(agents)
    assert booted.features.agents_through_api and node_work_of(booted) is agents


def test_the_local_cloud_declares_its_bounded_launch_narrow_describe_and_shared_network() -> None:
    local = _local_class()
    assert local.features == Features(
        bounded_launch=True, describe_launches=True, shared_network=True
    )


@pytest.mark.parametrize(
    "build", [_aws, _gcp, _kubernetes, _local_class], ids=["aws", "gcp", "kubernetes", "local"]
)
def test_a_declared_feature_has_its_methods(build: Any) -> None:
    provider = build()
    for flag, methods in METHODS.items():
        if getattr(provider.features, flag):
            for method in methods:
                assert callable(getattr(provider, method, None)), (flag, method)
