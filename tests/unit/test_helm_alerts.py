"""The chart's Prometheus Operator objects: the ServiceMonitors scrape the API and every worker
pod, and the PrometheusRule's alerts parse as PromQL and read only metrics (and labels) Corral
serves: beat lag, queue depth, blocked scopes, failing attempts among them.

The expressions are parsed by promql-parser (PyPI: Prometheus's grammar, from the Rust port of
its parser), so a name is a metric only where the grammar says it selects one. The metric
names are checked against what services/observability declares, as test_dashboard.py does for
the Grafana dashboard; the schemas of both kinds are checked in test_helm_chart.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import promql_parser as promql
import pytest
from helm_chart import BASE, FULL, NAMESPACE, RELEASE, SEED, merged, of_kind, render
from helm_chart import validate as validate_manifest
from prometheus_client import Counter, Gauge, Histogram

from corral.services.observability import events
from corral.services.observability.state_metrics import GAUGES

from dashboards import declared_sample_names

MONITORED = merged(
    BASE, {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
)
# Labels Prometheus adds to every target's series (the Operator's ServiceMonitor relabelling),
# and the worker pods' role label (podTargetLabels).
TARGET_LABELS = {"namespace", "job", "service", "pod", "instance", "endpoint", "container"}
TARGET_LABELS |= {"corral_dev_role"}


def declared_labels() -> dict[str, set[str]]:
    """Each sample name Corral serves, with the labels it carries."""
    labels: dict[str, set[str]] = {name: set(names) for name, _doc, names in GAUGES}
    for value in vars(events).values():
        if isinstance(value, Counter):
            labels[f"{value._name}_total"] = set(value._labelnames)
        elif isinstance(value, Histogram):
            for part in ("sum", "count"):
                labels[f"{value._name}_{part}"] = set(value._labelnames)
            labels[f"{value._name}_bucket"] = {*value._labelnames, "le"}
        elif isinstance(value, Gauge):
            labels[value._name] = set(value._labelnames)
    assert set(labels) == declared_sample_names()
    return labels


def selectors(expr: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """Every (metric, {label: (op, value)}) an expression selects, by Prometheus's grammar;
    the `by (...)` labels of its aggregations under the name ``"by"``."""
    found: list[tuple[str, dict[str, tuple[str, str]]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql.VectorSelector):
            matchers = {m.name: (str(m.op), m.value) for m in node.matchers.matchers}
            found.append((node.name, matchers))
        elif isinstance(node, promql.AggregateExpr) and node.modifier is not None:
            found.append(("by", {label: ("by", "") for label in node.modifier.labels}))

    promql.walk(promql.parse(expr), visit)
    return found


def rules() -> list[dict[str, Any]]:
    [rule] = of_kind(render(MONITORED), "PrometheusRule").values()
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_the_parser_finds_metrics_and_nothing_else() -> None:
    found = selectors('sum by (le) (rate(corral_x_bucket{a="b", c=~"d|e"}[5m])) / on (a) corral_y')
    assert found == [
        ("by", {"le": ("by", "")}),
        ("corral_x_bucket", {"a": ("MatchOp.Equal", "b"), "c": ("MatchOp.Re", "d|e")}),
        ("corral_y", {}),
    ]
    with pytest.raises(ValueError):
        promql.parse("max by (entry (corral_y)")


def test_every_alert_reads_metrics_and_labels_corral_serves() -> None:
    labels = declared_labels()
    alerts = rules()
    assert len(alerts) >= 6
    for rule in alerts:
        where = rule["alert"]
        metrics_used = [(m, ls) for m, ls in selectors(rule["expr"]) if m != "by"]
        assert metrics_used, where
        for metric, matchers in metrics_used:
            assert metric in labels, f"{where}: {metric} is not a metric Corral serves"
            unknown = set(matchers) - labels[metric] - TARGET_LABELS
            assert not unknown, f"{where}: {metric} has no label {sorted(unknown)}"
        grouped = {label for m, ls in selectors(rule["expr"]) if m == "by" for label in ls}
        known = set().union(*(labels[m] for m, _ in metrics_used)) | TARGET_LABELS
        assert grouped <= known, f"{where}: groups by {sorted(grouped - known)}"
        assert rule["annotations"]["summary"] and rule["labels"]["severity"]


def test_the_alerts_the_issue_asks_for_are_there() -> None:
    """Beat lag, queue depth, blocked scopes, failing attempts."""
    read = {m for rule in rules() for m, _ in selectors(rule["expr"])}
    wanted = {
        "corral_beat_lag_seconds",
        "corral_queue_messages",
        "corral_blocked_scopes",
        "corral_attempts_total",
    }
    assert wanted <= read
    by_name = {rule["alert"]: rule for rule in rules()}
    assert "> 120" in by_name["CorralBeatLagging"]["expr"]  # beatLagSeconds
    failing = selectors(by_name["CorralAttemptsFailing"]["expr"])
    outcomes = [ls["outcome"] for m, ls in failing if m == "corral_attempts_total"]
    # Failures over attempts, both leaving out the blocked ones (which called no cloud).
    assert outcomes == [("MatchOp.NotRe", "ok|blocked"), ("MatchOp.NotEqual", "blocked")]


def test_the_alerts_read_this_releases_targets() -> None:
    """Every selector names this namespace and a job this chart's ServiceMonitors make (the
    Operator names a target's job after its Service)."""
    docs = render(MONITORED)
    monitored = set()
    services = of_kind(docs, "Service")
    for monitor in of_kind(docs, "ServiceMonitor").values():
        selected = {
            name
            for name, svc in services.items()
            if monitor["spec"]["selector"]["matchLabels"].items()
            <= svc["metadata"]["labels"].items()
        }
        assert len(selected) == 1, monitor["metadata"]["name"]
        monitored |= selected
    assert monitored == {f"{FULL}-api", f"{FULL}-worker-metrics"}

    for rule in rules():
        for metric, matchers in selectors(rule["expr"]):
            if metric == "by":
                continue
            assert matchers["namespace"] == ("MatchOp.Equal", NAMESPACE), rule["alert"]
            op, job = matchers["job"]
            if op == "MatchOp.Equal":
                assert job == f"{FULL}-api", rule["alert"]  # the state gauges: the API's
            else:
                assert op == "MatchOp.Re"
                assert {s for s in monitored if re.fullmatch(job, s)} == monitored


