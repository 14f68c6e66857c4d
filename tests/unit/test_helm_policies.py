"""The chart's pods pass Pod Security "restricted", every process has probes, and the
cluster-level guards hold together: each PodDisruptionBudget and spread constraint selects its
own component's pods, the NetworkPolicy lets exactly Corral's processes (and KEDA) reach Redis,
and the Ingress serves the API over TLS at the address nodes are told to call.

"restricted" is checked by tests/pod_security.py, which restates the checks of Kubernetes'
pod-security-admission library (no policy tool installs here); its cases below come from that
library's tests (staging/src/k8s.io/pod-security-admission/policy/check_*_test.go).
"""

from __future__ import annotations

from typing import Any

import pytest
from helm_chart import BASE, FULL, merged, of_kind, render
from pod_security import pod_specs, violations

EVERYTHING = merged(
    BASE,
    {
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        "api": {"ingress": {"enabled": True, "host": "corral.example.com"}},
        "beat": {"replicas": 2},
        "redis": {"persistence": {"enabled": False}},
    },
)
VARIANTS = {
    "defaults": BASE,
    "everything": EVERYTHING,
    "no-auth": merged(BASE, {"redis": {"auth": {"enabled": False}}, "keda": {"enabled": False}}),
}


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return of_kind(docs, "Deployment") | of_kind(docs, "StatefulSet")


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector selects ``labels``."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        present, value = expr["key"] in labels, labels.get(expr["key"])
        op = expr["operator"]
        if (op == "In" and value not in expr["values"]) or (op == "Exists" and not present):
            return False
        if (op == "NotIn" and value in expr["values"]) or (op == "DoesNotExist" and present):
            return False
    return True


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_pod_passes_pod_security_restricted(variant: str) -> None:
    pods = 0
    for name, doc in workloads(render(VARIANTS[variant])).items():
        for spec in pod_specs(doc):
            pods += 1
            assert violations(spec) == [], name
            # Not a Pod Security rule, but Corral never calls the Kubernetes API: no token,
            # even on a service account of the user's that would mount one.
            assert spec["automountServiceAccountToken"] is False, name
    assert pods >= 6  # api, three worker roles, beat, flower (and redis)


