"""``corral check`` for Google Cloud: credentials and a project from the SDK's chain, and
whether the Compute API answers them with the project's instances."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from corral.services.providers.base import CloudCheck
from corral.services.settings import gcp_credentials_hint
from corral.shared.errors import ProviderError

if TYPE_CHECKING:
    from corral.services.providers.gcp.provider import GcpProvider


# Where Linux says which machine this is: "Google Compute Engine" on a GCE VM.
PRODUCT_NAME = Path("/sys/class/dmi/id/product_name")


def check(provider: GcpProvider) -> CloudCheck:
    """Found, who, and the Compute API's answer; failures named, never a traceback."""
    if not provider.given_credentials and not gcp_credentials_hint() and not _on_gce():
        # No key file, no gcloud login, not a GCE machine: the SDK's chain would only wait
        # out the metadata server's timeouts (seconds) to say the same.
        return CloudCheck(
            False,
            None,
            "no credentials found (GOOGLE_APPLICATION_CREDENTIALS, or "
            "`gcloud auth application-default login`)",
        )
    try:
        api = provider._api()  # the package's own provider
    except ProviderError as exc:  # AuthError: no credentials, or no project
        return CloudCheck(False, None, exc.message)
    identity = f"project {api.project}"
    request = compute_v1.AggregatedListInstancesRequest(project=api.project, max_results=1)
    try:
        next(iter(api.instances.aggregated_list(request=request, timeout=30)), None)
    except api_exceptions.GoogleAPICallError as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        return CloudCheck(False, identity, f"the Compute API refused: {reason} ({exc.code})")
    except Exception as exc:  # transport errors (no route, TLS): say which, print no secret
        return CloudCheck(False, identity, f"the Compute API did not answer: {type(exc).__name__}")
    return CloudCheck(True, identity, f"the Compute API answered for project {api.project}")


def _on_gce() -> bool:
    try:
        return "Google" in PRODUCT_NAME.read_text()
    except OSError:
        return False
