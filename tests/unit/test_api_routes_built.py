"""The API builds its routes for serving at start (its warm-up), not in the first requests:
FastAPI reads each endpoint's dependencies from its signature when a request first reaches
its router, about 13 ms of the first submit's CPU."""

from __future__ import annotations

import fastapi.routing
import pytest
from fastapi.testclient import TestClient

from corral.services.api.app import build_routes, create_app
from corral.services.settings import Settings


def _served_building(app: fastapi.FastAPI, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The endpoints whose dependencies were read while a request for no route walked every
    router (no lifespan: the warm-up does not run)."""
    read: list[str] = []
    real = fastapi.routing.get_dependant

    def counted(*args: object, **kwargs: object) -> object:
        read.append(str(kwargs.get("path", args[0] if args else "?")))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fastapi.routing, "get_dependant", counted)
    assert TestClient(app).get("/no/such/route").status_code == 404
    monkeypatch.undo()
    return read


def test_routes_built_at_start_are_not_built_again_by_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0")  # nothing is dialled here
    cold = create_app(settings)
    if not any(hasattr(r, "effective_candidates") for r in cold.router.routes):
        pytest.skip("this FastAPI builds its routes as they are included")
    assert _served_building(cold, monkeypatch)  # unbuilt: the first request builds them

    warm = create_app(settings)
    build_routes(warm)
    assert _served_building(warm, monkeypatch) == []
