"""The web console's pages, served by the API under ``/console`` behind the API's token.

Read views first: requests (attempts on a timeline with each failover reason, runs and cost,
a live log tail), instances, machine pools and Determined pools, clusters (nodes, demand, the
autoscaler's last decision), blocked scopes with their expiry, cost per hour by cloud and
market. Two actions, each a form post with the console's form key: cancel a request and
terminate an instance. Every page reads the store through the same functions the JSON API
answers from (services/api), so the console and ``corral status`` never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from corral.services.api import clusters as cluster_routes
from corral.services.api import pool_routes
from corral.services.api.console import auth
from corral.services.api.console.html import (
    LOG_TAIL_SCRIPT,
    ago,
    compact,
    esc,
    fields,
    link,
    page,
    records,
    state,
    table,
    usd,
    when,
)
from corral.services.runtime import requests as runtime_requests
from corral.services.runtime import why as whys
from corral.services.runtime.deps import Deps
from corral.shared.lifecycle import InstanceState

router = APIRouter(prefix="/console", include_in_schema=False)
pages = APIRouter(
    prefix="/console", include_in_schema=False, dependencies=[Depends(auth.require_session)]
)

LIVE = (
    InstanceState.REQUESTED,
    InstanceState.RUNNING,
    InstanceState.TERMINATING,
    InstanceState.LOST,
)
LOG_TAIL_BYTES = 64_000


def _deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


def _html(title: str, body: str, active: str, refresh_s: int | None = None) -> HTMLResponse:
    return HTMLResponse(page(title, body, active, refresh_s))


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(raw).items()}


# ---- signing in -------------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, next: str = "/console/", failed: bool = False) -> HTMLResponse:
    auth.expected_token(request)  # 503 when the API has none
    note = '<p class="muted" id="failed">That token was not the API\'s.</p>' if failed else ""
    body = (
        f"{note}<p>The API token: <code>CORRAL_HOME/api-token</code> (written by "
        "<code>corral up</code>) or <code>CORRAL_API_TOKEN</code>.</p>"
        '<form method="post" action="/console/login">'
        f'<input type="hidden" name="next" value="{esc(next)}">'
        '<input type="password" name="token" id="token" size="50" autofocus> '
        '<button type="submit" id="sign-in">Sign in</button></form>'
    )
    return _html("Sign in", body, "")


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    target = form.get("next") or "/console/"
    if not target.startswith("/console"):
        target = "/console/"  # never a redirect off this site
    if not auth.check_password(request, form.get("token", "")):
        return RedirectResponse(f"/console/login?failed=1&next={quote(target)}", 303)
    response = RedirectResponse(target, 303)
    response.set_cookie(
        auth.COOKIE,
        auth.open_session(request),
        max_age=auth.SESSION_MAX_AGE_S,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(request: Request) -> Response:
    auth.close_session(request)  # the cookie is worth nothing after, even if it was copied
    response = RedirectResponse("/console/login", 303)
    response.delete_cookie(auth.COOKIE, path="/console")
    return response


# ---- overview, requests -----------------------------------------------------------------------


@pages.get("/", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    deps = _deps(request)
    reqs = deps.store.list_requests(limit=1000)
    by_state: dict[str, int] = defaultdict(int)
    for r in reqs:
        by_state[r.state.value] += 1
    live = deps.store.list_instances(states=list(LIVE))
    hourly = sum(i.price_usd_per_hour or 0.0 for i in live)
    body = (
        "<h2>Requests by state</h2>"
        + table(
            ("state", "requests"),
            ((state(s), str(n)) for s, n in sorted(by_state.items())),
            id="by-state",
        )
        + f'<p id="summary">{len(live)} live instance{"s" * (len(live) != 1)}, '
        f"{usd(hourly, 2)} per hour. "
        + link("/console/cost", "Cost by cloud and market")
        + "</p><h2>Newest requests</h2>"
        + _request_table(deps, reqs[:10])
    )
    return _html("Overview", body, "/console/", refresh_s=10)


def _request_table(deps: Deps, reqs: list[Any], id: str = "requests") -> str:
    rows = []
    for r in reqs:
        last = r.attempts[-1] if r.attempts else None
        where = f"{last.cloud}/{last.zone} {last.instance_type}" if last else "-"
        rows.append((
            link(f"/console/requests/{quote(r.id)}", r.id), esc(r.task.get("name")),
            state(r.state.value), str(len(r.attempts)), str(len(r.instance_ids)), esc(where),
            when(r.created_at), esc(r.error),
        ))  # fmt: skip
    headers = ("id", "name", "state", "attempts", "instances", "last tried", "created", "error")
    return table(headers, rows, id=id)


@pages.get("/requests", response_class=HTMLResponse)
def requests_page(request: Request, state: str | None = None) -> HTMLResponse:
    deps = _deps(request)
    reqs = deps.store.list_requests(limit=500)
    if state:
        reqs = [r for r in reqs if r.state.value == state.upper()]
    return _html("Requests", _request_table(deps, reqs), "/console/requests", refresh_s=10)


def _timeline(attempts: list[Any], now: float) -> str:
    """Each attempt as a bar on one time axis, then the same attempts as rows with the
    failover reason each failure gave."""
    if not attempts:
        return '<p class="muted">No attempt yet.</p>'
    t0 = min(a.started_at for a in attempts)
    t1 = max((a.ended_at or now) for a in attempts)
    span = max(t1 - t0, 1e-3)
    bars, rows = [], []
    for n, a in enumerate(attempts, 1):
        left = (a.started_at - t0) / span * 100
        width = max(((a.ended_at or now) - a.started_at) / span * 100, 0.5)
        kind = "ok" if a.outcome == "ok" else "none" if a.outcome is None else "fail"
        label = f"{n}. {a.cloud}/{a.zone} {a.instance_type}: {a.outcome or 'running'}"
        bars.append(
            f'<div class="tl" title="{esc(label)}"><span class="o-{kind}" '
            f'style="left:{left:.2f}%;width:{min(width, 100 - left):.2f}%"></span></div>'
        )
        took = f"{(a.ended_at or now) - a.started_at:.1f}s"
        rows.append((
            str(n), esc(f"{a.cloud}/{a.region}/{a.zone}"), esc(a.instance_type), esc(a.market),
            when(a.started_at), took, state(a.outcome or "running"), esc(a.error),
        ))  # fmt: skip
    headers = ("#", "where", "type", "market", "started", "took", "outcome", "failover reason")
    return (
        f'<div id="timeline">{"".join(bars)}</div>'
        f'<p class="muted">{span:.1f}s from the first attempt to the last one\'s end.</p>'
        + table(headers, rows, id="attempts")
    )


@pages.get("/requests/{request_id}", response_class=HTMLResponse)
def request_page(request: Request, request_id: str) -> HTMLResponse:
    deps = _deps(request)
    req = deps.store.get_request(request_id)
    view = runtime_requests.public_view(deps, request_id)
    if req is None or view is None:
        raise HTTPException(404, f"no launch request {request_id!r}")
    now = deps.now()
    key = auth.form_key(request)
    actions = ""
    if not req.is_terminal:
        actions = (
            f'<form class="inline" method="post" action="/console/requests/{quote(req.id)}/cancel">'
            f'<input type="hidden" name="key" value="{key}">'
            '<button id="cancel" type="submit">Cancel this request</button></form>'
        )
    said = whys.why(deps, request_id)
    runs = [
        (esc(f"{r['cloud']}/{r['zone']}"), esc(r["instance_type"]), str(r["nodes"]),
         when(r["started_at"]), when(r["ended_at"]), esc(r["outcome"]), usd(r["cost_usd"]))
        for r in view.get("runs", [])
    ]  # fmt: skip
    instances = [
        (esc(i["id"]), state(i["state"]), esc(f"{i['cloud']}/{i['zone']}"),
         esc(i["instance_type"]), esc(i["market"]), usd(i.get("price_usd_per_hour"), 3),
         _terminate_form(req.id, i["id"], key) if i["state"] in LIVE else "")
        for i in view["instances"]
    ]  # fmt: skip
    events = [(when(e.at), esc(e.text)) for e in deps.store.events(request_id)[-50:]]
    history = [(when(t.at), esc(t.from_state), esc(t.to_state), esc(t.reason)) for t in req.history]
    body = (
        f'<p id="state">{state(req.state.value)} {esc(req.task.get("name"))} '
        f'<span class="muted">created {ago(req.created_at, now)}</span> {actions}</p>'
        f'<p id="why"><b>Why:</b> {esc(said.get("reason"))} ({esc(said.get("code"))})</p>'
        + (f'<p id="error"><b>Error:</b> {esc(req.error)}</p>' if req.error else "")
        + "<h2>Attempts</h2>" + _timeline(req.attempts, now)
        + f'<h2>Runs</h2><p id="cost">Cost over every run: {usd(view.get("cost_usd"))}</p>'
        + table(("where", "type", "nodes", "started", "ended", "outcome", "cost"), runs, id="runs")
        + "<h2>Instances</h2>"
        + table(("id", "state", "where", "type", "market", "$/h", ""), instances, id="instances")
        + "<h2>Log tail</h2>"
        f'<pre class="log" id="log" data-src="/console/requests/{quote(req.id)}/log.txt"></pre>'
        + LOG_TAIL_SCRIPT
        + "<h2>Events</h2>" + table(("at", "event"), events, id="events")
        + "<h2>History</h2>" + table(("at", "from", "to", "reason"), history, id="history")
    )  # fmt: skip
    return _html(f"Request {req.id}", body, "/console/requests")


def _terminate_form(request_id: str, instance_id: str, key: str) -> str:
    action = f"/console/requests/{quote(request_id)}/instances/{quote(instance_id)}/terminate"
    return (
        f'<form class="inline" method="post" action="{action}">'
        f'<input type="hidden" name="key" value="{key}">'
        f'<button type="submit" class="terminate">Terminate</button></form>'
    )


@pages.get("/requests/{request_id}/log.txt", response_class=PlainTextResponse)
def request_log(request: Request, request_id: str) -> PlainTextResponse:
    try:
        text = runtime_requests.read_logs(_deps(request), request_id, tail_bytes=LOG_TAIL_BYTES)
    except runtime_requests.RequestNotFound:
        raise HTTPException(404, f"no launch request {request_id!r}") from None
    return PlainTextResponse(text)


@pages.post("/requests/{request_id}/cancel")
async def cancel(request: Request, request_id: str) -> Response:
    auth.check_form_key(request, (await _form(request)).get("key", ""))
    try:
        runtime_requests.cancel(_deps(request), request_id)
    except runtime_requests.RequestNotFound:
        raise HTTPException(404, f"no launch request {request_id!r}") from None
    return RedirectResponse(f"/console/requests/{quote(request_id)}", 303)


@pages.post("/requests/{request_id}/instances/{instance_id}/terminate")
async def terminate(request: Request, request_id: str, instance_id: str) -> Response:
    auth.check_form_key(request, (await _form(request)).get("key", ""))
    deps = _deps(request)
    inst = deps.store.get_instance(instance_id)
    if inst is None or inst.request_id != request_id:
        raise HTTPException(404, f"request {request_id!r} has no instance {instance_id!r}")
    runtime_requests.cancel(deps, request_id, instance_id=instance_id)
    return RedirectResponse(f"/console/requests/{quote(request_id)}", 303)


# ---- instances, pools, clusters, blocked scopes, cost -------------------------------------------


@pages.get("/instances", response_class=HTMLResponse)
def instances_page(request: Request) -> HTMLResponse:
    rows = [
        (esc(i.id), link(f"/console/requests/{quote(i.request_id)}", i.request_id),
         state(i.state.value), esc(f"{i.cloud}/{i.zone}"), esc(i.instance_type), esc(i.market),
         usd(i.price_usd_per_hour, 3), esc(i.provider_id))
        for i in _deps(request).store.list_instances()
    ]  # fmt: skip
    headers = ("id", "request", "state", "where", "type", "market", "$/h", "provider id")
    return _html("Instances", table(headers, rows, id="instances"), "/console/instances", 10)


@pages.get("/pools", response_class=HTMLResponse)
def pools_page(request: Request) -> HTMLResponse:
    deps = _deps(request)
    views = pool_routes.list_pools(deps)["pools"]
    parts = [
        table(
            ("pool", "kind", "cloud", "file", "applied"),
            (
                (
                    link(f"/console/pools/{quote(v['name'])}", v["name"]),
                    esc(v["kind"]),
                    esc(v.get("cloud")),
                    esc(v.get("file")),
                    when(v.get("applied_at")),
                )
                for v in views
            ),
            id="pools",
        )
    ]
    for v in views:
        parts.append(_pool_detail(v))
    return _html("Pools", "".join(parts), "/console/pools", 10)


@pages.get("/pools/{name}", response_class=HTMLResponse)
def pool_page(request: Request, name: str) -> HTMLResponse:
    view = pool_routes.get_pool(name, _deps(request))
    return _html(f"Pool {name}", fields(view) + _pool_detail(view), "/console/pools", 10)


def _pool_detail(view: dict[str, Any]) -> str:
    """A pool's partitions (held / size), machines and workloads (who waits and why)."""
    out = [f'<h2 id="pool-{esc(view["name"])}">{esc(view["name"])} ({esc(view["kind"])})</h2>']
    for key, value in view.items():
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            out.append(f"<h3>{esc(key.replace('_', ' '))}</h3>" + records(value))
        elif isinstance(value, dict) and value:
            out.append(f"<h3>{esc(key.replace('_', ' '))}</h3>")
            out.append(table(("name", "value"), ((esc(k), compact(v)) for k, v in value.items())))
        elif isinstance(value, list) and value:
            out.append(f"<h3>{esc(key.replace('_', ' '))}</h3><p>{compact(value)}</p>")
    return "".join(out)


