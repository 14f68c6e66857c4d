"""The API's pool routes: register a machine pool file or a Determined master config, list
and show pools, delete one; and ``why`` a request waits.

Admins only (create_app mounts the router behind :func:`corral.services.api.auth.require_admin`),
but ``why``, which any user may ask of its projects' requests. The work is
done by :mod:`corral.services.runtime.pooled.registry`; these routes check the file again
(the CLI checks it first, but the API is open to any client), choose its cloud and map
errors to statuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, HTTPException, status

from corral.services.api.auth import Principal, caller, require_token
from corral.services.api.routes import check_name, get_deps, invalid_file, visible_request
from corral.services.api.schemas import (
    PoolApplied,
    PoolBody,
    PoolDeleted,
    PoolList,
    PoolView,
    WhyView,
)
from corral.services.providers.registry import ProviderUnavailable, stand_in_clouds, types_from
from corral.services.runtime import why as whys
from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import registry as pools
from corral.services.runtime.pooled.cloud_ready import pool_clouds_not_ready
from corral.services.state.pool_store import PoolKind
from corral.shared.configio import ConfigError, Document, PathKey
from corral.shared.errors import ProviderError
from corral.shared.template_clouds import written_for

if TYPE_CHECKING:
    from corral.shared.config.machine_pool import MachinePool
    from corral.shared.config.master_config import MasterConfig

router = APIRouter()

POOL_KINDS = ("machine_pool", "master_config")


def _refused(message: str) -> HTTPException:
    return HTTPException(422, {"error": message})


def _sold(deps: Deps, cloud: str, instance_type: str) -> bool:
    """Whether ``cloud`` offers ``instance_type`` somewhere (its provider knows: a catalog,
    the local cloud's file and its aliases, or what it lists)."""
    try:
        return bool(deps.provider(cloud).zones_of(instance_type, None))
    except ProviderUnavailable:
        return False


def _machine_pool_cloud(
    deps: Deps, pool: MachinePool, doc: Document, asked: str | None
) -> tuple[str, list[str]]:
    """The cloud a machine pool's launch templates are played on, and warnings: ``asked``;
    else the cloud the templates are written for (:mod:`corral.shared.template_clouds`) when
    it is turned on and sells them all; else the first enabled cloud that sells them all, a
    cloud that plays other clouds' types (the local cloud, by its aliases) first, with a
    warning when the templates were written for another cloud or several clouds sell them."""
    templates: list[tuple[PathKey, str]] = [
        (("machine_types", i, "launch_templates", j, "instance_type"), t.instance_type)
        for i, machine in enumerate(pool.machine_types)
        for j, t in enumerate(machine.launch_templates)
    ]
    types = sorted({name for _, name in templates})
    players = stand_in_clouds()
    clouds = [*players, *(c for c in deps.settings.clouds if c not in players)]
    if asked is not None:
        if asked not in clouds:
            raise _refused(f"cloud {asked!r}: expected one of {', '.join(clouds)}")
        where = types_from(asked)
        unsold = [
            doc.issue(path, f"{name!r} is not an instance type of {where}")
            for path, name in templates
            if not _sold(deps, asked, name)
        ]
        if unsold:
            raise ConfigError(unsold)
        return asked, []
    sellers = [c for c in clouds if all(_sold(deps, c, name) for name in types)]
    owners, why = written_for(
        (t.instance_type, t.advanced_instance_config)
        for m in pool.machine_types
        for t in m.launch_templates
    )
    if len(owners) == 1:
        [own] = owners
        if own in sellers and own not in players:
            return own, []
        player = next((c for c in sellers if c in players), None)
        if player is not None:
            state = (
                "is not turned on here (CORRAL_CLOUDS)"
                if own not in deps.settings.clouds
                else f"does not sell {', '.join(types)}"
            )
            return player, [
                f"the launch templates are written for {own} ({why}), and {own} {state}: "
                f"the {player} cloud plays them; pass --cloud to choose"
            ]
    if sellers:
        warnings = []
        if len(owners) > 1:
            warnings.append(
                f"the launch templates are written for several clouds ({why}); registered on "
                f"{sellers[0]}, which sells them all; pass --cloud to choose"
            )
        elif len(sellers) > 1:
            warnings.append(
                f"{', '.join(types)}: sold by {', '.join(sellers)} and the templates name no "
                f"one cloud; registered on {sellers[0]}; pass --cloud to choose"
            )
        return sellers[0], warnings
    sellers_text = " or ".join(types_from(c) for c in clouds)
    unsold = [
        doc.issue(path, f"no cloud sells {name!r}: it is not in {sellers_text}")
        for path, name in templates
        if not any(_sold(deps, c, name) for c in clouds)
    ]
    raise ConfigError(
        unsold or [doc.issue(("machine_types",), f"no one cloud sells all of {', '.join(types)}")]
    )


def _master_config_cloud(deps: Deps, config: MasterConfig, asked: str | None) -> str:
    """A cloud that plays others' types (the local cloud) when a pool's provider names one,
    else the first provider's type; with no provider (static pools), ``asked`` or that cloud.
    A kubernetes resource manager's pools run on the kubernetes cloud, which must be turned on
    (CORRAL_CLOUDS). (``resource_manager.type`` and ``provider.type`` are the master config's
    own words.)"""
    manager = config.resource_manager
    if manager is not None and manager.type == "kubernetes":
        if "kubernetes" not in deps.settings.clouds:
            raise _refused(
                "resource_manager.type kubernetes: the kubernetes cloud is not turned on "
                "(list it in CORRAL_CLOUDS)"
            )
        if asked not in (None, "kubernetes"):
            raise _refused(f"cloud {asked!r}: a kubernetes resource manager's pools are pods")
        return "kubernetes"
    providers = [p.provider.type for p in config.resource_pools or () if p.provider is not None]
    if config.provisioner is not None:
        providers.append(config.provisioner.type)
    players = stand_in_clouds()
    if not providers:
        return asked or players[0]
    cloud = next((p for p in providers if p in players), providers[0])
    if asked is not None and asked != cloud:
        raise _refused(
            f"cloud {asked!r}: a master config's pools name their cloud in provider.type "
            f"(this one: {cloud})"
        )
    return cloud


def _checked(deps: Deps, body: PoolBody) -> tuple[str, list[str]]:
    """The cloud of a valid pool file, and warnings (a cloud chosen over the one the file is
    written for; a cloud its machines need that cannot launch here); raises ConfigError or a
    422."""
    from corral.shared.config.detect import validate_as
    from corral.shared.config.machine_pool import MachinePool
    from corral.shared.config.master_config import MasterConfig

    doc = Document(name=body.file_name, data=body.spec)
    model = validate_as(doc, body.kind).model
    asked = body.cloud.lower() if body.cloud else None
    if isinstance(model, MachinePool):
        cloud, warnings = _machine_pool_cloud(deps, model, doc, asked)
        return cloud, warnings + pool_clouds_not_ready(deps, {f"pool {body.name}": cloud})
    assert isinstance(model, MasterConfig)
    cloud = _master_config_cloud(deps, model, asked)
    return cloud, pool_clouds_not_ready(deps, _provider_clouds(model, cloud))


def _provider_clouds(config: MasterConfig, cloud: str) -> dict[str, str]:
    """Resource pool -> the cloud its agents launch on (its provider's type; the master's
    cloud for a kubernetes manager). Static pools launch nothing."""
    if config.resource_manager is not None and config.resource_manager.type == "kubernetes":
        return {f"resource pool {n}": cloud for n in config.pool_names()}
    if config.provisioner is not None:
        return {"resource pool default": config.provisioner.type}
    return {
        f"resource pool {p.pool_name}": p.provider.type
        for p in config.resource_pools or ()
        if p.provider is not None and p.provider.type != "hpc"
    }


def _view(deps: Deps, name: str) -> dict[str, Any]:
    """``pool_view`` plus, for a master config, its pools' names; 404 when unknown."""
    try:
        view = pools.pool_view(deps, name)
    except pools.PoolNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    if view["kind"] == "master_config":
        view["resource_pools"] = _resource_pools(deps, name)
    return view


def _resource_pools(deps: Deps, name: str) -> list[str]:
    from corral.shared.config.master_config import MasterConfig

    record = deps.pools.get(name)
    if record is None:
        return []
    return MasterConfig.model_validate(record.spec).pool_names()


@router.post(
    "/v1/pools",
    status_code=status.HTTP_201_CREATED,
    response_model=PoolApplied,
    dependencies=[Depends(require_token)],
    responses={
        409: {"description": "the name is registered as the other kind"},
        422: {"description": "invalid file, bad name, or no cloud sells its instance types"},
    },
    summary="Register (or replace) a machine pool file or a Determined master config",
)
def apply_pool(body: PoolBody, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    if body.kind not in POOL_KINDS:
        raise _refused(f"kind {body.kind!r}: expected one of {', '.join(POOL_KINDS)}")
    check_name("pool", body.name)
    try:
        cloud, warnings = _checked(deps, body)
    except ConfigError as exc:
        raise invalid_file(exc, body.kind.replace("_", " ")) from None
    replaced = deps.pools.get(body.name) is not None
    kind: PoolKind = "machine_pool" if body.kind == "machine_pool" else "master_config"
    try:
        pools.apply_pool(
            deps,
            name=body.name,
            kind=kind,
            file_name=body.file_name,
            spec=body.spec,
            cloud=cloud,
        )
    except pools.PoolError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return {**_view(deps, body.name), "replaced": replaced, "warnings": warnings}


@router.get("/v1/pools", response_model=PoolList, summary="List the registered pools")
def list_pools(deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    views = pools.list_pools(deps)
    for view in views:
        if view["kind"] == "master_config":
            view["resource_pools"] = _resource_pools(deps, view["name"])
    return {"pools": views}


@router.get(
    "/v1/pools/{name}",
    response_model=PoolView,
    summary="One pool: its machine types and partitions, machines and workloads",
)
def get_pool(name: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    return _view(deps, name)


@router.delete(
    "/v1/pools/{name}",
    response_model=PoolDeleted,
    dependencies=[Depends(require_token)],
    responses={409: {"description": "workloads still use the pool"}},
    summary="Unregister a pool and terminate its machines (refused while workloads use it)",
)
def delete_pool(name: str, deps: Deps = Depends(get_deps)) -> dict[str, Any]:
    try:
        return pools.delete_pool(deps, name)
    except pools.PoolNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except pools.PoolError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except ProviderError as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"could not terminate pool {name!r}'s machines ({exc}); it stays registered, try again",
        ) from None


# Any user's token: a member or viewer reads why of its projects' requests (404 otherwise).
why_router = APIRouter(tags=["pools"])


@why_router.get(
    "/v1/requests/{request_id}/why",
    response_model=WhyView,
    summary="Where a request runs, or why it waits (the scheduler's own decision)",
)
def why(
    request_id: str, deps: Deps = Depends(get_deps), who: Principal = Depends(caller)
) -> dict[str, Any]:
    visible_request(deps, who, request_id)
    try:
        return whys.why(deps, request_id)
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
