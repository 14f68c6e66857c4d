"""The HTTP API's application: ``create_app(settings)`` builds one FastAPI app.

Everything it needs comes from the settings it is given (tests pass their own; the process
started by ``corral run api`` uses ``get_settings()``): the Redis URL, the key prefix and the
admin token, which every route but ``/healthz`` and the node routes requires. Redis being
down is a 503 (with ``Retry-After``), never a traceback in a 500; every Redis call first
retries for ``redis_patience_s`` (:mod:`corral.services.queues.redis_conn`), so a Redis restart
or failover shorter than that fails no request. Bodies over ``api_max_body_bytes`` are refused
with 413 (:mod:`corral.services.api.limits`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
import redis
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError

from corral.services.api.auth import caller, configured_token, require_admin
from corral.services.api.bundles import BUNDLES_PATH
from corral.services.api.bundles import router as bundles_router
from corral.services.api.clusters import router as clusters_router
from corral.services.api.console.infra import pages as console_infra
from corral.services.api.console.request_page import pages as console_request
from corral.services.api.console.routes import pages as console_pages
from corral.services.api.console.routes import router as console_router
from corral.services.api.costs import router as costs_router
from corral.services.api.docs import console as console_docs
from corral.services.api.docs import router as docs_router
from corral.services.api.execs import router as execs_router
from corral.services.api.jobs import router as jobs_router
from corral.services.api.limits import BodyLimit
from corral.services.api.nodes import router as nodes_router
from corral.services.api.pool_routes import router as pools_router
from corral.services.api.pool_routes import why_router
from corral.services.api.routes import health_router, router, submit_router
from corral.services.api.serve import close as close_relay
from corral.services.api.serve import router as serve_router
from corral.services.api.users import router as users_router
from corral.services.observability.api_metrics import install as install_observability
from corral.services.observability.events import EventMetrics
from corral.services.queues import dispatch
from corral.services.runtime import planning
from corral.services.runtime.deps import Deps
from corral.services.runtime.heap import freeze_loaded
from corral.services.settings import Settings, get_settings
from corral.services.state.outage import api_pulse_interval_s

API_VERSION = "1"


def create_app(settings: Settings | None = None, *, own_process: bool = False) -> FastAPI:
    """The API over the store at ``settings.redis_url`` (required). ``own_process``: the app
    is the process's whole life (``corral run api``): what its start loaded is frozen once
    warmed up (:mod:`corral.services.runtime.heap`), never in a process that makes many apps."""
    settings = settings or get_settings()
    if not settings.redis_url:
        raise RuntimeError("CORRAL_REDIS_URL is not set (start the system with `corral up`)")
    deps = Deps(settings, store_listeners=(EventMetrics(),))

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Load the clouds' SDKs and credentials (and the rest _warm_up names) while the API
        # starts, not in its first submit (seconds on a busy machine).
        threading.Thread(
            target=_warm_up, args=(deps, _app, own_process), name="warm-up", daemon=True
        ).start()
        # The routes that run in threads (a submit among them) need anyio's asyncio backend,
        # imported by its first thread call: about 0.1 s of CPU, here rather than in the
        # first submit (tests/unit/test_api_warm_up.py).
        await anyio.to_thread.run_sync(int)
        stop = threading.Event()
        pulse = threading.Thread(target=_pulse, args=(deps, stop), name="pulse", daemon=True)
        pulse.start()
        yield
        stop.set()
        pulse.join(timeout=5)
        await close_relay(_app.state)
        if "redis" in deps.__dict__:  # only close a client that was opened
            deps.redis.close()

    app = FastAPI(
        title="Corral API",
        version=API_VERSION,
        description="Launch requests for compute, their progress, instances and logs.",
        lifespan=lifespan,
        # Served behind a token by services/api/docs.py, not open as FastAPI serves them.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.deps = deps
    app.state.api_token = configured_token(settings)
    # Reads need a token as writes do: machines reach this API too (their agents' node
    # routes), and a request's view holds its task's envs. Only /healthz and /metrics (counts
    # and gauges, no secrets; what Prometheus scrapes) are open; /openapi.json and the docs
    # page need a token too (services/api/docs.py). A user's role and projects
    # decide the rest (services/api/auth.py): requests are filtered per route; pools and
    # clusters are the admins'.
    signed = [Depends(caller)]
    admins = [Depends(require_admin)]
    # The busiest route first: each request is matched against the routes in turn.
    app.include_router(submit_router)  # its route checks the token itself, as `signed` does
    app.include_router(health_router)
    app.include_router(router, dependencies=signed)
    app.include_router(why_router, dependencies=signed)
    app.include_router(users_router, dependencies=signed)
    app.include_router(clusters_router, dependencies=admins)
    app.include_router(pools_router, dependencies=admins)
    app.include_router(bundles_router, dependencies=signed)
    app.include_router(execs_router, dependencies=signed)
    app.include_router(jobs_router, dependencies=signed)
    app.include_router(costs_router, dependencies=signed)
    app.include_router(serve_router)  # a service's endpoint: its route checks the token
    app.include_router(nodes_router)  # a node token, each route acting on its own node
    # The web console: the first admin's token only, as a header or a session cookie from
    # /console/login (it shows every project; members and viewers use the API and CLI).
    app.include_router(console_router)
    app.include_router(console_pages)
    app.include_router(console_request)
    app.include_router(console_infra)
    app.include_router(docs_router)
    app.include_router(console_docs)
    install_observability(app, settings, deps)  # GET /metrics; request ids in the logs
    app.add_exception_handler(redis.exceptions.ConnectionError, _store_unreachable)
    app.add_exception_handler(redis.exceptions.TimeoutError, _store_unreachable)
    app.add_exception_handler(OperationalError, _store_unreachable)
    app.add_middleware(
        BodyLimit,
        max_body_bytes=settings.api_max_body_bytes,
        larger={BUNDLES_PATH: settings.bundle_max_bytes},
    )
    return app


def _warm_up(deps: Deps, app: FastAPI | None = None, freeze: bool = False) -> None:
    """The clouds' SDKs and credentials, the catalog, the publishing side with the queues a
    submit sends to, and the routes' request handling, made ready before the first submit
    needs them; ``freeze``: then frozen (:mod:`corral.services.runtime.heap`)."""
    try:
        if app is not None:
            build_routes(app)
        planning.warm_up(deps)
        clouds = deps.launchable_clouds()
        dispatch.warm_up(dispatch.sending_queues(clouds), deps.settings)
    except Exception:  # only a warm-up: the first request builds whatever is missing
        logging.getLogger("corral.api").exception("warm-up failed")
    if freeze:  # what start-up and the warm-up loaded lives as long as the API
        freeze_loaded(collect=True)


def build_routes(app: FastAPI) -> None:
    """FastAPI builds an included router's routes for serving (each endpoint's dependencies
    read from its signature) when the first request reaches that router: about 13 ms of CPU
    in the API's first submit, 1-50 ms for the other routers. Built here instead, at start.
    (Its routers offer it as ``effective_candidates``; a FastAPI without it builds nothing
    here and serves as it always does.)"""
    todo = list(app.router.routes)
    while todo:
        build = getattr(todo.pop(), "effective_candidates", None)
        if callable(build):
            todo.extend(build())  # an included router's own included routers, built in turn


def _pulse(deps: Deps, stop: threading.Event) -> None:
    """The API's pulse: cloud machines report through it, so while it is away their silence
    is not theirs (:meth:`corral.services.state.outage.OutageBook.api_heard_since`)."""
    book = deps.outage
    interval = api_pulse_interval_s(book)
    while not stop.is_set():
        try:
            book.pulse_api()
        except redis.exceptions.RedisError as exc:  # Redis away: its own outage rule holds
            logging.getLogger("corral.api").debug("no pulse: %s", exc)
        stop.wait(interval)


async def _store_unreachable(request: Request, exc: Exception) -> JSONResponse:
    # The answer names the kind of failure only: a Redis URL may carry a password. The log
    # keeps the whole story (redis-py's and kombu's messages name host and port, never it).
    logging.getLogger("corral.api").warning(
        "%s %s: Redis unreachable after the retries",
        request.method,
        request.url.path,
        exc_info=exc,
    )
    return JSONResponse(
        status_code=503,
        content={"detail": f"the store (Redis) is unreachable: {type(exc).__name__}"},
        headers={"Retry-After": "1"},
    )
