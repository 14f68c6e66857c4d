"""Plans for launches: the planner over the catalog, the local cloud and remembered blocks;
and the dollar budgets the pool passes honour."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from corral.services.providers.registry import ProviderUnavailable
from corral.services.runtime.deps import Deps
from corral.services.settings import installed_catalog
from corral.shared.budgets import Budget, load_budgets
from corral.shared.catalog import Catalog
from corral.shared.catalog.offering import Offering
from corral.shared.config.task import Task
from corral.shared.planner import Plan, plan, request_specs


@lru_cache(maxsize=4)
def catalog_with_local(local_cloud_file: str, mtime_ns: int) -> Catalog:
    """The shipped catalog plus the local cloud's offerings (re-read when its file changes)."""
    from corral.shared.config.localcloud import load_local_cloud

    local = load_local_cloud(local_cloud_file)
    return installed_catalog().with_offerings(local.offerings())


@lru_cache(maxsize=4)
def _with_listed(local_cloud_file: str, mtime_ns: int, listed: tuple[Offering, ...]) -> Catalog:
    return catalog_with_local(local_cloud_file, mtime_ns).with_offerings(listed)


def catalog_for(deps: Deps) -> Catalog:
    """Every offering Corral may plan on: the shipped price lists, the local cloud's file, and
    what the providers of the other enabled clouds list (a cloud without a CSV plans too)."""
    path = Path(deps.settings.local_cloud_file)
    mtime_ns = path.stat().st_mtime_ns
    base = catalog_with_local(str(path), mtime_ns)
    listed: list[Offering] = []
    for cloud in deps.settings.clouds:
        if cloud in base.clouds:
            continue  # priced by a shipped catalog or the local cloud's file
        try:
            listed.extend(deps.provider(cloud).offerings())
        except ProviderUnavailable:
            continue
    return _with_listed(str(path), mtime_ns, tuple(listed)) if listed else base


def warm_up(deps: Deps) -> None:
    """Ask every cloud for its credentials and read the catalog now (a cloud SDK and its
    credential chain take seconds to load, the price lists tens of milliseconds), so that a
    process's first request or task does not wait for them."""
    deps.launchable_clouds()
    catalog_for(deps)


def plan_launch(deps: Deps, task: Task) -> Plan:
    """The failover chain for ``task`` over the clouds that can launch here. Remembered blocks
    are not applied here: the failover steps pass over them and say so in the account."""
    return plan(task, catalog_for(deps), clouds=deps.launchable_clouds())


def clouds_left_out(deps: Deps, task: Task) -> dict[str, str]:
    """The clouds that could serve ``task`` by the catalog but that launches here leave out,
    each with why: ``{"aws": "no credentials found"}``. Clouds that could not serve it are
    not named: a ``cloud: local`` task hears nothing about AWS credentials."""
    catalog = catalog_for(deps)
    launchable = set(deps.launchable_clouds())
    others = [cloud for cloud in catalog.clouds if cloud not in launchable]
    pinned = {spec.where.cloud for spec in request_specs(task.resources)} if others else set()
    if others and None not in pinned:
        # Every alternative of the task names its cloud: no other cloud could serve it, and
        # the planner is asked about these only (admission asks this of every launch).
        others = [cloud for cloud in others if cloud in pinned]
    left: dict[str, str] = {}
    for cloud in others:
        if not plan(task, catalog, clouds=(cloud,)).candidates:
            continue
        enabled = cloud in deps.settings.clouds
        left[cloud] = "no credentials found" if enabled else "not in CORRAL_CLOUDS"
    return left


def left_out_text(left: dict[str, str]) -> str:
    """``aws, gcp left out: no credentials found`` (one clause per reason)."""
    by_reason: dict[str, list[str]] = {}
    for cloud, why in left.items():
        by_reason.setdefault(why, []).append(cloud)
    return "; ".join(f"{', '.join(clouds)} left out: {why}" for why, clouds in by_reason.items())


def price_of(
    deps: Deps, cloud: str, instance_type: str, zone: str | None, market: str | None
) -> float | None:
    """What one machine costs per hour, by the catalog: its zone's spot price in the spot
    market, else the on-demand list price (a reservation's machines too: paid either way).
    None when the catalog does not know it."""
    offerings = catalog_for(deps).instance_type(cloud, instance_type)
    here = [o for o in offerings if o.zone == zone] or list(offerings)
    if not here:
        return None
    if market == "spot" and here[0].spot_price_usd_per_hour is not None:
        return here[0].spot_price_usd_per_hour
    return here[0].price_usd_per_hour


@lru_cache(maxsize=4)
def _budgets_file(path: str, mtime_ns: int) -> tuple[Budget, ...]:
    return load_budgets(path)


def budgets_of(deps: Deps) -> tuple[Budget, ...]:
    """The dollar budgets the pool passes honour (``budgets_file``; re-read when it changes).
    A wrong file raises its ConfigError: a pass must not run as if it had no budgets."""
    path = deps.settings.budgets_file
    if path is None:
        return ()
    return _budgets_file(str(path), Path(path).stat().st_mtime_ns)


def accelerator_of(deps: Deps, cloud: str, instance_type: str) -> str | None:
    """The accelerator kind of ``cloud``'s ``instance_type`` by the catalog (None: a CPU type,
    or one the catalog does not know): what a pooled machine asks, for its quota families."""
    offerings = catalog_for(deps).instance_type(cloud, instance_type)
    return offerings[0].accelerator if offerings else None
