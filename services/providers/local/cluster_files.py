"""The local cloud's rules for Ray cluster files: it plays a file written for AWS or Google
Cloud, its own instance types standing in (by alias, else the smallest that holds the type);
the file's region and node configs are the other cloud's and stay unused."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.services.providers.cluster_files import ClusterFiles

if TYPE_CHECKING:
    from corral.shared.config.cluster import Cluster
    from corral.shared.config.localcloud import LocalCloud


class LocalClusterFiles(ClusterFiles):
    plays_others = True

    def stand_in(self, load_local: Callable[[], LocalCloud]) -> LocalCloud | None:
        return load_local()

    def notes(self, cluster: Cluster) -> list[str]:
        """A docker section fails every node at its docker step on a host without docker."""
        if cluster.docker is None or shutil.which("docker") is not None:
            return []
        image = cluster.docker.image or cluster.docker.head_image or cluster.docker.worker_image
        return [
            f"docker: the file runs its commands in a container ({image}), but the local "
            "cloud's host has no docker: every node will fail at its docker step"
        ]

    def node_launch(
        self,
        cluster: Cluster,
        node_config: dict[str, Any],
        labels: dict[str, str],
        instance_type: str | None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        return {"instance_type": instance_type}, None
