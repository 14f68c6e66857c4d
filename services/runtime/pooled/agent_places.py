"""Where a Determined pool's agent may launch: the zones of the region (or the zone) its
provider names that offer its instance type, narrowed to its subnet's zone when it names a
subnet (EC2 refuses an instance placed outside its subnet's zone), and on Google Cloud only in
the project the file names."""

from __future__ import annotations

import logging
from typing import Any

from corral.services.providers.base import Provider
from corral.services.providers.registry import ProviderUnavailable
from corral.services.runtime.deps import Deps
from corral.shared.det_providers import AgentLaunch, zones_in

log = logging.getLogger("corral.pools")


def agent_zones(deps: Deps, cloud: str, launch: AgentLaunch) -> list[str] | str | None:
    """The zones to try (None: wherever the cloud offers the type), or why there are none."""
    if launch.region is None and launch.zones is None and _subnet(launch.config) is None:
        return _project_problem(deps, cloud, launch)
    try:
        provider = deps.provider(cloud)
        pairs = provider.zones_of(launch.instance_type, None)
    except ProviderUnavailable as exc:
        return str(exc)
    zones = zones_in(pairs, launch)
    where = " ".join(
        p
        for p in (
            f"region {launch.region}" if launch.region else "",
            f"zone {', '.join(launch.zones)}" if launch.zones else "",
        )
        if p
    )
    if not zones:
        return f"{launch.instance_type} is not offered in {where or 'any zone'} on {cloud}"
    subnet = _subnet(launch.config)
    if subnet is not None:
        regions = list(dict.fromkeys(r for z, r in pairs if z in zones))
        at = _subnet_zone(provider, regions, subnet)
        if at is not None:
            if at not in zones:
                return (
                    f"subnet {subnet} is in zone {at}, where {cloud} does not offer "
                    f"{launch.instance_type}{' in ' + where if where else ''}"
                )
            zones = [at]
    problem = _project_problem(deps, cloud, launch)
    return problem if isinstance(problem, str) else zones


def _subnet(config: dict[str, Any]) -> str | None:
    for nic in config.get("NetworkInterfaces") or ():
        if isinstance(nic, dict) and nic.get("SubnetId"):
            return str(nic["SubnetId"])
    subnet = config.get("SubnetId")
    return str(subnet) if subnet else None


def _subnet_zone(provider: Provider, regions: list[str], subnet: str) -> str | None:
    """The zone of a subnet, asked of the cloud region by region (None: not found, or the
    cloud has no such question: the launch goes on and the cloud's own answer says)."""
    if not provider.features.subnet_zones:
        return None
    for region in regions:
        try:
            zone = provider.subnet_zone(region, subnet)  # type: ignore[attr-defined]
        except Exception as exc:  # credentials, the network: the launch itself will say
            log.warning("the zone of subnet %s in %s could not be read: %s", subnet, region, exc)
            return None
        if zone is not None:
            return str(zone)
    return None


def _project_problem(deps: Deps, cloud: str, launch: AgentLaunch) -> str | None:
    """A Google Cloud provider's ``project`` must be the one Corral launches in (when the
    settings name it; else the credentials' own project is used)."""
    mine = deps.settings.gcp_project
    if launch.project is None or cloud != "gcp":
        return None
    if mine and mine != launch.project:
        return (
            f"provider.project {launch.project}: Corral's Google Cloud credentials launch in "
            f"project {mine} (CORRAL_GCP_PROJECT); it launches in no other"
        )
    return None
