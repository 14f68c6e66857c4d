"""The console's pages of what runs where: instances, machine pools and Determined pools,
clusters (nodes, demand, the autoscaler's last decision), blocked scopes with their expiry,
and cost: per hour by cloud and market now, spend per project over time and GPUs held per
pool or cluster, both served as JSON (``/console/charts/*.json``) and drawn in the page as
inline SVG by :data:`CHART_SCRIPT` (no external script), with the same numbers in a table for
a browser without scripts. A member or viewer sees its projects' instances and spend only."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse

from corral.services.api import clusters as cluster_routes
from corral.services.api import pool_routes
from corral.services.api.console import auth
from corral.services.api.console.html import (
    cell,
    esc,
    fields,
    link,
    records,
    state,
    table,
    usd,
    when,
)
from corral.services.api.console.routes import LIVE, _deps, _html, visible_requests
from corral.services.api.routes import MAX_LIST
from corral.services.runtime import autoscaling
from corral.shared.costs import cost_line
from corral.shared.routing import DeterminedRoute, MachinePoolRoute

pages = APIRouter(
    prefix="/console", include_in_schema=False, dependencies=[Depends(auth.require_session)]
)

SPEND_POINTS = 24  # the spend chart's points, from the first run's start to now


@pages.get("/instances", response_class=HTMLResponse)
def instances_page(request: Request) -> HTMLResponse:
    deps, who = _deps(request), auth.who(request)
    seen = None if who.is_admin else {r.id for r in visible_requests(deps, who, MAX_LIST)}
    rows = [
        (esc(i.id), link(f"/console/requests/{quote(i.request_id)}", i.request_id),
         state(i.state.value), esc(f"{i.cloud}/{i.zone}"), esc(i.instance_type), esc(i.market),
         usd(i.price_usd_per_hour, 3), esc(i.provider_id))
        for i in deps.store.list_instances()
        if seen is None or i.request_id in seen
    ]  # fmt: skip
    headers = ("id", "request", "state", "where", "type", "market", "$/h", "provider id")
    body = f'<div id="live-instances" data-live>{table(headers, rows, id="instances")}</div>'
    return _html(request, "Instances", body, "/console/instances", 5)


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
    body = f'<div id="live-pools" data-live>{"".join(parts)}</div>'
    return _html(request, "Pools", body, "/console/pools", 10)


@pages.get("/pools/{name}", response_class=HTMLResponse)
def pool_page(request: Request, name: str) -> HTMLResponse:
    view = pool_routes.get_pool(name, _deps(request))
    body = f'<div id="live-pool" data-live>{fields(view)}{_pool_detail(view)}</div>'
    return _html(request, f"Pool {name}", body, "/console/pools", 10)


def _pool_detail(view: dict[str, Any]) -> str:
    """A pool's partitions (held / size), machines and workloads (who waits and why)."""
    out = [f'<h2 id="pool-{esc(view["name"])}">{esc(view["name"])} ({esc(view["kind"])})</h2>']
    for key, value in view.items():
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            out.append(f"<h3>{esc(key.replace('_', ' '))}</h3>" + records(value))
        elif isinstance(value, dict) and value:
            out.append(f"<h3>{esc(key.replace('_', ' '))}</h3>")
            out.append(table(("name", "value"), ((esc(k), cell(k, v)) for k, v in value.items())))
        elif isinstance(value, list) and value:
            out.append(f"<h3>{esc(key.replace('_', ' '))}</h3><p>{cell(key, value)}</p>")
    return "".join(out)


@pages.get("/clusters", response_class=HTMLResponse)
def clusters_page(request: Request) -> HTMLResponse:
    found = cluster_routes.list_clusters(_deps(request))["clusters"]
    rows = [
        (link(f"/console/clusters/{quote(c['name'])}", c["name"]), state(c["state"]),
         esc(c.get("cloud")), str(c["nodes"]), cell("by_type", c.get("by_type")),
         cell("demand", c.get("demand")), when(c.get("created_at")))
        for c in found
    ]  # fmt: skip
    headers = ("cluster", "state", "cloud", "nodes", "by type", "demand", "created")
    body = f'<div id="live-clusters" data-live>{table(headers, rows, id="clusters")}</div>'
    return _html(request, "Clusters", body, "/console/clusters", 10)


