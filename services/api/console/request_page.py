"""The console's request page, and how it stays current: its state, why, cost, instances'
states, each running node's utilisation (CPU, memory and GPUs, as bars and numbers), its job
queue (``corral exec ID task.yaml``), events and history are refreshed in place every
:data:`POLL_S` seconds from ``/console/requests/{id}/live.json`` (a small JSON document, not
the page again) by :data:`REQUEST_SCRIPT`, inline, which writes text only (never markup from
the data) and leaves the scroll, the log tail and any open form as they are. The numbers are
the API's own: ``GET /v1/requests/{id}``, ``/jobs`` and ``/usage`` read the same functions.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from corral.services.api.console import auth
from corral.services.api.console.html import (
    LOG_TAIL_SCRIPT,
    ago,
    duration,
    esc,
    percent,
    state,
    table,
    usd,
    when,
)
from corral.services.api.console.routes import LIVE, _deps, _html, _timeline, seen_request
from corral.services.api.jobs import job_view, queue_of
from corral.services.runtime import requests as runtime_requests
from corral.services.runtime import usage
from corral.services.runtime import why as whys
from corral.shared.records import LaunchRequest

pages = APIRouter(
    prefix="/console", include_in_schema=False, dependencies=[Depends(auth.require_session)]
)

POLL_S = 2
EVENTS_SHOWN = 50
USAGE_COLUMNS = (("cpu_percent", "CPU"), ("mem_percent", "memory"), ("gpu_percent", "GPU"),
                 ("gpu_mem_percent", "GPU memory"))  # fmt: skip


def live_view(request: Request, req: LaunchRequest) -> dict[str, Any]:
    """What the page refreshes, as data."""
    deps = _deps(request)
    view = runtime_requests.public_view(deps, req.id) or {}
    said = whys.why(deps, req.id)
    return {
        "id": req.id,
        "state": req.state.value,
        "why": {"reason": said.get("reason"), "code": said.get("code")},
        "error": req.error,
        "cost_usd": view.get("cost_usd"),
        "instances": [{"id": i["id"], "state": i["state"]} for i in view.get("instances", [])],
        "nodes": usage.of_request(deps, req.id),
        "jobs": [job_view(j) for j in queue_of(deps, req)],
        "events": [{"at": e.at, "text": e.text} for e in deps.store.events(req.id)[-EVENTS_SHOWN:]],
        "history": [
            {"at": t.at, "from": t.from_state, "to": t.to_state, "reason": t.reason}
            for t in req.history
        ],
        "at": time.time(),
    }


@pages.get("/requests/{request_id}/live.json", response_class=JSONResponse)
def request_live(request: Request, request_id: str) -> JSONResponse:
    req = seen_request(request, request_id)
    return JSONResponse(live_view(request, req), headers={"Cache-Control": "no-store"})


def _pct(value: Any) -> str:
    if not isinstance(value, int | float):
        return '<span class="muted">-</span>'
    return percent(float(value))


def usage_table(nodes: list[dict[str, Any]]) -> str:
    """Each running node's numbers: a row per node (``data-at``: its heartbeat's time), a
    cell per field (``data-field``, ``data-value``: the number as the API gives it)."""
    head = "".join(
        f"<th>{esc(t)}</th>" for t in ("node", "instance", *dict(USAGE_COLUMNS).values())
    )
    rows = []
    for n in nodes:
        cells = "".join(
            f'<td data-field="{k}" data-value="{esc(n.get(k, ""))}">{_pct(n.get(k))}</td>'
            for k, _ in USAGE_COLUMNS
        )
        rows.append(
            f'<tr data-instance="{esc(n["instance_id"])}" data-at="{esc(n.get("at", ""))}">'
            f"<td>{n['node_index']}</td><td>{esc(n['instance_id'])}</td>{cells}</tr>"
        )
    body = (
        "".join(rows) or f'<tr><td colspan="{2 + len(USAGE_COLUMNS)}" class="muted">none</td></tr>'
    )
    return f'<table id="usage"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def jobs_table(jobs: list[dict[str, Any]]) -> str:
    rows = [
        (str(j["id"]), esc(j.get("name")), when(j["submitted_at"]), when(j.get("started_at")),
         duration(j.get("duration_s")), state(j["state"]), esc(j.get("exit_code")))
        for j in jobs
    ]  # fmt: skip
    headers = ("job", "name", "submitted", "started", "duration", "state", "exit")
    return table(headers, rows, id="jobs")


@pages.get("/requests/{request_id}", response_class=HTMLResponse)
def request_page(request: Request, request_id: str) -> HTMLResponse:
    deps, who = _deps(request), auth.who(request)
    req = seen_request(request, request_id)
    view = runtime_requests.public_view(deps, request_id)
    if view is None:
        raise HTTPException(404, f"no launch request {request_id!r}")
    live = live_view(request, req)
    now = deps.now()
    key = auth.form_key(request)
    writer = who.role != "viewer"
    actions = ""
    if writer and not req.is_terminal:
        actions = (
            f'<form class="inline" method="post" action="/console/requests/{quote(req.id)}/cancel">'
            f'<input type="hidden" name="key" value="{key}">'
            '<button id="cancel" type="submit">Cancel this request</button></form>'
        )
    runs = [
        (esc(f"{r['cloud']}/{r['zone']}"), esc(r["instance_type"]), str(r["nodes"]),
         when(r["started_at"]), when(r["ended_at"]), esc(r["outcome"]), usd(r["cost_usd"]))
        for r in view.get("runs", [])
    ]  # fmt: skip
    instances = [
        (esc(i["id"]), f'<span data-instance-state="{esc(i["id"])}">{state(i["state"])}</span>',
         esc(f"{i['cloud']}/{i['zone']}"), esc(i["instance_type"]), esc(i["market"]),
         usd(i.get("price_usd_per_hour"), 3),
         _terminate_form(req.id, i["id"], key) if writer and i["state"] in LIVE else "")
        for i in view["instances"]
    ]  # fmt: skip
    events = [(when(e["at"]), esc(e["text"])) for e in live["events"]]
    history = [(when(t["at"]), esc(t["from"]), esc(t["to"]), esc(t["reason"]))
               for t in live["history"]]  # fmt: skip
    base = f"/console/requests/{quote(req.id)}/log.txt"
    nodes = "".join(
        f'<option value="{esc(i["id"])}">{esc(i["id"])} ({esc(i["state"])})</option>'
        for i in view["instances"]
    )
    error = live["error"]
    body = (
        f'<div id="live-request" data-src="/console/requests/{quote(req.id)}/live.json">'
        f'<p id="state"><span id="state-value" class="st st-{esc(req.state.value)}">'
        f'{esc(req.state.value)}</span> {esc(req.task.get("name"))} '
        f'<span class="muted">by {esc(req.user)} in {esc(req.project)}, '
        f'created {ago(req.created_at, now)}</span> {actions}</p>'
        f'<p id="why"><b>Why:</b> <span id="why-text">{esc(live["why"]["reason"])} '
        f'({esc(live["why"]["code"])})</span></p>'
        f'<p id="error"{"" if error else " hidden"}><b>Error:</b> '
        f'<span id="error-text">{esc(error)}</span></p>'
        + "<h2>Attempts</h2>" + _timeline(req.attempts, now)
        + f'<h2>Runs</h2><p id="cost">Cost over every run: <span id="cost-value">'
        f'{usd(view.get("cost_usd"))}</span></p>'
        + table(("where", "type", "nodes", "started", "ended", "outcome", "cost"), runs, id="runs")
        + "<h2>Instances</h2>"
        + table(("id", "state", "where", "type", "market", "$/h", ""), instances, id="instances")
        + "<h2>Utilisation per node</h2>" + usage_table(live["nodes"])
        + "<h2>Jobs</h2>" + jobs_table(live["jobs"])
        + "</div><h2>Log tail</h2>"
        '<p class="filters"><label>node <select id="log-node"><option value="">every node'
        f'</option>{nodes}</select></label> <label>search <input id="log-search" size="20">'
        f'</label> <a id="log-download" href="{base}?download=1">download</a> '
        '<span class="muted" id="log-matches"></span></p>'
        f'<pre class="log" id="log" data-src="{base}"></pre>'
        + LOG_TAIL_SCRIPT
        + '<div id="live-events">'
        + "<h2>Events</h2>" + table(("at", "event"), events, id="events")
        + "<h2>History</h2>" + table(("at", "from", "to", "reason"), history, id="history")
        + "</div>" + REQUEST_SCRIPT.replace("POLL_MS", str(POLL_S * 1000))
    )  # fmt: skip
    return _html(request, f"Request {req.id}", body, "/console/requests")


def _terminate_form(request_id: str, instance_id: str, key: str) -> str:
    action = f"/console/requests/{quote(request_id)}/instances/{quote(instance_id)}/terminate"
    return (
        f'<form class="inline" method="post" action="{action}">'
        f'<input type="hidden" name="key" value="{key}">'
        f'<button type="submit" class="terminate">Terminate</button></form>'
    )


# Polls live.json and writes what changed as text (textContent, never innerHTML from data).
REQUEST_SCRIPT = """
<script>
(function(){
 var root=document.getElementById('live-request');if(!root)return;
 function el(tag,text,cls){var e=document.createElement(tag);
   e.textContent=(text===null||text===undefined)?'-':String(text);if(cls)e.className=cls;return e;}
 function at(t){if(!t)return el('span','-');var e=document.createElement('time'),d=new Date(t*1000);
   e.dataset.t=String(t);e.textContent=d.toLocaleString();e.title=d.toISOString();return e;}
 function st(v){return el('span',v,'st st-'+v);}
 function fill(id,list,cells){var t=document.getElementById(id);if(!t)return;
   var frag=document.createDocumentFragment();
   list.forEach(function(item){var tr=document.createElement('tr');var got=cells(item,tr);
     got.forEach(function(c){var td=document.createElement('td');
       if(c instanceof Node){td.appendChild(c);}
       else{td.textContent=(c===null||c===undefined)?'-':String(c);}
       tr.appendChild(td);});frag.appendChild(tr);});
   if(!list.length){var tr=document.createElement('tr'),td=el('td','none','muted');
     td.colSpan=t.tHead.rows[0].cells.length;tr.appendChild(td);frag.appendChild(tr);}
   t.tBodies[0].replaceChildren(frag);}
 function pct(v){if(typeof v!=='number')return el('span','-','muted');
   var s=document.createElement('span'),b=el('span','','bar'),f=document.createElement('span');
   f.style.width=Math.max(0,Math.min(100,v))+'%';b.appendChild(f);s.appendChild(b);
   s.appendChild(document.createTextNode(' '));s.appendChild(el('span',v.toFixed(1)+'%','num'));
   return s;}
 function dur(j){if(!j.started_at)return '-';var s=Math.floor(j.duration_s===null?
   (Date.now()/1000-j.started_at):j.duration_s);
   return s<120?s+'s':(s<7200?Math.floor(s/60)+'m '+('0'+s%60).slice(-2)+'s':
   Math.floor(s/3600)+'h '+('0'+Math.floor(s%3600/60)).slice(-2)+'m');}
 var fields=['cpu_percent','mem_percent','gpu_percent','gpu_mem_percent'];
 function apply(d){
  var s=document.getElementById('state-value');
  if(s.textContent!==d.state){s.textContent=d.state;s.className='st st-'+d.state;}
  document.getElementById('why-text').textContent=(d.why.reason||'-')+' ('+(d.why.code||'-')+')';
  var e=document.getElementById('error');e.hidden=!d.error;
  document.getElementById('error-text').textContent=d.error||'-';
  document.getElementById('cost-value').textContent=
   (typeof d.cost_usd==='number')?'$'+d.cost_usd.toFixed(4):'-';
  d.instances.forEach(function(i){
   document.querySelectorAll('[data-instance-state]').forEach(function(c){
    if(c.dataset.instanceState===i.id&&c.textContent!==i.state){c.replaceChildren(st(i.state));}});});
  fill('usage',d.nodes,function(n,tr){tr.dataset.instance=n.instance_id;tr.dataset.at=n.at||'';
   return [n.node_index,n.instance_id].concat(fields.map(function(k){return pct(n[k]);}));});
  document.querySelectorAll('#usage tbody tr').forEach(function(tr,i){var n=d.nodes[i];if(!n)return;
   Array.prototype.slice.call(tr.cells,2).forEach(function(td,k){td.dataset.field=fields[k];
    td.dataset.value=(typeof n[fields[k]]==='number')?String(n[fields[k]]):'';});});
  fill('jobs',d.jobs,function(j){return [j.id,j.name,at(j.submitted_at),at(j.started_at),
   dur(j),st(j.state),j.exit_code];});
  fill('events',d.events,function(v){return [at(v.at),v.text];});
  fill('history',d.history,function(h){return [at(h.at),h.from,h.to,h.reason];});}
 function poll(){if(document.hidden)return;
  fetch(root.dataset.src,{credentials:'same-origin',cache:'no-store'}).then(function(r){
   return (r.ok&&!r.redirected)?r.json():null;}).then(function(d){if(!d)return;apply(d);
   document.body.dataset.refreshed=String(Date.now());}).catch(function(){});}
 setInterval(poll,POLL_MS);})();
</script>
"""
