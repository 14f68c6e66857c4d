"""A replicated service's endpoint: the API relays each request to one of its ready replicas.

``ANY /v1/services/{request_id}/{path}`` is SkyServe's load balancer in Corral: the service's
request holds its ready replicas as beat's serving pass last saw them (``serving.ready``,
services/runtime/serving.py); this process keeps one :class:`~corral.shared.serve.balance.
Balancer` per service (the round-robin turn, the requests in flight per replica) and sends the
request, its method, query, headers and body, to the replica the service's
``load_balancing_policy`` picks. A replica that does not answer (a connection refused, a
timeout before any answer) is skipped and the next one tried; with none left, 503.

Each request relayed to a service with ``target_qps_per_replica`` is counted in Redis (its QPS
autoscaling, shared/serve/autoscale.py). It needs a token that may read the service (as
``GET /v1/requests/{id}`` does); the token is not passed on to the replica. Every answer
names the replica it came from (``X-Corral-Replica``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from corral.services.api.auth import Principal, caller
from corral.services.api.console.auth import COOKIE as CONSOLE_COOKIE
from corral.services.api.routes import SERVE_PATH, get_deps, visible_request
from corral.services.runtime.deps import Deps
from corral.services.state.serving import ServiceIndex
from corral.shared.records import LaunchRequest
from corral.shared.serve.balance import Backend, Balancer
from corral.shared.serve.spec import ServiceSpec, parse_service

router = APIRouter()

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 300.0  # a model's answer can take minutes
# Not passed on: hop-by-hop headers (RFC 9110 7.6.1), the caller's Corral token, and what the
# relay sets itself.
_DROPPED = frozenset(
    {
        "authorization",
        "connection",
        "content-length",
        "host",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def _passed_on(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The caller's headers the replica gets: none of Corral's credentials (the token, the
    console's session cookie; the replica is the user's code) nor hop-by-hop headers."""
    out = []
    for name, value in headers:
        low = name.lower()
        if low in _DROPPED:
            continue
        if low == "cookie":
            kept = [c for c in value.split(";") if c.strip().split("=", 1)[0] != CONSOLE_COOKIE]
            if not kept:
                continue
            value = ";".join(kept).strip()
        out.append((name, value))
    return out


def _answer_headers(answer: httpx.Response, backend: Backend) -> list[tuple[str, str]]:
    """The replica's headers as the caller gets them: no hop-by-hop ones, no cookie set in
    the name of the console's session (the answer comes from the API's own address), and the
    replica that answered."""
    out = []
    for name, value in answer.headers.multi_items():
        low = name.lower()
        if low in _DROPPED:
            continue
        if low == "set-cookie" and value.split("=", 1)[0].strip() == CONSOLE_COOKIE:
            continue
        out.append((name, value))
    return [*out, ("X-Corral-Replica", str(backend.replica_id))]


def _balancer(request: Request, service: LaunchRequest, spec: ServiceSpec) -> Balancer:
    state = request.app.state
    balancers: dict[str, Balancer] | None = getattr(state, "balancers", None)
    if balancers is None:  # one per service in this process: its turn and loads are its own
        balancers = state.balancers = {}
    found = balancers.get(service.id)
    if found is None or found.policy != spec.load_balancing_policy:
        found = balancers[service.id] = Balancer(policy=spec.load_balancing_policy, spec=spec)
    ready = service.serving.ready if service.serving is not None else []
    found.set_ready([Backend(r.replica, r.url, r.accelerator) for r in ready])
    return found


def _client(request: Request) -> httpx.AsyncClient:
    client: httpx.AsyncClient | None = getattr(request.app.state, "serve_client", None)
    if client is None:
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        # trust_env off: a replica is reached directly, never through a proxy the env names.
        client = httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False)
        request.app.state.serve_client = client
    return client


def _service(deps: Deps, who: Principal, request_id: str) -> tuple[LaunchRequest, ServiceSpec]:
    """The service the caller may reach, its request counted for QPS autoscaling."""
    req = visible_request(deps, who, request_id)
    spec = parse_service(req.task.get("service"))
    if spec is None or not spec.replicated:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"request {request_id!r} is not a service with replicas (service.replicas)",
        )
    if spec.policy.target_qps_per_replica is not None:
        ServiceIndex(deps.redis, prefix=deps.settings.prefix).count_request(req.id, deps.now())
    return req, spec


@router.api_route(
    SERVE_PATH + "/{request_id}/{path:path}",
    methods=METHODS,
    summary="A replicated service's endpoint (its load balancer)",
)
async def relay(
    request_id: str,
    path: str,
    request: Request,
    deps: Deps = Depends(get_deps),
    who: Principal = Depends(caller),
) -> Response:
    service, spec = await run_in_threadpool(_service, deps, who, request_id)
    balancer = _balancer(request, service, spec)
    body = await request.body()
    headers = _passed_on(request.headers.items())
    client = _client(request)
    tried: set[str] = set()
    while (backend := balancer.pick(skip=frozenset(tried))) is not None:
        url = f"{backend.url}/{path}"
        sent = client.build_request(
            request.method, url, params=request.query_params, headers=headers, content=body
        )
        try:
            answer = await client.send(sent, stream=True)
        except (
            httpx.ConnectError,
            httpx.ConnectTimeout,
            httpx.ReadTimeout,
            httpx.RemoteProtocolError,
        ):
            balancer.done(backend)
            tried.add(backend.url)
            continue
        relayed = StreamingResponse(
            _body(answer),
            status_code=answer.status_code,
            background=BackgroundTask(_finish, answer, balancer, backend),
        )
        # Raw: a header may repeat (Set-Cookie), which a mapping would fold.
        relayed.raw_headers.extend(
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in _answer_headers(answer, backend)
        )
        return relayed
    ready = len(balancer.ready)
    raise HTTPException(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        f"no ready replica answered (ready: {ready}); the service's replicas are in "
        f"`corral status {request_id}`",
        headers={"Retry-After": "2"},
    )


async def _body(answer: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in answer.aiter_raw():
        yield chunk


async def _finish(answer: httpx.Response, balancer: Balancer, backend: Backend) -> None:
    with contextlib.suppress(httpx.HTTPError):
        await answer.aclose()
    balancer.done(backend)


async def close(state: Any) -> None:
    """Close the relay's connections (the API's shutdown)."""
    client: httpx.AsyncClient | None = getattr(state, "serve_client", None)
    if client is not None:
        await client.aclose()
