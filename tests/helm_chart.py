"""Render the Helm chart (ops/helm/corral) with Helm's own engine, and the schemas its
manifests are checked against (test helper).

No registry this project reaches ships a `helm` binary for Linux, so the chart is rendered by
helm-python-sdk (PyPI): Helm 4's Go SDK, the code behind `helm lint` and `helm template`,
called through its C library. Kubernetes' own kinds are checked with kubernetes-validate's
strict schemas; KEDA's and the Prometheus Operator's with the schemas of the models
cloudcoil-models-keda and cloudcoil-models-prometheus-operator generate from those projects'
CRDs, made strict the same way (a field the CRD does not define is refused).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

from harness import REPO

CHART = REPO / "ops" / "helm" / "corral"
KUBE_VERSION = "1.30"
RELEASE = "demo"
NAMESPACE = "corral"
FULL = f"{RELEASE}-corral"
SEED = "0123456789abcdef0123456789abcdef-test-seed"
# The chart's defaults need a seed (or existing Secrets): every variant below starts here.
BASE: dict[str, Any] = {"secrets": {"seed": SEED}}


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Values layered as `helm -f a -f b` layers them (maps merge, the rest is replaced)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def render(
    values: dict[str, Any], release: str = RELEASE, *, fresh: bool = False
) -> list[dict[str, Any]]:
    """The chart's manifests for ``values``, as `helm template` would print them (a copy the
    caller may change). ``fresh``: render again rather than reuse an earlier render."""
    key = json.dumps(values, sort_keys=True)
    docs = _render.__wrapped__(key, release) if fresh else _render(key, release)
    return copy.deepcopy(docs)


@cache
def _render(values_json: str, release: str) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(
            json.loads(values_json), name=release, namespace=NAMESPACE, is_install=True
        )
    docs = []
    for name, text in sorted(files.items()):
        if name.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _strict(node: Any) -> None:
    if isinstance(node, dict):
        if "properties" in node:
            node.setdefault("additionalProperties", False)
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            # Go's regexp takes a flag group anywhere; Python's only at the start.
            node["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")
        for value in node.values():
            _strict(value)
    elif isinstance(node, list):
        for value in node:
            _strict(value)


@cache
def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The CRD's schema for ``kind``, refusing fields the CRD does not define, as a strict API
    server does."""
    if api_version == "keda.sh/v1alpha1":
        from cloudcoil.models.keda import v1alpha1 as keda

        model: Any = getattr(keda, kind)
    elif api_version == "monitoring.coreos.com/v1":
        from cloudcoil.models.prometheus_operator import v1 as monitoring

        model = getattr(monitoring, kind)
    else:
        raise KeyError(f"no CRD schema for {api_version} {kind}")
    schema: dict[str, Any] = model.model_json_schema(by_alias=True)
    _strict(schema)
    return schema


def validate(doc: dict[str, Any]) -> None:
    """Raise jsonschema's or kubernetes-validate's ValidationError if ``doc`` breaks its
    kind's schema."""
    if doc["apiVersion"] in {"keda.sh/v1alpha1", "monitoring.coreos.com/v1"}:
        jsonschema.validate(doc, crd_schema(doc["apiVersion"], doc["kind"]))
    else:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
