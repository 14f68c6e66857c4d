"""The console's HTML: one page layout, tables, and the formats of times and dollars.

Plain Python strings, every value through :func:`esc`: no template engine to install, no
build step. A page is a few kilobytes. The only scripts are inline and small: :data:`PAGE_SCRIPT`
(times in the browser's zone; the page's ``data-live`` parts refreshed in place from the same
URL, so the scroll stays), the log tail's poll and the charts' drawing (console/charts.py).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NAV = (
    ("/console/", "Overview"),
    ("/console/requests", "Requests"),
    ("/console/instances", "Instances"),
    ("/console/pools", "Pools"),
    ("/console/clusters", "Clusters"),
    ("/console/blocked", "Blocked scopes"),
    ("/console/cost", "Cost"),
)

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a.on{color:#fff;font-weight:600}
header b{margin-right:12px}main{padding:16px 20px;max-width:1300px}
table{border-collapse:collapse;background:#fff;margin:8px 0 18px;min-width:40%}
th,td{border:1px solid #dde1e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right}
.st{padding:1px 6px;border-radius:3px;font-size:12px;background:#e4e7ec}
.st-RUNNING,.st-ok,.st-SUCCEEDED{background:#d5f2dc}.st-FAILED,.st-LOST{background:#f8d7d7}
.st-PROVISIONING,.st-PENDING,.st-WAITING,.st-REQUESTED{background:#fdf0c9}
.tl{position:relative;height:22px;background:#fff;border:1px solid #dde1e8;margin:2px 0}
.tl span{position:absolute;top:2px;height:16px;border-radius:2px;min-width:3px}
.o-ok{background:#3a9d5d}.o-none{background:#6b8fd6}.o-fail{background:#d0573f}
pre.log{background:#111;color:#ddd;padding:8px;max-height:420px;overflow:auto;font-size:12px}
form.inline{display:inline}button{cursor:pointer}.muted{color:#6b7280}
header .who{margin-left:auto;color:#cfd6e4}form.filters{margin:8px 0}
form.filters label{margin-right:10px}.pager a,.pager span{margin-right:8px}
th a{color:inherit}svg.chart{background:#fff;border:1px solid #dde1e8}
svg.chart text{font-size:11px;fill:#1d2330}
.bar{display:inline-block;width:80px;height:8px;background:#e5e7eb;vertical-align:middle}
.bar>span{display:block;height:100%;background:#3a9d5d}
"""


def esc(value: Any) -> str:
    """A value as HTML text (None as a dash)."""
    return "-" if value is None else html.escape(str(value), quote=True)


def usd(value: float | None, places: int = 4) -> str:
    return "-" if value is None else f"${value:,.{places}f}"


def when(ts: float | None) -> str:
    """An epoch time, shown in the browser's zone by :data:`PAGE_SCRIPT` (``data-t`` holds the
    epoch seconds); the text without a script is the server's UTC."""
    if not ts:
        return "-"
    t = time.gmtime(ts)
    text = time.strftime("%Y-%m-%d %H:%M:%S UTC", t)
    return (
        f'<time data-t="{ts:.3f}" datetime="{time.strftime("%Y-%m-%dT%H:%M:%SZ", t)}">{text}</time>'
    )


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def ago(ts: float | None, now: float) -> str:
    if not ts:
        return "-"
    s = max(0.0, now - ts)
    return f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f}m ago"


def state(value: Any) -> str:
    return f'<span class="st st-{esc(value)}">{esc(value)}</span>'


def link(href: str, text: Any) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


TIME_KEYS = ("_at", "until", "since", "expires")


