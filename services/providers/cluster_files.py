"""What a cloud does with a Ray cluster file, beyond launching each node type's node config.

A cloud's :class:`ClusterFiles` answer, for the cluster routes, the autoscaler and
``corral autoscale`` (none of which name a cloud):
- ``stand_in``: the instance types by which the cloud plays a file written for another cloud
  (None: it runs only files written for it);
- ``problems``: what in a file cannot run here (``(path, message)`` pairs, shown as issues);
- ``notes``: what ``cluster up`` warns of before any node starts;
- ``node_launch``: a node's launch resources and the machine config sent with it.

The plain rules (every cloud that sets none): no stand-in, no problems or notes, and a node
launched in the file's ``provider.region`` (and ``provider.availability_zone``: its zone, or its
zones in order) with its node config as written, as Ray's cluster launcher sends it to the
cloud's API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.services.settings import Settings
    from corral.shared.config.cluster import Cluster
    from corral.shared.config.localcloud import LocalCloud
    from corral.shared.configio import PathKey


class ClusterFiles:
    """The plain rules; a cloud's package subclasses what it does otherwise."""

    plays_others = False  # True: ``stand_in`` gives its instance types

    def stand_in(self, load_local: Callable[[], LocalCloud]) -> LocalCloud | None:
        return None

    def problems(self, settings: Settings, cluster: Cluster) -> list[tuple[PathKey, str]]:
        return []

    def notes(self, cluster: Cluster) -> list[str]:
        return []

    def node_launch(
        self,
        cluster: Cluster,
        node_config: dict[str, Any],
        labels: dict[str, str],
        instance_type: str | None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        resources: dict[str, Any] = {"instance_type": instance_type}
        region = cluster.provider.model_dump().get("region")
        if isinstance(region, str):
            resources["region"] = region
        zones = availability_zones(cluster)
        if len(zones) == 1:
            resources["zone"] = zones[0]
        elif zones:  # tried in the file's order, as Ray's AWS provider takes its subnets
            resources["ordered"] = [{"zone": zone} for zone in zones]
        return resources, node_config


def availability_zones(cluster: Cluster) -> list[str]:
    """``provider.availability_zone``: one zone (Ray's GCP files) or a comma-separated list
    (Ray's AWS example, ``us-west-2a,us-west-2b``): the zones a node launches in."""
    value = cluster.provider.availability_zone
    return [z.strip() for z in (value or "").split(",") if z.strip()]
