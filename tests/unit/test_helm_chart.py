"""The Helm chart (ops/helm/corral) lints and renders with Helm's own engine, its manifests
pass the Kubernetes, KEDA and Prometheus Operator schemas, the KEDA objects scale each worker
role on exactly the queues it consumes, and its Secret is the same on every render of the same
values (an offline `helm template`, as ArgoCD and Flux run it, rotates nothing).

How the chart is rendered and checked without a `helm` binary: tests/helm_chart.py. Where a
`helm` binary is on PATH, `helm lint --strict` and `helm template` run too.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
from helm_chart import BASE, CHART, FULL, KUBE_VERSION, RELEASE, SEED, merged, of_kind, render
from helm_chart import validate as validate_manifest

from corral.services.providers.registry import registered_clouds
from corral.services.queues import dispatch

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
# Everything optional switched on: monitoring, the Ingress, two beats.
EVERYTHING = {
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "api": {"ingress": {"enabled": True, "host": "corral.example.com"}},
    "beat": {"replicas": 2},
}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": BASE,
    # Every secret is an existing one: no seed needed, no Secret of the chart's own.
    "external-redis": EXTERNAL,
    "no-keda-no-auth": merged(
        BASE, {"keda": {"enabled": False}, "redis": {"auth": {"enabled": False}}}
    ),
    "ephemeral-redis": merged(
        BASE, {"redis": {"persistence": {"enabled": False}}, "nodeApiUrl": "http://x"}
    ),
    "everything": merged(BASE, EVERYTHING),
}


def test_helm_lint_passes_strict() -> None:
    for values in VARIANTS.values():
        report = helm.lint(str(CHART), values, strict=True, kube_version=f"v{KUBE_VERSION}.0")
        assert report["errors"] == [], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_passes_its_schema(variant: str) -> None:
    docs = render(VARIANTS[variant])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ServiceAccount"} <= kinds
    if variant == "everything":
        assert {"ServiceMonitor", "PrometheusRule", "Ingress", "NetworkPolicy"} <= kinds
        assert {"PodDisruptionBudget", "ScaledObject", "Secret", "StatefulSet"} <= kinds
    for doc in docs:
        try:
            validate_manifest(doc)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as exc:
            where = f"{variant}: {doc['kind']} {doc['metadata']['name']}"
            pytest.fail(f"{where}: {exc.message} at {list(exc.absolute_path)}")


@pytest.mark.parametrize(
    ("kind", "path", "field"),
    [
        ("Deployment", ["spec"], "replica"),
        ("ScaledObject", ["spec"], "minReplicas"),
        ("ServiceMonitor", ["spec", "endpoints", 0], "scrape_interval"),
        ("PrometheusRule", ["spec", "groups", 0, "rules", 0], "severity"),
        ("PodDisruptionBudget", ["spec"], "maxUnavailble"),
    ],
)
def test_the_schemas_refuse_a_wrong_field(kind: str, path: list[Any], field: str) -> None:
    """The checks above can fail: a misspelt field is refused by every kind's schema."""
    [doc, *_] = of_kind(render(VARIANTS["everything"]), kind).values()
    node = doc
    for step in path:
        node = node[step]
    node[field] = 1
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate_manifest(doc)


def secret_data(values: dict[str, Any], release: str = RELEASE) -> dict[str, str]:
    docs = render(values, release, fresh=True)
    return {
        key: base64.b64decode(value).decode()
        for secret in of_kind(docs, "Secret").values()
        for key, value in secret["data"].items()
    }


def test_two_renders_give_the_same_secrets() -> None:
    """The issue's "rendered twice gives the same secrets": an offline render (no cluster to
    look in, as ArgoCD's and Flux's) is a pure function of the values."""
    first, second = secret_data(BASE), secret_data(BASE)
    assert set(first) == {"api-token", "flower-password", "basic-auth", "redis-password"}
    assert first == second
    # ... and every manifest, the pods' secret checksums with them: no needless rollout.
    everything = VARIANTS["everything"]
    assert render(everything, fresh=True) == render(everything, fresh=True)
    # The values are the seed's, not a constant: derived per key and per release.
    token, redis_pw = first["api-token"], first["redis-password"]
    assert token == hashlib.sha256(f"corral/{SEED}/{RELEASE}/api-token".encode()).hexdigest()
    assert len({token, redis_pw, first["flower-password"]}) == 3
    assert secret_data(merged(BASE, {"secrets": {"seed": "f" * 32}}))["api-token"] != token
    assert secret_data(BASE, release="other")["api-token"] != token
    assert first["basic-auth"] == f"corral:{first['flower-password']}"
    # Hex only: the Redis password sits inside CORRAL_REDIS_URL.
    assert all(c in "0123456789abcdef" for c in redis_pw)


def test_given_values_win_over_the_seed() -> None:
    values = merged(BASE, {"apiToken": {"value": "tok"}, "redis": {"auth": {"password": "rpw"}}})
    data = secret_data(values)
    assert (data["api-token"], data["redis-password"]) == ("tok", "rpw")


def test_without_seed_or_secrets_the_chart_refuses_by_name() -> None:
    with pytest.raises(helm.HelmError, match=r"secrets\.seed is required to derive api-token"):
        render({})
    with pytest.raises(helm.HelmValuesError, match="seed"):
        render({"secrets": {"seed": "too-short"}})


