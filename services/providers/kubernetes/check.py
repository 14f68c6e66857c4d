"""``corral check`` for Kubernetes: the contexts Corral uses (a kubeconfig's, or the pod's own
service account) and whether each answers a read of the namespaces Corral launches pods in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.services.providers.base import CloudCheck
from corral.shared.errors import ProviderError

if TYPE_CHECKING:
    from corral.services.providers.kubernetes.provider import KubernetesProvider


def check(provider: KubernetesProvider) -> CloudCheck:
    """Each context reached (or why not), with the namespaces read there."""
    contexts = provider.contexts()
    if not contexts:
        return CloudCheck(False, None, "no kubeconfig context found (KUBECONFIG, ~/.kube/config)")
    problems: list[str] = []
    for context in contexts:
        try:
            core = provider._core(context)  # the package's own provider
            for namespace in provider.namespaces:
                core.list_namespaced_pod(namespace, limit=1, _request_timeout=10)
        except ProviderError as exc:
            problems.append(f"{context}: {exc.message}")
        except Exception as exc:  # the client's ApiException, a refused connection
            status = getattr(exc, "status", None)
            problems.append(f"{context}: {status or type(exc).__name__}")
    identity = ", ".join(f"context {c}" for c in contexts)
    if problems:
        return CloudCheck(False, identity, "; ".join(problems))
    where = ", ".join(provider.namespaces)
    return CloudCheck(True, identity, f"pods readable in namespace(s) {where}")
