"""The bundle routes: ``corral launch`` uploads a task's packed workdir and file mounts once
per project, under the sha256 of its bytes (``PUT /v1/bundles/{sha256}?project=P``, an
admin's or a member's token), and asks first whether the project keeps it (``HEAD``). A
bundle is its project's: another project's caller gets 404 as for an unknown sha256. Nodes
fetch theirs from ``GET /v1/node/bundle``. The bytes go to the blob store, not Redis
(:mod:`corral.services.state.bundles`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from corral.services.api.auth import Principal, caller, require_writer
from corral.services.api.routes import get_deps, project_for
from corral.services.runtime.deps import Deps
from corral.services.state.blobs import BlobStoreError
from corral.services.state.bundles import QuotaExceeded, scope_of

BUNDLES_PATH = "/v1/bundles/"
router = APIRouter(prefix="/v1/bundles", tags=["bundles"])
SHA256 = Path(pattern=r"^[0-9a-f]{64}$", description="the sha256 of the bundle's bytes")
PROJECT = Query(
    None, max_length=63, description="the project it is for (default: the caller's only one)"
)


@router.head("/{sha256}", summary="Whether the project keeps a bundle (204) or not (404)")
def bundle_kept(
    sha256: str = SHA256,
    project: str | None = PROJECT,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> Response:
    if project is not None and not who.sees(project):
        raise HTTPException(404, "no such bundle")
    if not deps.bundles.has(scope_of(project_for(deps, who, project)), sha256):
        raise HTTPException(404, "no such bundle")
    return Response(status_code=204)


@router.put(
    "/{sha256}",
    status_code=201,
    responses={413: {"description": "over the project's bundle quota"}},
    summary="Keep a bundle (a gzip'd tar) by its sha256, for a project",
)
async def put_bundle(
    request: Request,
    sha256: str = SHA256,
    project: str | None = PROJECT,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(require_writer),
) -> dict[str, object]:
    data = await request.body()
    if not data.startswith(b"\x1f\x8b"):
        raise HTTPException(422, "a bundle is a gzip'd tar")
    scope = scope_of(await run_in_threadpool(project_for, deps, who, project))
    try:
        added = await run_in_threadpool(deps.bundles.put, scope, sha256, data)
    except QuotaExceeded as exc:
        raise HTTPException(413, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    except BlobStoreError as exc:
        raise HTTPException(503, f"the bundle store cannot be written: {exc}") from None
    return {"sha256": sha256, "size_bytes": len(data), "added": added}