def test_existing_secrets_need_no_seed_and_are_referenced() -> None:
    values = {
        "apiToken": {"existingSecret": "tok", "key": "t"},
        "flower": {"existingSecret": "fl"},
        "redis": {"auth": {"existingSecret": "rd", "existingSecretKey": "pw"}},
    }
    docs = render(values)
    assert not of_kind(docs, "Secret")  # nothing of the chart's own to keep
    refs = {
        (e["name"], e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for kind in ("Deployment", "StatefulSet")
        for d in of_kind(docs, kind).values()
        for c in d["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
        if "valueFrom" in e
    }
    assert refs == {
        ("CORRAL_API_TOKEN", "tok", "t"),
        ("FLOWER_BASIC_AUTH", "fl", "basic-auth"),
        ("REDIS_PASSWORD", "rd", "pw"),
        ("REDISCLI_AUTH", "rd", "pw"),
    }
    [auth] = of_kind(docs, "TriggerAuthentication").values()
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "password", "name": "rd", "key": "pw"}]


def test_only_the_api_gets_the_api_token() -> None:
    docs = render(VARIANTS["everything"])
    holders = {
        name
        for kind in ("Deployment", "StatefulSet")
        for name, d in of_kind(docs, kind).items()
        for c in d["spec"]["template"]["spec"]["containers"]
        if any(e["name"] == "CORRAL_API_TOKEN" for e in c.get("env", []))
    }
    assert holders == {f"{FULL}-api"}


@pytest.mark.parametrize("variant", ["defaults", "external-redis"])
def test_each_worker_role_scales_on_exactly_its_queues(variant: str) -> None:
    docs = render(VARIANTS[variant])
    deployments = of_kind(docs, "Deployment")
    scaled = of_kind(docs, "ScaledObject")
    roles = dispatch.role_queues(registered_clouds())
    assert len(scaled) == len(roles)
    for role, queues in roles.items():
        so = scaled[f"{FULL}-worker-{role}"]
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
        assert address == {f"{FULL}-redis:6379"}
        assert f"{FULL}-redis" in of_kind(docs, "Service")
    else:
        assert address == {"redis.example.internal:6380"}
        metadata = triggers[0]["metadata"]
        assert (metadata["databaseIndex"], metadata["enableTLS"]) == ("2", "true")


def test_the_redis_password_comes_from_a_secret_everywhere() -> None:
    for variant, secret, key in (
        ("defaults", f"{FULL}-secrets", "redis-password"),
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


def test_the_bundled_redis_keeps_its_password_off_the_command_line() -> None:
    [redis] = of_kind(render(BASE), "StatefulSet").values()
    [container] = redis["spec"]["template"]["spec"]["containers"]
    script = " ".join(container["args"])
    assert "requirepass" in script and "$REDISCLI_AUTH" in script
    assert "--requirepass" not in script  # a flag would show in the node's `ps`
    [env] = container["env"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": f"{FULL}-secrets", "key": "redis-password"}


def test_the_bundled_redis_has_a_memory_limit_and_never_evicts() -> None:
    """Issue 47: Redis ran with no memory limit; the chart's is below the pod's."""
    [redis] = of_kind(
        render(merged(BASE, {"redis": {"maxmemory": "512mb"}})), "StatefulSet"
    ).values()
    [container] = redis["spec"]["template"]["spec"]["containers"]
    script = " ".join(container["args"])
    assert "--maxmemory 512mb" in script and "--maxmemory-policy noeviction" in script


def test_a_bundle_store_reaches_every_corral_pod() -> None:
    """Bundles live outside Redis: a bucket named in every Corral container's environment, or
    a shared claim mounted where the folder store is (every API replica must see it)."""
    values = {"bundles": {"store": "s3://team-bundles/corral", "existingClaim": "bundles-rwx"}}
    for name, deployment in of_kind(render(merged(BASE, values)), "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        [container] = pod["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if "CORRAL_HOME" not in env:
            continue  # not a Corral process
        assert env["CORRAL_BUNDLE_STORE"] == "s3://team-bundles/corral", name
        claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert claims == [
            {"name": "bundles", "persistentVolumeClaim": {"claimName": "bundles-rwx"}}
        ], name
        assert {"name": "bundles", "mountPath": "/var/lib/corral/bundles"} in container[
            "volumeMounts"
        ]
    with pytest.raises(Exception, match="store"):
        render(merged(BASE, {"bundles": {"store": "gs://not-yet"}}))


def test_workers_serve_metrics_on_the_port_their_pods_announce() -> None:
    docs = render(merged(BASE, {"workers": {"metricsPort": 9900}}))
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
        for e in of_kind(docs, "Deployment")[f"{FULL}-api"]["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
        if e["name"] == "CORRAL_REDIS_URL"
    )
    assert url == f"redis://{FULL}-redis:6379/0"


def test_an_external_redis_without_a_host_is_refused_by_name() -> None:
    with pytest.raises(helm.HelmError, match=r"externalRedis\.host is required"):
        render(merged(BASE, {"redis": {"enabled": False}}))


def test_with_the_helm_binary_when_there_is_one() -> None:
    exe = shutil.which("helm")
    if exe is None:
        pytest.skip("no helm binary on PATH (none is packaged where this project installs from)")
    seed = ["--set", f"secrets.seed={SEED}"]
    subprocess.run([exe, "lint", "--strict", str(CHART), *seed], check=True, capture_output=True)
    done = subprocess.run(
        [exe, "template", RELEASE, str(CHART), *seed], check=True, capture_output=True, text=True
    )
    assert "kind: ScaledObject" in done.stdout


def test_values_are_checked_against_the_chart_schema() -> None:
    """values.schema.json: a misspelt role setting or a bad log format fails before anything
    is rendered, naming the value."""
    with pytest.raises(helm.HelmValuesError, match="logFormat"):
        render(merged(BASE, {"logFormat": "yaml"}))
    with pytest.raises(helm.HelmValuesError, match="minReplica"):
        render(merged(BASE, {"workers": {"roles": {"schedule": {"minReplica": 0}}}}))
