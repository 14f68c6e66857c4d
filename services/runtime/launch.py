"""The one launch path: every machine Corral starts goes through here, whoever asks for it
(a direct request's zone attempt, a machine pool's machine, a Determined agent, an autoscaled
cluster node, which is launched as an ordinary request).

- :func:`launch_and_wait`: one launch spec, idempotent by its attempt id, waited for until its
  instances are up or the attempt deadline passes (raises the provider's error, or
  :class:`LaunchTimeoutError`; what came up late is terminated).
- :func:`launch_on_zones`: one machine of a launch template, in the first zone that has it (the
  reservation's zone for a reserved template), for pooled machines.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Mapping
from typing import Any

from corral.services.providers.base import TAG_ATTEMPT, TAG_NODE, LaunchSpec, ProviderInstance
from corral.services.runtime.deps import Deps
from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.errors import LaunchTimeoutError, ProviderError
from corral.shared.merge import merge_advanced_instance_config

log = logging.getLogger("corral.launch")


def launch_and_wait(deps: Deps, spec: LaunchSpec) -> list[ProviderInstance]:
    """Launch ``spec`` on its cloud and wait until its instances are up, within the attempt
    deadline (raises the provider's error, or LaunchTimeoutError). Sorted by node index."""
    provider = deps.provider(spec.cloud)
    deadline = time.monotonic() + deps.settings.timers.attempt_deadline_s
    launched = _launch_by_deadline(provider, spec, deadline)
    return _wait_until_up(provider, spec.attempt_id, len(launched), deadline)


def _launch_by_deadline(provider: Any, spec: LaunchSpec, deadline: float) -> list[ProviderInstance]:
    """Call ``provider.launch`` but stop waiting at the deadline: a hung region must not hold
    the chain. What a late launch creates is found by its attempt tag and cleaned up."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(provider.launch, spec)
    try:
        return list(future.result(timeout=max(0.0, deadline - time.monotonic())))
    except concurrent.futures.TimeoutError:
        raise LaunchTimeoutError(f"no answer within the attempt deadline in {spec.zone}") from None
    finally:
        pool.shutdown(wait=False)


def _wait_until_up(
    provider: Any, attempt_id: str, count: int, deadline: float
) -> list[ProviderInstance]:
    """Wait for every node to report in (running, or already finished for a quick job). A
    failed look (throttled, a 5xx) is looked at again: the launch itself has succeeded."""
    found: list[ProviderInstance] = []
    while True:
        try:
            found = provider.describe({TAG_ATTEMPT: attempt_id})
        except ProviderError as exc:
            log.info("describe failed while waiting for %s (%s); looking again", attempt_id, exc)
        else:
            if len(found) >= count and all(p.state in ("running", "terminated") for p in found):
                return sorted(found, key=lambda p: int(p.tags.get(TAG_NODE, "0")))
            if any(p.state == "lost" for p in found):
                provider.terminate([p.provider_id for p in found])
                raise ProviderError("an instance died while starting", code="InstanceLost")
        if time.monotonic() > deadline:
            provider.terminate([p.provider_id for p in found])
            raise LaunchTimeoutError("instances did not come up within the attempt deadline")
        time.sleep(getattr(provider, "poll_interval_s", 1.0))


# ----------------------------------------------------------------------------------------------
# One machine of a launch template (pooled machines)


def launch_on_zones(
    deps: Deps,
    cloud: str,
    template: LaunchTemplate,
    label: str,
    attempt_id: str,
    tags: dict[str, str],
    extra: dict[str, Any] | None = None,
) -> tuple[ProviderInstance, LaunchSpec]:
    """Launch one machine of ``template`` in the first zone that has it (the reservation's
    zone for a reserved template), idempotent by ``attempt_id``. Raises the last zone's
    ProviderError when none could, or MergeError for a bad ``extra`` config."""
    config = dict(template.advanced_instance_config)
    if extra:
        config = merge_advanced_instance_config(cloud, config, extra)
    last: ProviderError = ProviderError(
        f"no zone of {cloud} offers {template.instance_type}", code="NoZone"
    )
    failures = []
    for zone, region in zones_for(deps, cloud, template):
        spec = LaunchSpec(
            request_id=label,
            attempt_id=attempt_id,
            cloud=cloud,
            region=region,
            zone=zone,
            instance_type=template.instance_type,
            market="spot" if template.market_type == "SPOT" else "on_demand",
            count=1,
            advanced_instance_config=config,
            tags=tags,
        )
        try:
            [got] = launch_and_wait(deps, spec)
            return got, spec
        except ProviderError as exc:
            failures.append(f"{zone}: {exc.outcome}: {exc}")
            last = exc
    if failures:
        raise ProviderError("; ".join(failures), code=last.code)
    raise last


def zones_for(deps: Deps, cloud: str, template: LaunchTemplate) -> list[tuple[str, str]]:
    """(zone, region) pairs to try for a template: its own zones, else where the cloud
    offers the type (the reservation's zone first)."""
    if cloud != "local":
        from corral.shared.catalog import load_catalog

        offerings = load_catalog().instance_type(cloud, template.instance_type)
        pairs = [(o.zone, o.region) for o in offerings]
    else:
        local = deps.local_cloud
        itype = local.aliases.get(template.instance_type, template.instance_type)
        pairs = [(z.name, r.name) for r in local.regions for z in r.zones if z.offers(itype)]
        rid = reservation_of(template.advanced_instance_config)
        reservation = next((x for x in local.reservations if x.id == rid), None)
        if reservation is not None:
            region = next(
                r.name for r in local.regions for z in r.zones if z.name == reservation.zone
            )
            pairs = [(reservation.zone, region)]
    if template.zones:
        pairs = [p for p in pairs if p[0] in template.zones]
    return pairs


def reservation_of(config: Mapping[str, Any]) -> str | None:
    """The capacity reservation an AWS-style advanced_instance_config targets, if any."""
    spec = config.get("CapacityReservationSpecification")
    target = spec.get("CapacityReservationTarget") if isinstance(spec, Mapping) else None
    rid = target.get("CapacityReservationId") if isinstance(target, Mapping) else None
    return str(rid) if rid else None


def market_of(spec: LaunchSpec, got: ProviderInstance) -> str:
    """The market a launched machine is billed in: ``reserved`` when its spec draws on a
    reservation, else what the cloud reports."""
    if spec.reservation_id or reservation_of(spec.advanced_instance_config) is not None:
        return "reserved"
    return got.market
