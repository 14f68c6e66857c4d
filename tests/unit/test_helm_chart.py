"""The Helm chart (ops/helm/corral) lints and renders with Helm's own engine, its manifests
pass the Kubernetes and KEDA schemas, and the KEDA objects scale each worker role on exactly
the queues it consumes.

No registry this project reaches ships a `helm` binary for Linux, so the chart is linted and
rendered by helm-python-sdk (PyPI): Helm 4's Go SDK, the code behind `helm lint` and
`helm template`, called through its C library. The rendered manifests are then checked with
kubernetes-validate's strict schemas (unknown fields refused) and, for KEDA's kinds, with the
schema of the models cloudcoil-models-keda generates from KEDA's CRDs, made strict the same
way. Where a `helm` binary is on PATH, `helm lint --strict` and `helm template` run too.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from corral.services.queues import dispatch

from harness import REPO

CHART = REPO / "ops" / "helm" / "corral"
KUBE_VERSION = "1.30"
RELEASE = "demo"
EXTERNAL = {
    "redis": {"enabled": False},
    "externalRedis": {
        "host": "redis.example.internal",
        "port": 6380,
        "db": 2,
        "tls": True,
        "passwordSecret": {"name": "redis-creds", "key": "pw"},
    },
    "keda": {"enabled": True},
    "flower": {"enabled": False},
    "apiToken": {"existingSecret": "corral-token"},
}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external-redis": EXTERNAL,
    "no-keda-no-auth": {"keda": {"enabled": False}, "redis": {"auth": {"enabled": False}}},
    "ephemeral-redis": {"redis": {"persistence": {"enabled": False}}, "nodeApiUrl": "http://x"},
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's manifests for ``values``, as `helm template` would print them."""
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name=RELEASE, namespace="corral", is_install=True)
    docs = []
    for name, text in sorted(files.items()):
        if name.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@cache
def keda_schema(kind: str) -> dict[str, Any]:
    """KEDA's schema for ``kind`` (from its CRDs, as cloudcoil-models-keda carries them),
    refusing fields the CRD does not define, as a strict API server does."""
    from cloudcoil.models.keda import v1alpha1

    schema: dict[str, Any] = getattr(v1alpha1, kind).model_json_schema(by_alias=True)

    def strict(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                strict(value)
        elif isinstance(node, list):
            for value in node:
                strict(value)

    strict(schema)
    return schema


def test_helm_lint_passes_strict() -> None:
    for values in VARIANTS.values():
        report = helm.lint(str(CHART), values, strict=True, kube_version=f"v{KUBE_VERSION}.0")
        assert report["errors"] == [], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_passes_its_schema(variant: str) -> None:
    docs = render(VARIANTS[variant])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "Secret", "ServiceAccount"} <= kinds
    for doc in docs:
        where = f"{variant}: {doc['kind']} {doc['metadata']['name']}"
        if doc["apiVersion"].startswith("keda.sh/"):
            try:
                jsonschema.validate(doc, keda_schema(doc["kind"]))
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {list(exc.absolute_path)}")
        else:
            try:
                kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {list(exc.absolute_path)}")


