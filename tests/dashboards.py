"""The metric names a Grafana dashboard's PromQL expressions read, and the names Corral
serves (test helper)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from corral.services.observability import events
from corral.services.observability.state_metrics import GAUGES

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}
    | {"group_left", "group_right"}
)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![0-9.])[A-Za-z_:][A-Za-z0-9_:]*")  # not a duration's unit (5m)


def metric_names(expr: str) -> set[str]:
    """Every metric an expression selects: identifiers that are not functions, aggregations,
    keywords, label names or parts of strings and ranges."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for m in _IDENT.finditer(text):
        if text[m.end() :].lstrip().startswith("(") or m.group(0) in _KEYWORDS:
            continue  # a function or aggregation is followed by its arguments
        names.add(m.group(0))
    return names


def expressions(dashboard: Path) -> Iterator[str]:
    """Every target expression of every panel (rows' panels too)."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[str]:
        for panel in panels:
            for target in panel.get("targets", []):
                if "expr" in target:
                    yield str(target["expr"])
            yield from walk(panel.get("panels", []))

    yield from walk(json.loads(dashboard.read_text())["panels"])


def dashboard_metric_names(dashboard: Path) -> set[str]:
    return {name for expr in expressions(dashboard) for name in metric_names(expr)}


def declared_sample_names() -> set[str]:
    """The sample names Corral's metrics are served under."""
    names = {name for name, _doc, _labels in GAUGES}
    for value in vars(events).values():
        if isinstance(value, Counter):
            names.add(f"{value._name}_total")
        elif isinstance(value, Histogram):
            names.update(f"{value._name}_{part}" for part in ("bucket", "sum", "count"))
        elif isinstance(value, Gauge):
            names.add(value._name)
    return names