@pages.get("/clusters", response_class=HTMLResponse)
def clusters_page(request: Request) -> HTMLResponse:
    found = cluster_routes.list_clusters(_deps(request))["clusters"]
    rows = [
        (link(f"/console/clusters/{quote(c['name'])}", c["name"]), state(c["state"]),
         esc(c.get("cloud")), str(c["nodes"]), compact(c.get("by_type")), compact(c.get("demand")))
        for c in found
    ]  # fmt: skip
    headers = ("cluster", "state", "cloud", "nodes", "by type", "demand")
    return _html("Clusters", table(headers, rows, id="clusters"), "/console/clusters", 10)


@pages.get("/clusters/{name}", response_class=HTMLResponse)
def cluster_page(request: Request, name: str) -> HTMLResponse:
    view = cluster_routes.get_cluster(name, _deps(request))
    decision = view.get("last_decision") or {}
    body = (
        fields(view)
        + "<h2>Nodes</h2>" + records(view.get("nodes") or [], id="nodes")
        + f'<h2>Demand</h2><p id="demand">{compact(view.get("demand"))}</p>'
        + "<h2>The autoscaler's last decision</h2>"
        + (fields(decision, list(decision)) if decision else '<p class="muted">none yet</p>')
        + "<h2>Cooldowns</h2>" + f"<p>{compact(view.get('cooldowns'))}</p>"
    )  # fmt: skip
    return _html(f"Cluster {name}", f'<div id="cluster">{body}</div>', "/console/clusters", 10)