def test_the_service_monitors_reach_the_api_and_every_worker_pod() -> None:
    docs = render(MONITORED)
    services = of_kind(docs, "Service")
    monitors = of_kind(docs, "ServiceMonitor")
    for monitor in monitors.values():
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        svc = next(
            s
            for s in services.values()
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        )
        assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    workers = services[f"{FULL}-worker-metrics"]
    assert workers["spec"]["clusterIP"] == "None"  # headless: Prometheus scrapes each pod
    selector = workers["spec"]["selector"]
    deployments = of_kind(docs, "Deployment")
    selected = {
        name
        for name, d in deployments.items()
        if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    }
    assert selected == {f"{FULL}-worker-{r}" for r in ("schedule", "provision", "autoscale")}
    for name in selected:
        [container] = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert {p["name"] for p in container["ports"]} == {"metrics"}


def test_monitoring_is_off_by_default() -> None:
    """The Operator's CRDs may be absent: nothing of its kinds unless asked for."""
    docs = render(BASE)
    assert not of_kind(docs, "ServiceMonitor") and not of_kind(docs, "PrometheusRule")
    assert f"{FULL}-worker-metrics" not in of_kind(docs, "Service")


def test_a_scrape_token_reaches_the_api_and_its_service_monitor_only() -> None:
    """Issue #47 item 7: with metrics.token on, the API gets CORRAL_METRICS_TOKEN (derived from
    the seed like the chart's other secrets, or an existing Secret) and the API's
    ServiceMonitor sends it; the workers' monitor and every other pod get nothing."""
    on = merged(MONITORED, {"metrics": {"token": {"enabled": True}}})
    docs = render(on, fresh=True)
    for doc in docs:
        validate_manifest(doc)  # the Operator's strict schema takes `authorization`
    [secret] = of_kind(docs, "Secret").values()
    token = base64.b64decode(secret["data"]["metrics-token"]).decode()
    assert token == hashlib.sha256(f"corral/{SEED}/{RELEASE}/metrics-token".encode()).hexdigest()
    monitors = of_kind(docs, "ServiceMonitor")
    [api_endpoint] = monitors[f"{FULL}-api"]["spec"]["endpoints"]
    assert api_endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret["metadata"]["name"], "key": "metrics-token"},
    }
    [workers] = monitors[f"{FULL}-worker-metrics"]["spec"]["endpoints"]
    assert "authorization" not in workers
    holders = {
        name
        for kind in ("Deployment", "StatefulSet")
        for name, d in of_kind(docs, kind).items()
        for c in d["spec"]["template"]["spec"]["containers"]
        if any(e["name"] == "CORRAL_METRICS_TOKEN" for e in c.get("env", []))
    }
    assert holders == {f"{FULL}-api"}
    # Off (the default): no token anywhere, /metrics open as before.
    off = render(MONITORED)
    assert "metrics-token" not in json.dumps(off) and "authorization" not in json.dumps(
        of_kind(off, "ServiceMonitor")
    )
    # An existing Secret is referenced, and the chart keeps none of its own for it.
    given = merged(on, {"metrics": {"token": {"existingSecret": "scrape", "key": "t"}}})
    [api_endpoint] = of_kind(render(given), "ServiceMonitor")[f"{FULL}-api"]["spec"]["endpoints"]
    assert api_endpoint["authorization"]["credentials"] == {"name": "scrape", "key": "t"}
