"""The console's HTML: one page layout, tables, and the formats of times and dollars.

Plain Python strings, every value through :func:`esc`: no template engine to install, no
build step. A page is a few kilobytes; the only script is the log tail's poll (a dozen lines).
"""

from __future__ import annotations

import html
import json
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
"""


def esc(value: Any) -> str:
    """A value as HTML text (None as a dash)."""
    return "-" if value is None else html.escape(str(value), quote=True)


def usd(value: float | None, places: int = 4) -> str:
    return "-" if value is None else f"${value:,.{places}f}"


def when(ts: float | None) -> str:
    """An epoch time as local HH:MM:SS (with the date when not today)."""
    if not ts:
        return "-"
    t = time.localtime(ts)
    same_day = time.localtime()[:3] == t[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", t)


def ago(ts: float | None, now: float) -> str:
    if not ts:
        return "-"
    s = max(0.0, now - ts)
    return f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f}m ago"


def state(value: Any) -> str:
    return f'<span class="st st-{esc(value)}">{esc(value)}</span>'


def link(href: str, text: Any) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def compact(value: Any) -> str:
    """A nested value (a mapping, a list) as short JSON text, escaped."""
    if isinstance(value, (dict, list)):
        return esc(json.dumps(value, default=str, separators=(", ", ": ")))
    return esc(value)


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
    return table(keys, ([compact(r.get(k)) for k in keys] for r in rows), id=id)


def fields(data: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
    """A two-column table of a mapping's scalar fields."""
    keys = keys or [k for k, v in data.items() if not isinstance(v, (dict, list))]
    return table(("field", "value"), ((esc(k), compact(data.get(k))) for k in keys))


def page(title: str, body: str, active: str = "", refresh_s: int | None = None) -> str:
    """The whole document: the header's navigation, then ``body``."""
    nav = "".join(
        f'<a href="{href}"{" class=on" if href == active else ""}>{esc(text)}</a>'
        for href, text in NAV
    )
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · Corral</title>{meta}<style>{STYLE}</style></head>"
        f"<body><header><b>Corral</b>{nav}</header><main><h1>{esc(title)}</h1>{body}"
        "</main></body></html>"
    )


LOG_TAIL_SCRIPT = """
<script>
(function(){var pre=document.getElementById('log');if(!pre)return;
 function poll(){fetch(pre.dataset.src,{credentials:'same-origin'}).then(function(r){
   return r.ok?r.text():null}).then(function(t){if(t!==null&&t!==pre.textContent){
   var end=pre.scrollTop+pre.clientHeight>=pre.scrollHeight-4;pre.textContent=t;
   if(end)pre.scrollTop=pre.scrollHeight;}}).catch(function(){});}
 poll();setInterval(poll,2000);})();
</script>
"""