def test_the_schemas_refuse_a_wrong_field() -> None:
    """The checks above can fail: a misspelt field is refused by both schemas."""
    [deployment, *_] = of_kind(render({}), "Deployment").values()
    deployment["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)
    [scaled, *_] = of_kind(render({}), "ScaledObject").values()
    scaled["spec"]["minReplicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, keda_schema("ScaledObject"))


@pytest.mark.parametrize("variant", ["defaults", "external-redis"])
def test_each_worker_role_scales_on_exactly_its_queues(variant: str) -> None:
    docs = render(VARIANTS[variant])
    deployments = of_kind(docs, "Deployment")
    scaled = of_kind(docs, "ScaledObject")
    roles = dispatch.role_queues()
    assert len(scaled) == len(roles)
    for role, queues in roles.items():
        so = scaled[f"{RELEASE}-corral-worker-{role}"]
        triggers = so["spec"]["triggers"]
        assert [t["metadata"]["listName"] for t in triggers] == list(queues)
        assert {t["type"] for t in triggers} == {"redis"}
        # It scales the Deployment that runs that role.
        target = deployments[so["spec"]["scaleTargetRef"]["name"]]
        args = target["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--role") + 1] == role
        assert "replicas" not in target["spec"]  # KEDA owns the count
    address = {t["metadata"]["address"] for so in scaled.values() for t in so["spec"]["triggers"]}
    if variant == "defaults":
        assert address == {f"{RELEASE}-corral-redis:6379"}
        assert f"{RELEASE}-corral-redis" in of_kind(docs, "Service")
    else:
        assert address == {"redis.example.internal:6380"}
        metadata = triggers[0]["metadata"]
        assert (metadata["databaseIndex"], metadata["enableTLS"]) == ("2", "true")


def test_the_redis_password_comes_from_a_secret_everywhere() -> None:
    for variant, secret, key in (
        ("defaults", f"{RELEASE}-corral-secrets", "redis-password"),
        ("external-redis", "redis-creds", "pw"),
    ):
        docs = render(VARIANTS[variant])
        [auth] = of_kind(docs, "TriggerAuthentication").values()
        assert auth["spec"]["secretTargetRef"] == [
            {"parameter": "password", "name": secret, "key": key}
        ]
        for so in of_kind(docs, "ScaledObject").values():
            for trigger in so["spec"]["triggers"]:
                assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
        for deployment in of_kind(docs, "Deployment").values():
            env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            names = [e["name"] for e in env]
            url = next(e["value"] for e in env if e["name"] == "CORRAL_REDIS_URL")
            # Kubernetes expands $(REDIS_PASSWORD) only from a variable defined before it.
            assert "$(REDIS_PASSWORD)@" in url
            assert names.index("REDIS_PASSWORD") < names.index("CORRAL_REDIS_URL")
            ref = env[names.index("REDIS_PASSWORD")]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": secret, "key": key}
    url_external = "rediss://:$(REDIS_PASSWORD)@redis.example.internal:6380/2"
    assert url_external == url


def test_workers_serve_metrics_on_the_port_their_pods_announce() -> None:
    docs = render({"workers": {"metricsPort": 9900}})
    for name, deployment in of_kind(docs, "Deployment").items():
        pod = deployment["spec"]["template"]
        if "-worker-" not in name:
            continue
        [container] = pod["spec"]["containers"]
        args = container["args"]
        assert args[args.index("--metrics-port") + 1] == "9900"
        assert container["ports"] == [{"name": "metrics", "containerPort": 9900}]
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9900"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CORRAL_METRICS_HOST"] == "0.0.0.0"
        assert env["CORRAL_LOG_FORMAT"] == "json"


def test_without_keda_workers_have_a_fixed_count() -> None:
    docs = render(VARIANTS["no-keda-no-auth"])
    assert not of_kind(docs, "ScaledObject") and not of_kind(docs, "TriggerAuthentication")
    for name, deployment in of_kind(docs, "Deployment").items():
        if "-worker-" in name:
            assert deployment["spec"]["replicas"] == 1
    url = next(
        e["value"]
        for e in of_kind(docs, "Deployment")[f"{RELEASE}-corral-api"]["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
        if e["name"] == "CORRAL_REDIS_URL"
    )
    assert url == f"redis://{RELEASE}-corral-redis:6379/0"


def test_an_external_redis_without_a_host_is_refused_by_name() -> None:
    with pytest.raises(helm.HelmError, match=r"externalRedis\.host is required"):
        render({"redis": {"enabled": False}})


def test_with_the_helm_binary_when_there_is_one() -> None:
    exe = shutil.which("helm")
    if exe is None:
        pytest.skip("no helm binary on PATH (none is packaged where this project installs from)")
    subprocess.run([exe, "lint", "--strict", str(CHART)], check=True, capture_output=True)
    done = subprocess.run(
        [exe, "template", RELEASE, str(CHART)], check=True, capture_output=True, text=True
    )
    assert "kind: ScaledObject" in done.stdout


def test_values_are_checked_against_the_chart_schema() -> None:
    """values.schema.json: a misspelt role setting or a bad log format fails before anything
    is rendered, naming the value."""
    with pytest.raises(helm.HelmValuesError, match="logFormat"):
        render({"logFormat": "yaml"})
    with pytest.raises(helm.HelmValuesError, match="minReplica"):
        render({"workers": {"roles": {"schedule": {"minReplica": 0}}}})
