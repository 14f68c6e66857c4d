"""The bundle routes: ``corral launch`` uploads a task's packed workdir and file mounts once,
under the sha256 of its bytes (``PUT /v1/bundles/{sha256}``, an admin's or a member's
token), and asks first whether it is kept (``HEAD``). Nodes fetch theirs from
``GET /v1/node/bundle``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response

from corral.services.api.auth import require_writer
from corral.services.api.routes import get_deps
from corral.services.runtime.deps import Deps
from corral.services.state.bundles import BundleStore

BUNDLES_PATH = "/v1/bundles/"
router = APIRouter(prefix="/v1/bundles", tags=["bundles"])
SHA256 = Path(pattern=r"^[0-9a-f]{64}$", description="the sha256 of the bundle's bytes")


@router.head("/{sha256}", summary="Whether a bundle is kept (204) or not (404)")
def bundle_kept(sha256: str = SHA256, deps: Deps = Depends(get_deps)) -> Response:
    if not BundleStore(deps.redis, deps.settings.prefix).has(sha256):
        raise HTTPException(404, "no such bundle")
    return Response(status_code=204)


@router.put(
    "/{sha256}",
    status_code=201,
    dependencies=[Depends(require_writer)],
    summary="Keep a bundle (a gzip'd tar) by its sha256",
)
async def put_bundle(
    request: Request, sha256: str = SHA256, deps: Deps = Depends(get_deps)
) -> dict[str, object]:
    data = await request.body()
    if not data.startswith(b"\x1f\x8b"):
        raise HTTPException(422, "a bundle is a gzip'd tar")
    try:
        added = BundleStore(deps.redis, deps.settings.prefix).put(sha256, data)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return {"sha256": sha256, "size_bytes": len(data), "added": added}
