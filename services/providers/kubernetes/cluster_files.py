"""Kubernetes' rules for Ray cluster files: a node config is a pod manifest, created as Ray's
Kubernetes provider creates it, in the file's ``provider.namespace``; the cloud must be turned
on and the namespace one Corral launches in (its pods are listed there only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral.services.providers.cluster_files import ClusterFiles

if TYPE_CHECKING:
    from corral.services.settings import Settings
    from corral.shared.config.cluster import Cluster
    from corral.shared.configio import PathKey

CLOUD = "kubernetes"
# What Ray's Kubernetes provider creates for the autoscaler it runs in the head pod.
RAY_AUTOSCALER_OBJECTS = (
    "autoscaler_service_account",
    "autoscaler_role",
    "autoscaler_role_binding",
    "services",
)


class PodClusterFiles(ClusterFiles):
    def problems(self, settings: Settings, cluster: Cluster) -> list[tuple[PathKey, str]]:
        if CLOUD not in settings.clouds:
            return [
                (
                    ("provider", "type"),
                    "the kubernetes cloud is not turned on here; add it to CORRAL_CLOUDS",
                )
            ]
        namespace = cluster.provider.namespace
        watched = settings.kubernetes_namespaces
        if namespace is not None and namespace not in watched:
            return [
                (
                    ("provider", "namespace"),
                    f"namespace {namespace!r} is not one Corral launches in; expected one of "
                    f"{', '.join(watched)} (or add it to CORRAL_KUBERNETES_NAMESPACES)",
                )
            ]
        return []

    def notes(self, cluster: Cluster) -> list[str]:
        """The provider objects Ray creates and Corral does not: Corral's autoscaler manages
        the pods from outside the cluster, so the head needs no rights over pods."""
        provider = cluster.provider.model_dump()
        named = [key for key in RAY_AUTOSCALER_OBJECTS if provider.get(key)]
        if not named:
            return []
        namespace = cluster.provider.namespace
        where = f"namespace {namespace}" if namespace else "its namespace"
        return [
            f"provider.{', provider.'.join(named)}: not created (Corral's autoscaler manages "
            f"the pods, not one in the head); a pod's serviceAccountName must already exist "
            f"in {where}"
        ]

    def node_launch(
        self,
        cluster: Cluster,
        node_config: dict[str, Any],
        labels: dict[str, str],
        instance_type: str | None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """A node's resources and pod. The pod is the node config's, as Ray's Kubernetes
        provider creates it (:func:`corral.shared.autoscaler.kube_pods.pod_patch`), labelled
        with its cluster, node type and kind as Ray labels its pods; the resources its first
        container states pick the node shape it plans on (the smallest that holds it, of the
        GPU kind its nodeSelector names), in ``provider.namespace``."""
        from corral.services.providers.kubernetes.pods import (
            ACCELERATOR_LABELS,
            accelerator_name,
            pod_labels,
        )
        from corral.shared.autoscaler.kube_pods import pod_of, pod_patch, pod_resources

        pod, problem = pod_of(node_config)
        if pod is None:  # the API refused such a file already
            raise ValueError(f"node_config is no pod: {problem}")
        cpus, memory_gib, gpus = pod_resources(pod)
        resources: dict[str, Any] = {"cpus": cpus, "memory": memory_gib}
        if gpus:
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            kinds = [
                name
                for key in ACCELERATOR_LABELS
                if key in selector and (name := accelerator_name(key, str(selector[key])))
            ]
            if kinds:
                resources["accelerators"] = {kinds[0]: gpus}
        if cluster.provider.namespace:
            resources["zone"] = cluster.provider.namespace
        patch = pod_patch(pod)
        meta = patch["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), **pod_labels(labels)}
        return resources, patch