@pytest.mark.parametrize(
    ("change", "check"),
    [
        # check_seccompProfile_restricted_test.go: no profile, and Unconfined, are refused.
        (lambda pod, c: pod["securityContext"].pop("seccompProfile"), "seccompProfile_restricted"),
        (
            lambda pod, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            "seccompProfile_baseline",
        ),
        # check_runAsNonRoot_test.go: a container's explicit false beats the pod's true.
        (lambda pod, c: c["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
        # check_runAsUser_test.go: uid 0 anywhere.
        (lambda pod, c: c["securityContext"].update(runAsUser=0), "runAsUser"),
        # check_allowPrivilegeEscalation_test.go: unset counts as allowed.
        (
            lambda pod, c: c["securityContext"].pop("allowPrivilegeEscalation"),
            "allowPrivilegeEscalation",
        ),
        # check_capabilities_restricted_test.go: ALL must be dropped; only NET_BIND_SERVICE added.
        (lambda pod, c: c["securityContext"].update(capabilities={}), "capabilities_restricted"),
        (
            lambda pod, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "capabilities_restricted",
        ),
        # check_restrictedVolumes_test.go and check_hostPathVolumes_test.go.
        (
            lambda pod, c: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "hostPathVolumes",
        ),
        (
            lambda pod, c: pod["volumes"].append(
                {"name": "n", "nfs": {"server": "x", "path": "/"}}
            ),
            "restrictedVolumes",
        ),
        # check_hostNamespaces_test.go, check_hostPorts_test.go, check_privileged_test.go.
        (lambda pod, c: pod.update(hostNetwork=True), "hostNamespaces"),
        (lambda pod, c: c["ports"][0].update(hostPort=8080), "hostPorts"),
        (lambda pod, c: c["securityContext"].update(privileged=True), "privileged"),
    ],
)
def test_the_restricted_check_can_fail(change: Any, check: str) -> None:
    """The check above is not vacuous: each of these breaches of the API's pod is named."""
    api = of_kind(render(BASE), "Deployment")[f"{FULL}-api"]
    pod = api["spec"]["template"]["spec"]
    change(pod, pod["containers"][0])
    assert any(v.startswith(f"{check}:") for v in violations(pod)), violations(pod)


def test_every_container_has_liveness_and_readiness_probes() -> None:
    for name, doc in workloads(render(EVERYTHING)).items():
        for container in doc["spec"]["template"]["spec"]["containers"]:
            where = f"{name}/{container['name']}"
            assert "livenessProbe" in container, where
            if not name.endswith("-beat"):  # beat serves nothing: nothing to route to it
                assert "readinessProbe" in container, where
            ports = {p["name"] for p in container.get("ports", [])}
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = container.get(kind, {})
                for action in ("httpGet", "tcpSocket"):
                    if action in probe:  # a probe on a named port names a port it has
                        assert probe[action]["port"] in ports, f"{where} {kind}"


def test_worker_and_flower_probes_ask_what_those_processes_serve() -> None:
    docs = workloads(render(EVERYTHING))
    for role in ("schedule", "provision", "autoscale"):
        [worker] = docs[f"{FULL}-worker-{role}"]["spec"]["template"]["spec"]["containers"]
        assert worker["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
        assert "--metrics-port" in worker["args"]
    [flower] = docs[f"{FULL}-flower"]["spec"]["template"]["spec"]["containers"]
    assert flower["livenessProbe"]["httpGet"]["path"] == "/healthcheck"  # Flower's, no login
    [beat] = docs[f"{FULL}-beat"]["spec"]["template"]["spec"]["containers"]
    command = beat["livenessProbe"]["exec"]["command"]
    assert command[:2] == ["python", "-c"] and "redbeat::schedule" in command[2]
    assert "lag > 300" in command[2]  # beat.maxLagSeconds


def test_disruption_budgets_cover_the_api_and_each_worker_role() -> None:
    docs = render(EVERYTHING)
    budgets = of_kind(docs, "PodDisruptionBudget")
    pods = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in workloads(docs).items()}
    covered = {
        name
        for budget in budgets.values()
        for name, labels in pods.items()
        if matches(budget["spec"]["selector"], labels)
    }
    expected = {f"{FULL}-api", f"{FULL}-beat"} | {
        f"{FULL}-worker-{r}" for r in ("schedule", "provision", "autoscale")
    }
    assert covered == expected
    # Each budget selects one component's pods, never two.
    for budget in budgets.values():
        assert sum(matches(budget["spec"]["selector"], labels) for labels in pods.values()) == 1
        assert budget["spec"]["maxUnavailable"] == 1
    # One beat: a budget would only block drains.
    assert f"{FULL}-beat" not in of_kind(render(BASE), "PodDisruptionBudget")


def test_pods_spread_over_zones_and_nodes_among_their_own_kind() -> None:
    for name, doc in workloads(render(EVERYTHING)).items():
        spec, labels = (
            doc["spec"]["template"]["spec"],
            doc["spec"]["template"]["metadata"]["labels"],
        )
        if name.endswith("-redis") or name.endswith("-flower"):
            continue  # one replica each
        constraints = spec["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in constraints} == {
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        }
        for c in constraints:
            assert matches(c["labelSelector"], labels), name
            others = [d for n, d in workloads(render(EVERYTHING)).items() if n != name]
            assert not any(
                matches(c["labelSelector"], d["spec"]["template"]["metadata"]["labels"])
                for d in others
            ), name


def test_only_corral_and_keda_reach_redis() -> None:
    docs = render(EVERYTHING)
    [policy] = of_kind(docs, "NetworkPolicy").values()
    pods = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in workloads(docs).items()}
    redis_labels = pods.pop(f"{FULL}-redis")
    assert matches(policy["spec"]["podSelector"], redis_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "redis", "protocol": "TCP"}]
    [corral, keda] = rule["from"]
    # Every Corral process of this release, and nothing else of it (not Redis itself).
    assert {n for n, labels in pods.items() if matches(corral["podSelector"], labels)} == set(pods)
    assert not matches(corral["podSelector"], redis_labels)
    other_release = {k: v.replace("demo", "other") for k, v in pods[f"{FULL}-api"].items()}
    assert not matches(corral["podSelector"], other_release)
    assert keda["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}
    # Without KEDA, no door for it; with an external Redis, no policy at all.
    no_keda = render(merged(BASE, {"keda": {"enabled": False}}))
    [policy] = of_kind(no_keda, "NetworkPolicy").values()
    assert len(policy["spec"]["ingress"][0]["from"]) == 1
    external = merged(
        BASE, {"redis": {"enabled": False}, "externalRedis": {"host": "r.example.internal"}}
    )
    assert not of_kind(render(external), "NetworkPolicy")


def test_the_ingress_serves_the_api_over_tls_where_nodes_call() -> None:
    docs = render(EVERYTHING)
    [ingress] = of_kind(docs, "Ingress").values()
    assert ingress["spec"]["tls"] == [
        {"hosts": ["corral.example.com"], "secretName": f"{FULL}-api-tls"}
    ]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "corral.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    service = of_kind(docs, "Service")[backend["name"]]
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    for name, doc in workloads(docs).items():
        if name.endswith("-redis"):
            continue
        env = {
            e["name"]: e.get("value")
            for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["CORRAL_NODE_API_URL"] == "https://corral.example.com", name
    # An explicit nodeApiUrl wins; no Ingress and no nodeApiUrl: nodes get no address.
    explicit = render(merged(EVERYTHING, {"nodeApiUrl": "https://api.example.net"}))
    [api] = [d for n, d in of_kind(explicit, "Deployment").items() if n.endswith("-api")]
    env = {
        e["name"]: e.get("value") for e in api["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["CORRAL_NODE_API_URL"] == "https://api.example.net"
    assert not of_kind(render(BASE), "Ingress")


def test_an_ingress_without_a_host_is_refused_by_name() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=r"api\.ingress\.host is required"):
        render(merged(BASE, {"api": {"ingress": {"enabled": True}}}))