@pages.get("/clusters/{name}", response_class=HTMLResponse)
def cluster_page(request: Request, name: str) -> HTMLResponse:
    view = cluster_routes.get_cluster(name, _deps(request))
    decision = view.get("last_decision") or {}
    body = (
        fields(view)
        + "<h2>Nodes</h2>" + records(view.get("nodes") or [], id="nodes")
        + f'<h2>Demand</h2><div id="demand">{cell("demand", view.get("demand"))}</div>'
        + "<h2>The autoscaler's last decision</h2>"
        + (fields(decision, list(decision)) if decision else '<p class="muted">none yet</p>')
        + "<h2>Cooldowns</h2>"
        + table(("node type", "until"),
                ((esc(k), cell("until", v)) for k, v in (view.get("cooldowns") or {}).items()),
                id="cooldowns")
    )  # fmt: skip
    body = f'<div id="cluster" data-live>{body}</div>'
    return _html(request, f"Cluster {name}", body, "/console/clusters", 10)


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
    body = f'{note}<div id="live-blocked" data-live>{table(headers, rows, id="blocked")}</div>'
    return _html(request, "Blocked scopes", body, "/console/blocked", 5)


# ---- cost and the charts ------------------------------------------------------------------------


def spend_series(request: Request) -> dict[str, Any]:
    """Each project's spend summed over time: at each of :data:`SPEND_POINTS` times from the
    first run's start to now, what its runs had cost by then (a run's cost spread evenly over
    its time). The last point is ``GET /v1/costs``'s ``totals.by_project``."""
    deps, who = _deps(request), auth.who(request)
    now = deps.now()
    lines = [
        cost_line(r, deps.store.list_instances(request_id=r.id), now)
        for r in visible_requests(deps, who, MAX_LIST)
    ]
    runs = [(line.project or "-", run) for line in lines for run in line.runs]
    runs = [(p, r) for p, r in runs if r.cost_usd is not None]
    start = min((r.started_at for _, r in runs), default=now)
    times = [start + (now - start) * k / (SPEND_POINTS - 1) for k in range(SPEND_POINTS)]
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * SPEND_POINTS)
    for project, run in runs:
        end = run.ended_at or now
        for k, t in enumerate(times):
            part = (
                1.0 if t >= end else max(0.0, t - run.started_at) / max(end - run.started_at, 1e-9)
            )
            series[project][k] += (run.cost_usd or 0.0) * part
    return {
        "times": [round(t, 3) for t in times],
        "projects": {p: [round(v, 6) for v in vs] for p, vs in sorted(series.items())},
        "at": now,
    }


def gpus_held(request: Request) -> dict[str, Any]:
    """GPUs held now by the caller's visible requests that hold machines, per machine pool,
    Determined pool or cluster (the others per cloud)."""
    deps, who = _deps(request), auth.who(request)
    node_of: dict[str, str] = {}
    for rec in autoscaling.clusters(deps).list():
        for node in rec.live_nodes():
            node_of[node.request_id] = f"cluster {rec.name}"
    held: dict[str, int] = defaultdict(int)
    for req in visible_requests(deps, who, MAX_LIST):
        if req.is_terminal or req.gpus <= 0:
            continue
        live = [i for i in deps.store.list_instances(request_id=req.id) if i.state in LIVE]
        if not live:
            continue
        match req.route:
            case MachinePoolRoute(pool=name):
                where = f"pool {name}"
            case DeterminedRoute(resource_pool=name):
                where = f"pool {name}"
            case _:
                where = node_of.get(req.id) or f"cloud {live[0].cloud}"
        held[where] += req.gpus
    return {"held": dict(sorted(held.items())), "at": deps.now()}


@pages.get("/charts/spend.json")
def spend_json(request: Request) -> JSONResponse:
    return JSONResponse(spend_series(request))


@pages.get("/charts/gpus.json")
def gpus_json(request: Request) -> JSONResponse:
    return JSONResponse(gpus_held(request))


@pages.get("/cost", response_class=HTMLResponse)
def cost_page(request: Request) -> HTMLResponse:
    deps, who = _deps(request), auth.who(request)
    seen = None if who.is_admin else {r.id for r in visible_requests(deps, who, MAX_LIST)}
    live = [
        i
        for i in deps.store.list_instances(states=list(LIVE))
        if seen is None or i.request_id in seen
    ]
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i in live:
        sums[(i.cloud, i.market)][0] += 1
        sums[(i.cloud, i.market)][1] += i.price_usd_per_hour or 0.0
    rows = [
        (esc(cloud), esc(market), f"{n:.0f}", usd(per_h, 3))
        for (cloud, market), (n, per_h) in sorted(sums.items())
    ]
    total = sum(v[1] for v in sums.values())
    rows.append(("<b>total</b>", "", str(len(live)), f"<b>{usd(total, 3)}</b>"))
    headers = ("cloud", "market", "live instances", "cost per hour")
    spend, gpus = spend_series(request), gpus_held(request)
    fallback_spend = table(
        ("project", "spent"),
        ((esc(p), usd(v[-1])) for p, v in spend["projects"].items()),
        id="spend-table",
    )
    fallback_gpus = table(
        ("pool or cluster", "GPUs"), ((esc(k), str(v)) for k, v in gpus["held"].items()),
        id="gpus-table",
    )  # fmt: skip
    body = (
        '<div id="live-cost" data-live>' + table(headers, rows, id="cost") + "</div>"
        "<h2>Spend per project over time</h2>"
        '<div class="chart-box" id="spend-chart" data-src="/console/charts/spend.json"></div>'
        f"<noscript>{fallback_spend}</noscript>"
        "<h2>GPUs held per pool and cluster</h2>"
        '<div class="chart-box" id="gpus-chart" data-src="/console/charts/gpus.json"></div>'
        f"<noscript>{fallback_gpus}</noscript>" + CHART_SCRIPT
    )
    return _html(request, "Cost", body, "/console/cost", 10)


