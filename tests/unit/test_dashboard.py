"""The Grafana dashboard reads only metrics Corral declares (the integration test
tests/integration/test_metrics.py checks them against a real scrape too)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from corral.services.observability import events
from corral.services.observability.state_metrics import GAUGES

from dashboards import dashboard_metric_names, declared_sample_names, expressions, metric_names
from harness import REPO

DASHBOARD = REPO / "ops" / "grafana" / "corral-dashboard.json"


def test_the_parser_finds_metrics_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, route) (rate(corral_x_bucket{a="b", c=~"d|e"}'
        "[$__rate_interval]))) / on (route) group_left max without (pod) (corral_y) "
        "and corral_z offset 5m"
    )
    assert metric_names(expr) == {"corral_x_bucket", "corral_y", "corral_z"}


def test_every_dashboard_metric_is_one_corral_serves() -> None:
    used = dashboard_metric_names(DASHBOARD)
    assert len(list(expressions(DASHBOARD))) >= 20
    unknown = used - declared_sample_names()
    assert not unknown, f"the dashboard names metrics Corral does not serve: {sorted(unknown)}"


def test_metric_names_follow_prometheus_conventions() -> None:
    for value in vars(events).values():
        if isinstance(value, Counter | Histogram | Gauge):
            assert value._name.startswith("corral_")
            assert not value._name.endswith("_total")  # the client adds it to counters
        if isinstance(value, Histogram) and "depth" not in value._name:
            assert value._name.endswith("_seconds"), value._name
    for name, _doc, _labels in GAUGES:
        assert name.startswith("corral_") and not name.endswith("_total"), name