@pages.get("/blocked", response_class=HTMLResponse)
def blocked_page(request: Request) -> HTMLResponse:
    deps = _deps(request)
    now = deps.now()
    rows = [
        (
            esc(b.block.kind),
            esc(str(b.block)),
            esc(b.outcome),
            esc(b.reason),
            when(b.until),
            f"{b.until - now:.0f}s",
        )
        for b in sorted(deps.blocks.active(now), key=lambda b: b.until)
    ]
    # kind: what the block is about (capacity, shortfall, quota, region, instance_type, cloud)
    headers = ("kind", "scope", "outcome", "reason", "until", "left")
    note = '<p class="muted">Scopes a failure blocked: every worker skips them until then.</p>'
    return _html("Blocked scopes", note + table(headers, rows, id="blocked"), "/console/blocked", 5)


@pages.get("/cost", response_class=HTMLResponse)
def cost_page(request: Request) -> HTMLResponse:
    deps = _deps(request)
    live = deps.store.list_instances(states=list(LIVE))
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i in live:
        cell = sums[(i.cloud, i.market)]
        cell[0] += 1
        cell[1] += i.price_usd_per_hour or 0.0
    rows = [
        (esc(cloud), esc(market), f"{n:.0f}", usd(per_h, 3))
        for (cloud, market), (n, per_h) in sorted(sums.items())
    ]
    total = sum(v[1] for v in sums.values())
    rows.append(("<b>total</b>", "", str(len(live)), f"<b>{usd(total, 3)}</b>"))
    headers = ("cloud", "market", "live instances", "cost per hour")
    return _html("Cost per hour", table(headers, rows, id="cost"), "/console/cost", 10)
