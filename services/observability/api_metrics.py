"""The API's part: ``GET /metrics`` (Prometheus text format) and request ids in its logs."""

from __future__ import annotations

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from corral.services.observability.exposition import scrape_registry
from corral.services.observability.logs import RequestContextMiddleware
from corral.services.observability.state_metrics import StateCollector
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings


def install(app: FastAPI, settings: Settings, deps: Deps) -> None:
    """Add ``GET /metrics`` and the log-context middleware to the API ``app``."""
    registry = scrape_registry(settings, StateCollector(deps))

    # Open like every read: the state it shows is what GET /v1/requests shows, and Prometheus
    # scrapes without a token.
    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RequestContextMiddleware)
