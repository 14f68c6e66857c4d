"""``corral catalog update`` for Google Cloud: ask the Compute API which machine types and
accelerator types each zone sells, and the Cloud Billing catalog what Compute Engine's vCPUs,
memory and GPUs cost per region; the pure rebuild (corral.shared.catalog.rebuild) prices the
machine types from them.

Compute: ``machineTypes.aggregatedList`` and ``acceleratorTypes.aggregatedList`` (every zone
in one paged call each). Billing: ``services/6F81-5844-456A/skus`` (Compute Engine's SKUs,
USD), paged.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from corral.shared.catalog.rebuild import (
    CatalogFetchError,
    GcpFacts,
    MachineType,
    gcp_accelerator_name,
    gcp_sku_prices,
    region_of_zone,
)

Progress = Callable[[str], None]
BILLING_API = "https://cloudbilling.googleapis.com"
COMPUTE_SERVICE_ID = "6F81-5844-456A"  # Compute Engine in the Cloud Billing catalog
MAX_SKU_PAGES = 200  # a bound on paging (the real catalog has a few thousand SKUs)


def _machine_type(item: Any) -> MachineType:
    accelerators = list(getattr(item, "accelerators", ()) or ())
    name, count = None, 0
    if accelerators:
        name = gcp_accelerator_name(accelerators[0].guest_accelerator_type)
        count = int(accelerators[0].guest_accelerator_count) if name else 0
    return MachineType(
        str(item.name), float(item.guest_cpus), float(item.memory_mb) / 1024, name, count
    )


def _zone_of(scope: str) -> str:
    return scope.rsplit("/", 1)[-1]


def _read_compute(
    project: str, kwargs: dict[str, Any], wanted: set[str] | None, facts: GcpFacts
) -> None:
    from google.cloud import compute_v1

    machines = compute_v1.MachineTypesClient(**kwargs)
    for scope, listed in machines.aggregated_list(project=project):
        zone = _zone_of(scope)
        if wanted is not None and region_of_zone(zone) not in wanted:
            continue
        types = [_machine_type(m) for m in listed.machine_types]
        if types:
            facts.machine_types.setdefault(zone, []).extend(types)
    gpus = compute_v1.AcceleratorTypesClient(**kwargs)
    for scope, listed in gpus.aggregated_list(project=project):
        zone = _zone_of(scope)
        if wanted is not None and region_of_zone(zone) not in wanted:
            continue
        for acc in listed.accelerator_types:
            name = gcp_accelerator_name(acc.name)
            if name is not None:
                facts.accelerators.setdefault(zone, {})[name] = int(acc.maximum_cards_per_instance)


def _read_skus(endpoint: str, token: str | None) -> list[dict[str, Any]]:
    skus: list[dict[str, Any]] = []
    page = ""
    for _ in range(MAX_SKU_PAGES):
        query = urllib.parse.urlencode({"currencyCode": "USD", "pageSize": 5000, "pageToken": page})
        url = f"{endpoint.rstrip('/')}/v1/services/{COMPUTE_SERVICE_ID}/skus?{query}"
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = json.loads(answer.read())
        skus.extend(body.get("skus", ()))
        page = body.get("nextPageToken") or ""
        if not page:
            return skus
    raise CatalogFetchError(f"gcp: the billing catalog had more than {MAX_SKU_PAGES} pages")


def _credentials(anonymous: bool, project: str | None) -> tuple[Any, str, str | None]:
    """(credentials, project, bearer token for the billing catalog)."""
    import google.auth
    import google.auth.exceptions
    from google.auth.credentials import AnonymousCredentials

    if anonymous:
        if not project:
            raise CatalogFetchError("gcp: no project (CORRAL_GCP_PROJECT)")
        return AnonymousCredentials(), project, None  # type: ignore[no-untyped-call]
    from corral.services.providers.gcp.check import _on_gce
    from corral.services.settings import gcp_credentials_hint

    if not gcp_credentials_hint() and not _on_gce():
        # No key file, no gcloud login, not a GCE machine: the SDK's chain would only wait
        # out the metadata server's timeouts to say the same.
        raise google.auth.exceptions.DefaultCredentialsError("none found")  # type: ignore[no-untyped-call]
    credentials, found = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    from google.auth.transport.requests import Request

    credentials.refresh(Request())  # type: ignore[no-untyped-call]
    chosen = project or found
    if not chosen:
        raise CatalogFetchError("gcp: no project: configure one, or use credentials naming one")
    return credentials, chosen, credentials.token


def fetch(
    *,
    project: str | None,
    regions: Iterable[str] | None,
    api_endpoint: str | None,
    billing_endpoint: str | None,
    anonymous: bool,
    progress: Progress,
) -> tuple[GcpFacts, list[str]]:
    """The answers of every zone (or of the regions named), and the regions read. Raises
    CatalogFetchError with one line naming the cause."""
    import google.auth.exceptions
    from google.api_core import exceptions as api_exceptions
    from google.api_core.client_options import ClientOptions

    facts = GcpFacts()
    wanted = set(regions) if regions is not None else None
    try:
        credentials, chosen, token = _credentials(anonymous, project)
        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        kwargs = {"credentials": credentials, "transport": "rest", "client_options": options}
        _read_compute(chosen, kwargs, wanted, facts)
        progress(
            f"gcp: {sum(len(v) for v in facts.machine_types.values())} machine types and "
            f"{sum(len(v) for v in facts.accelerators.values())} accelerator types in "
            f"{len(facts.machine_types)} zones"
        )
        skus = _read_skus(billing_endpoint or BILLING_API, token)
        facts.prices = gcp_sku_prices(skus)
        progress(f"gcp: {len(skus)} billing SKUs, {len(facts.prices)} prices")
    except google.auth.exceptions.DefaultCredentialsError:
        raise CatalogFetchError(
            "gcp: no credentials found (GOOGLE_APPLICATION_CREDENTIALS, or "
            "`gcloud auth application-default login`)"
        ) from None
    except google.auth.exceptions.GoogleAuthError as exc:
        raise CatalogFetchError(f"gcp: credentials refused: {type(exc).__name__}") from None
    except api_exceptions.GoogleAPICallError as exc:
        raise CatalogFetchError(f"gcp: the Compute API refused: {exc.code} {exc.reason}") from None
    except OSError as exc:  # urllib's HTTPError and URLError, a refused connection
        raise CatalogFetchError(f"gcp: the billing catalog did not answer: {exc}") from None
    read = sorted({region_of_zone(z) for z in facts.machine_types})
    return facts, read