# Draws the charts from their JSON: spend as one line per project (its last value labelled),
# GPUs as one bar per pool or cluster (its value labelled). Every text through textContent.
CHART_SCRIPT = """
<script>
(function(){var NS='http://www.w3.org/2000/svg',COL=['#3a6fd6','#d0573f','#3a9d5d','#b07d12',
 '#8a4fd0','#1d8f9b','#c2417f','#5b6473'];
 function el(n,a,t){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);
  if(t!==undefined)e.textContent=t;return e;}
 function svg(w,h){return el('svg',{'class':'chart',width:w,height:h,viewBox:'0 0 '+w+' '+h});}
 function money(v){return '$'+v.toFixed(4);}
 function spend(box,d){var names=Object.keys(d.projects),W=760,H=260,L=60,R=190,T=10,B=30;
  var s=svg(W,H);box.replaceChildren(s);if(!names.length){box.textContent='No spend yet.';return;}
  var max=0;names.forEach(function(p){d.projects[p].forEach(function(v){max=Math.max(max,v);});});
  max=max||1;var t0=d.times[0],t1=d.times[d.times.length-1],span=(t1-t0)||1;
  function x(t){return L+(W-L-R)*(t-t0)/span;}function y(v){return T+(H-T-B)*(1-v/max);}
  for(var k=0;k<=4;k++){var v=max*k/4;s.appendChild(el('line',{x1:L,x2:W-R,y1:y(v),y2:y(v),
   stroke:'#e4e7ec'}));s.appendChild(el('text',{x:L-4,y:y(v)+4,'text-anchor':'end'},money(v)));}
  [t0,t1].forEach(function(t,i){s.appendChild(el('text',{x:x(t),y:H-8,
   'text-anchor':i?'end':'start'},new Date(t*1000).toLocaleTimeString()));});
  names.forEach(function(p,i){var vs=d.projects[p],c=COL[i%COL.length];
   var pts=vs.map(function(v,k){return x(d.times[k]).toFixed(1)+','+y(v).toFixed(1);}).join(' ');
   s.appendChild(el('polyline',{points:pts,fill:'none',stroke:c,'stroke-width':2}));
   var last=vs[vs.length-1];s.appendChild(el('text',{x:W-R+6,y:T+14+i*16,fill:c,
    'class':'series','data-project':p,'data-value':String(last)},p+': '+money(last)));});}
 function gpus(box,d){var keys=Object.keys(d.held),W=760,L=200,BH=22,H=keys.length*BH+20;
  if(!keys.length){box.textContent='No GPUs held now.';return;}var s=svg(W,H);
  box.replaceChildren(s);var max=Math.max.apply(null,keys.map(function(k){return d.held[k];}))||1;
  keys.forEach(function(k,i){var v=d.held[k],w=(W-L-80)*v/max,yy=6+i*BH;
   s.appendChild(el('text',{x:L-6,y:yy+13,'text-anchor':'end'},k));
   s.appendChild(el('rect',{x:L,y:yy,width:Math.max(w,2),height:16,fill:COL[i%COL.length]}));
   s.appendChild(el('text',{x:L+w+6,y:yy+13,'class':'bar','data-where':k,'data-value':String(v)},
    String(v)));});}
 function load(id,draw){var box=document.getElementById(id);if(!box)return;
  fetch(box.dataset.src,{credentials:'same-origin'}).then(function(r){return r.ok?r.json():null;})
  .then(function(d){if(d){draw(box,d);box.dataset.drawn='1';}}).catch(function(){});}
 function all(){load('spend-chart',spend);load('gpus-chart',gpus);}
 all();setInterval(all,15000);})();
</script>
"""
