"""The web console's pages, served by the API under ``/console``, for every user.

Each user signs in with its own token (console/auth.py) and sees what the API would show it:
an admin every project's requests (with a project filter), a member or viewer its projects'
only; another project's request answers 404, as an unknown id. Read views: requests (a list
with user, project, GPUs, duration and cost, filtered, sorted and paged on the server; a
request's attempts on a timeline with each failover reason, runs and cost, a live log tail per
node); the infrastructure pages are in console/infra.py. Two actions, each a form post with
the console's form key and refused to a viewer: cancel a request and terminate an instance.
Every page reads the store through the same functions the JSON API answers from
(services/api, corral.shared.costs), so the console and ``corral status`` never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from corral.services.api.auth import Principal, writer
from corral.services.api.console import auth
from corral.services.api.console.html import (
    duration,
    esc,
    link,
    page,
    state,
    table,
    usd,
    when,
)
from corral.services.runtime import requests as runtime_requests
from corral.services.runtime.deps import Deps
from corral.shared.costs import cost_line
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.records import LaunchRequest

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
MAX_LISTED = 5000  # the requests a list page filters and sorts over
SORTS = ("created", "name", "user", "project", "state", "gpus", "duration", "cost")


def _deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


def _html(
    request: Request, title: str, body: str, active: str, refresh_s: int | None = None
) -> HTMLResponse:
    who = getattr(request.state, "who", None)
    return HTMLResponse(page(title, body, active, refresh_s, who))


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(raw).items()}


def visible_requests(
    deps: Deps,
    who: Principal,
    limit: int,
    state: RequestState | None = None,
    project: str | None = None,
) -> list[LaunchRequest]:
    """The requests ``who`` may see (of ``project`` only, if given), newest first."""
    if project is not None:
        if not who.sees(project):
            return []
        return deps.store.list_requests(state, limit, projects=[project])
    projects = None if who.is_admin else list(who.projects)
    return deps.store.list_requests(state, limit, projects=projects)


def seen_request(request: Request, request_id: str) -> LaunchRequest:
    """The request, if the caller may see it; 404 otherwise (as an unknown id)."""
    req = _deps(request).store.get_request(request_id)
    if req is None or not auth.who(request).sees_request(req):
        raise HTTPException(404, f"no launch request {request_id!r}")
    return req


# ---- signing in -------------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, next: str = "/console/", failed: bool = False) -> HTMLResponse:
    auth.expected_token(request)  # 503 when the API has none
    note = (
        '<p class="muted" id="failed">That token was not a user\'s (or it was revoked).</p>'
        if failed
        else ""
    )
    body = (
        f"{note}<p>Your API token: the one <code>corral users add</code> printed for you, "
        "or the first admin's (<code>CORRAL_HOME/api-token</code>, written by "
        "<code>corral up</code>).</p>"
        '<form method="post" action="/console/login">'
        f'<input type="hidden" name="next" value="{esc(next)}">'
        '<input type="password" name="token" id="token" size="50" autofocus> '
        '<button type="submit" id="sign-in">Sign in</button></form>'
    )
    return _html(request, "Sign in", body, "")


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    target = form.get("next") or "/console/"
    if not target.startswith("/console") or target.startswith("/console/login"):
        target = "/console/"  # never a redirect off this site
    who = auth.sign_in(request, form.get("token", ""))
    if who is None:
        return RedirectResponse(f"/console/login?failed=1&next={quote(target)}", 303)
    response = RedirectResponse(target, 303)
    response.set_cookie(
        auth.COOKIE,
        auth.open_session(request, who),
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
    deps, who = _deps(request), auth.who(request)
    reqs = visible_requests(deps, who, 1000)
    by_state: dict[str, int] = defaultdict(int)
    for r in reqs:
        by_state[r.state.value] += 1
    seen = {r.id for r in reqs}
    live = [
        i
        for i in deps.store.list_instances(states=list(LIVE))
        if who.is_admin or i.request_id in seen
    ]
    hourly = sum(i.price_usd_per_hour or 0.0 for i in live)
    body = (
        '<div id="live-overview" data-live><h2>Requests by state</h2>'
        + table(
            ("state", "requests"),
            ((state(s), str(n)) for s, n in sorted(by_state.items())),
            id="by-state",
        )
        + f'<p id="summary">{len(live)} live instance{"s" * (len(live) != 1)}, '
        f"{usd(hourly, 2)} per hour. "
        + link("/console/cost", "Cost by cloud and market, spend over time")
        + "</p><h2>Newest requests</h2>"
        + _request_table(deps, reqs[:10], deps.now())
        + "</div>"
    )
    return _html(request, "Overview", body, "/console/", refresh_s=5)


def _request_table(deps: Deps, reqs: list[LaunchRequest], now: float, id: str = "requests") -> str:
    rows = []
    for r in reqs:
        line = cost_line(r, deps.store.list_instances(request_id=r.id), now)
        last = r.attempts[-1] if r.attempts else None
        where = f"{last.cloud}/{last.zone} {last.instance_type}" if last else "-"
        rows.append((
            link(f"/console/requests/{quote(r.id)}", r.id), esc(r.task.get("name")),
            esc(r.user), esc(r.project), state(r.state.value), str(r.gpus),
            str(len(r.attempts)), esc(where), when(r.created_at),
            duration(line.duration_s(now)), usd(line.cost_usd), esc(r.error),
        ))  # fmt: skip
    headers = ("id", "name", "user", "project", "state", "GPUs", "attempts", "last tried",
               "created", "duration", "cost", "error")  # fmt: skip
    return table(headers, rows, id=id)


def _sort_key(deps: Deps, sort: str, now: float) -> Any:
    if sort == "created":
        return lambda r: (r.created_at, r.id)
    if sort in ("duration", "cost"):

        def spend(r: LaunchRequest) -> tuple[float, str]:
            line = cost_line(r, deps.store.list_instances(request_id=r.id), now)
            value = line.duration_s(now) if sort == "duration" else (line.cost_usd or 0.0)
            return (value, r.id)

        return spend
    if sort == "gpus":
        return lambda r: (r.gpus, r.id)
    if sort == "state":
        return lambda r: (r.state.value, r.id)
    if sort == "name":
        return lambda r: (str(r.task.get("name") or ""), r.id)
    return lambda r: (str(getattr(r, sort) or ""), r.id)  # user, project


@pages.get("/requests", response_class=HTMLResponse)
def requests_page(
    request: Request,
    state: str | None = Query(None, max_length=20),
    project: str | None = Query(None, max_length=63),
    user: str | None = Query(None, max_length=63),
    sort: str = Query("-created", pattern=r"^-?(" + "|".join(SORTS) + ")$"),
    page: int = Query(1, ge=1, le=10_000),
    per: int = Query(50, ge=1, le=500),
) -> HTMLResponse:
    """Requests filtered by state, project and user, sorted and paged on the server: every
    parameter is the page's URL, so a filtered page can be linked and refreshed."""
    deps, who = _deps(request), auth.who(request)
    now = deps.now()
    wanted = None
    if state:
        try:
            wanted = RequestState(state.upper())
        except ValueError:
            raise HTTPException(
                422, f"state {state!r}: expected one of {', '.join(s.value for s in RequestState)}"
            ) from None
    reqs = visible_requests(deps, who, MAX_LISTED, wanted, project or None)
    if user:
        reqs = [r for r in reqs if r.user == user]
    field = sort.lstrip("-")
    reqs.sort(key=_sort_key(deps, field, now), reverse=sort.startswith("-"))
    pages_n = max(1, -(-len(reqs) // per))
    page = min(page, pages_n)
    shown = reqs[(page - 1) * per : page * per]
    params = {"state": state or "", "project": project or "", "user": user or "",
              "sort": sort, "per": str(per)}  # fmt: skip

    def href(**changed: Any) -> str:
        merged = {**params, **{k: str(v) for k, v in changed.items()}}
        return "/console/requests?" + urlencode({k: v for k, v in merged.items() if v})

    body = (
        _filters(deps, who, state, project, user, sort, per)
        + '<div id="live-requests" data-live>'
        + f'<p id="count" class="muted">{len(reqs)} request{"s" * (len(reqs) != 1)}, '
        f"page {page} of {pages_n}. Sort: "
        + " ".join(
            link(href(sort=("" if sort == f"-{f}" else "-") + f, page=1), f)
            + (" ▼" if sort == f"-{f}" else " ▲" if sort == f else "")
            for f in SORTS
        )
        + "</p>"
        + _request_table(deps, shown, now)
        + _pager(page, pages_n, href)
        + "</div>"
    )
    return _html(request, "Requests", body, "/console/requests", refresh_s=5)


def _filters(
    deps: Deps,
    who: Principal,
    state: str | None,
    project: str | None,
    user: str | None,
    sort: str,
    per: int,
) -> str:
    def option(value: str, chosen: str | None) -> str:
        on = " selected" if (chosen or "").upper() == value.upper() else ""
        return f'<option value="{esc(value)}"{on}>{esc(value or "any")}</option>'

    states = "".join(option(s, state) for s in ["", *(s.value for s in RequestState)])
    names = [p.name for p in deps.access.list_projects()] if who.is_admin else list(who.projects)
    projects = "".join(option(p, project) for p in ["", *sorted(names)])
    return (
        '<form class="filters" id="filters" method="get" action="/console/requests">'
        f'<label>state <select name="state" id="f-state">{states}</select></label>'
        f'<label>project <select name="project" id="f-project">{projects}</select></label>'
        f'<label>user <input name="user" id="f-user" size="12" value="{esc(user or "")}">'
        f'</label><input type="hidden" name="sort" value="{esc(sort)}">'
        f'<input type="hidden" name="per" value="{per}">'
        '<button type="submit" id="f-apply">Filter</button> '
        + link("/console/requests", "clear")
        + "</form>"
    )


def _pager(page: int, pages_n: int, href: Any) -> str:
    if pages_n <= 1:
        return ""
    parts = []
    if page > 1:
        parts.append(f'<a id="prev" href="{esc(href(page=page - 1))}">previous</a>')
    parts.append(f"<span>page {page} of {pages_n}</span>")
    if page < pages_n:
        parts.append(f'<a id="next" href="{esc(href(page=page + 1))}">next</a>')
    return f'<p class="pager" id="pager">{"".join(parts)}</p>'


def _timeline(attempts: list[Any], now: float) -> str:
    """Each attempt as a labelled bar on one time axis (ticks in seconds from the first
    attempt), then the same attempts as rows with the failover reason each failure gave."""
    if not attempts:
        return '<p class="muted">No attempt yet.</p>'
    t0 = min(a.started_at for a in attempts)
    t1 = max((a.ended_at or now) for a in attempts)
    span = max(t1 - t0, 1e-3)
    width, label_w, row_h = 900, 260, 22
    plot = width - label_w - 10
    height = row_h * len(attempts) + 30
    svg = [
        f'<svg class="chart" id="timeline-axis" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="attempts over time">'
    ]
    for k in range(6):  # the axis: six ticks, seconds since the first attempt began
        x = label_w + plot * k / 5
        svg.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 18}" stroke="#e4e7ec"/>'
            f'<text class="tick" x="{x:.1f}" y="{height - 4}" text-anchor="middle">'
            f"+{span * k / 5:.1f}s</text>"
        )
    bars, rows = [], []
    for n, a in enumerate(attempts, 1):
        left = (a.started_at - t0) / span * 100
        w = max(((a.ended_at or now) - a.started_at) / span * 100, 0.5)
        kind = "ok" if a.outcome == "ok" else "none" if a.outcome is None else "fail"
        label = f"{n}. {a.cloud}/{a.zone} {a.instance_type}: {a.outcome or 'running'}"
        bars.append(
            f'<div class="tl" title="{esc(label)}"><span class="o-{kind}" '
            f'style="left:{left:.2f}%;width:{min(w, 100 - left):.2f}%"></span></div>'
        )
        y = (n - 1) * row_h + 4
        colour = {"ok": "#3a9d5d", "none": "#6b8fd6", "fail": "#d0573f"}[kind]
        svg.append(
            f'<text x="4" y="{y + 12}">{esc(label[:40])}</text>'
            f'<rect x="{label_w + plot * left / 100:.1f}" y="{y}" height="14" '
            f'width="{max(plot * min(w, 100 - left) / 100, 2):.1f}" fill="{colour}">'
            f"<title>{esc(label)}</title></rect>"
        )
        took = f"{(a.ended_at or now) - a.started_at:.1f}s"
        rows.append((
            str(n), esc(f"{a.cloud}/{a.region}/{a.zone}"), esc(a.instance_type), esc(a.market),
            when(a.started_at), took, state(a.outcome or "running"), esc(a.error),
        ))  # fmt: skip
    svg.append("</svg>")
    headers = ("#", "where", "type", "market", "started", "took", "outcome", "failover reason")
    return (
        "".join(svg)
        + f'<div id="timeline" hidden>{"".join(bars)}</div>'
        + f'<p class="muted">{span:.1f}s from the first attempt to the last one\'s end.</p>'
        + table(headers, rows, id="attempts")
    )