def cell(key: str, value: Any) -> str:
    """A field's value as a table cell: a time as a time, a mapping as ``key: value`` lines,
    a list of mappings as a table of its own, other lists comma-separated."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and value > 1e9 and key.endswith(TIME_KEYS):
        return when(value)
    if number and key.endswith("_percent"):  # a node's utilisation: a bar and its number
        return percent(float(value))
    if isinstance(value, dict):
        if not value:
            return "-"
        return "<br>".join(f"{esc(k)}: {cell(str(k), v)}" for k, v in value.items())
    if isinstance(value, list):
        if value and all(isinstance(x, dict) for x in value):
            return records(value)
        return esc(", ".join(str(x) for x in value)) if value else "-"
    return esc(value)


def percent(value: float) -> str:
    """A share as a bar (drawn by the page's style, no script) and its number."""
    width = max(0.0, min(100.0, value))
    return (
        f'<span class="bar"><span style="width:{width:.1f}%"></span></span> '
        f'<span class="num" data-value="{value}">{value:.1f}%</span>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, id: str | None = None) -> str:
    """A table; cells are HTML already (escape values with :func:`esc`)."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    ident = f' id="{esc(id)}"' if id else ""
    if not body:
        cols = len(headers)
        body = f'<tr><td colspan="{cols}" class="muted">none</td></tr>'
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def records(rows: Sequence[Mapping[str, Any]], *, id: str | None = None) -> str:
    """A table of mappings whose keys are not known here (pool machines, decisions):
    one column per key, in first-seen order, nested values as short JSON."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    return table(keys, ([cell(k, r.get(k)) for k in keys] for r in rows), id=id)


def fields(data: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
    """A two-column table of a mapping's scalar fields."""
    keys = keys or [k for k, v in data.items() if not isinstance(v, (dict, list))]
    return table(("field", "value"), ((esc(k), cell(k, data.get(k))) for k in keys))


# The favicon, inline: no page asks the server for /favicon.ico (a 404 on every page).
FAVICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect width='16' height='16' rx='3' fill='%231d2330'/%3E%3Cpath d='M4 4v8M12 4v8M4 "
    "8h8' stroke='%23cfd6e4' stroke-width='2'/%3E%3C/svg%3E"
)

# Times in the browser's zone, and the page's data-live parts refreshed in place every
# refresh seconds from the same URL (only the parts that changed; the scroll stays).
PAGE_SCRIPT = """
<script>
(function(){
 function times(root){root.querySelectorAll('time[data-t]').forEach(function(e){
   var d=new Date(parseFloat(e.dataset.t)*1000);e.textContent=d.toLocaleString();
   e.title=d.toISOString();});}
 times(document);
 var every=parseInt(document.body.dataset.refresh||'0',10);if(!every)return;
 function poll(){if(document.hidden)return;
  fetch(location.href,{credentials:'same-origin'}).then(function(r){
   if(r.redirected||!r.ok)return null;return r.text();}).then(function(t){if(t===null)return;
   var doc=new DOMParser().parseFromString(t,'text/html');
   document.querySelectorAll('[data-live]').forEach(function(e){
    var n=doc.getElementById(e.id);if(!n)return;times(n);
    if(n.innerHTML!==e.innerHTML){e.innerHTML=n.innerHTML;}});
   document.body.dataset.refreshed=String(Date.now());}).catch(function(){});}
 setInterval(poll,every*1000);})();
</script>
"""


def page(
    title: str, body: str, active: str = "", refresh_s: int | None = None, who: Any = None
) -> str:
    """The whole document: the header's navigation (and who is signed in, with the sign-out
    button), then ``body``. With ``refresh_s``, the body's ``data-live`` parts refresh in
    place that often."""
    nav = "".join(
        f'<a href="{href}"{" class=on" if href == active else ""}>{esc(text)}</a>'
        for href, text in NAV
    )
    user = ""
    if who is not None:
        user = (
            f'<span class="who" id="who">{esc(who.name)} ({esc(who.role)})</span>'
            '<form class="inline" method="post" action="/console/logout">'
            '<button type="submit" id="sign-out">Sign out</button></form>'
        )
    refresh = f' data-refresh="{int(refresh_s)}"' if refresh_s else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<title>{esc(title)} · Corral</title><link rel="icon" href="{FAVICON}">'
        f"<style>{STYLE}</style></head>"
        f"<body{refresh}><header><b>Corral</b>{nav}{user}</header><main><h1>{esc(title)}</h1>"
        f"{body}</main>{PAGE_SCRIPT}</body></html>"
    )


# The log tail: polled every 2 s from the chosen node (or every node), the lines holding the
# search text only, scrolled to the end while the reader is at the end.
LOG_TAIL_SCRIPT = """
<script>
(function(){var pre=document.getElementById('log');if(!pre)return;
 var node=document.getElementById('log-node'),find=document.getElementById('log-search'),
     dl=document.getElementById('log-download'),note=document.getElementById('log-matches'),
     text='';
 function src(){var n=node&&node.value;
   return pre.dataset.src+(n?'?node='+encodeURIComponent(n):'');}
 function show(){var q=find?find.value:'',t=text;
   if(q){var lines=t.split('\\n').filter(function(l){return l.indexOf(q)>=0;});
     t=lines.join('\\n');if(note)note.textContent=lines.length+' matching lines';}
   else if(note){note.textContent='';}
   if(t!==pre.textContent){var end=pre.scrollTop+pre.clientHeight>=pre.scrollHeight-4;
     pre.textContent=t;if(end)pre.scrollTop=pre.scrollHeight;}}
 function poll(){fetch(src(),{credentials:'same-origin'}).then(function(r){
   return r.ok?r.text():null}).then(function(t){if(t!==null){text=t;show();}})
   .catch(function(){});}
 if(node)node.addEventListener('change',function(){
   if(dl)dl.href=src()+(src().indexOf('?')>=0?'&':'?')+'download=1';poll();});
 if(find)find.addEventListener('input',show);
 poll();setInterval(poll,2000);})();
</script>
"""
