"""Whether a pool's cloud can launch its machines here: turned on, and with credentials. Said
at ``pools apply`` (a warning: the file is still registered) and by ``why`` for work that waits
on that pool, so the cause is not only in a worker's log."""

from __future__ import annotations

from corral.services.providers.registry import ProviderUnavailable, check_cloud, display_name
from corral.services.runtime.deps import Deps


def cloud_not_ready(deps: Deps, cloud: str) -> str | None:
    """Why ``cloud`` cannot launch machines here (None: it can, as far as can be told)."""
    name = f"{display_name(cloud)} ({cloud})" if display_name(cloud) != cloud else cloud
    if cloud not in deps.settings.clouds:
        return f"{name} is not turned on here (list it in CORRAL_CLOUDS)"
    try:
        if deps.provider(cloud).has_credentials():
            return None
    except ProviderUnavailable as exc:
        return f"{name} has no provider here: {exc}"
    detail = check_cloud(cloud, deps.settings, lambda: deps.local_cloud).detail
    return f"{name} has no credentials here: {detail}"


def pool_clouds_not_ready(deps: Deps, pool_clouds: dict[str, str]) -> list[str]:
    """One warning per cloud that cannot launch, naming the pools (pool -> cloud) on it."""
    out = []
    for cloud in dict.fromkeys(pool_clouds.values()):
        why = cloud_not_ready(deps, cloud)
        if why is not None:
            names = ", ".join(p for p, c in pool_clouds.items() if c == cloud)
            out.append(f"{why}; the machines of {names} cannot launch until it can")
    return out