@pages.get("/requests/{request_id}/log.txt", response_class=PlainTextResponse)
def request_log(
    request: Request,
    request_id: str,
    node: str | None = Query(None, max_length=200, description="one instance's output only"),
    download: bool = False,
) -> PlainTextResponse:
    seen_request(request, request_id)
    try:
        text = runtime_requests.read_logs(
            _deps(request), request_id, instance_id=node or None, tail_bytes=LOG_TAIL_BYTES
        )
    except runtime_requests.RequestNotFound:
        raise HTTPException(404, f"no launch request {request_id!r}") from None
    headers = {}
    if download:
        safe = "".join(c for c in request_id if c.isalnum() or c in "-_")
        headers["Content-Disposition"] = f'attachment; filename="{safe}.log"'
    return PlainTextResponse(text, headers=headers)


@pages.post("/requests/{request_id}/cancel")
async def cancel(request: Request, request_id: str) -> Response:
    auth.check_form_key(request, (await _form(request)).get("key", ""))
    seen_request(request, request_id)
    writer(auth.who(request))
    try:
        runtime_requests.cancel(_deps(request), request_id)
    except runtime_requests.RequestNotFound:
        raise HTTPException(404, f"no launch request {request_id!r}") from None
    return RedirectResponse(f"/console/requests/{quote(request_id)}", 303)


@pages.post("/requests/{request_id}/instances/{instance_id}/terminate")
async def terminate(request: Request, request_id: str, instance_id: str) -> Response:
    auth.check_form_key(request, (await _form(request)).get("key", ""))
    seen_request(request, request_id)
    writer(auth.who(request))
    deps = _deps(request)
    inst = deps.store.get_instance(instance_id)
    if inst is None or inst.request_id != request_id:
        raise HTTPException(404, f"request {request_id!r} has no instance {instance_id!r}")
    runtime_requests.cancel(deps, request_id, instance_id=instance_id)
    return RedirectResponse(f"/console/requests/{quote(request_id)}", 303)
