"""The API's part: ``GET /metrics`` (Prometheus text format) and request ids in its logs."""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Header, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from corral.services.observability.exposition import scrape_registry
from corral.services.observability.logs import RequestContextMiddleware
from corral.services.observability.state_metrics import StateCollector
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings


def install(app: FastAPI, settings: Settings, deps: Deps) -> None:
    """Add ``GET /metrics`` and the log-context middleware to the API ``app``."""
    registry = scrape_registry(settings, StateCollector(deps))

    # Counts and gauges (no ids, envs, users or projects), read at most once per
    # SCRAPE_REUSE_S however often it is asked. Open unless CORRAL_METRICS_TOKEN is set: then
    # only that token (a scrape token, never a user's: Prometheus holds it) is answered.
    expected = settings.metrics_token.get_secret_value() if settings.metrics_token else ""

    @app.get("/metrics", include_in_schema=False)
    def metrics(authorization: str = Header("")) -> Response:
        if expected:
            scheme, _, given = authorization.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), expected.encode()
            ):
                return Response(
                    "missing or wrong metrics token (CORRAL_METRICS_TOKEN)",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RequestContextMiddleware)
