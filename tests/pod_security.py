"""Kubernetes' Pod Security Standards, "restricted" level, as checks on a pod spec (test helper).

No policy tool installs from the registries this project reaches (the admission plugin is Go;
kyverno and the like ship binaries), so each check of the pod-security-admission library
(kubernetes/kubernetes, staging/src/k8s.io/pod-security-admission/policy/check_<id>.go) is
written here again from its documented rule: the baseline checks, which "restricted" includes,
then the restricted ones. :func:`violations` returns "<check id>: <detail>" for each breach.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# check_sysctls.go: the sysctls baseline allows.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
# check_capabilities_baseline.go: what baseline lets a container add.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# check_restrictedVolumes.go: the only volume sources restricted allows.
RESTRICTED_VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})


def pod_specs(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod spec a workload object runs (Deployment, StatefulSet, DaemonSet, Job, Pod)."""
    kind = doc.get("kind")
    if kind == "Pod":
        yield doc["spec"]
    elif kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
        yield doc["spec"]["template"]["spec"]
    elif kind == "CronJob":
        yield doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field) or []


def violations(spec: dict[str, Any]) -> list[str]:
    """Every breach of the "restricted" level in one pod spec."""
    found: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    containers = list(_containers(spec))

    def sc(c: dict[str, Any]) -> dict[str, Any]:
        return c.get("securityContext") or {}

    # --- baseline ---
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"hostNamespaces: {field}")
    for c in containers:
        name = c["name"]
        if sc(c).get("privileged"):
            found.append(f"privileged: {name}")
        added = set((sc(c).get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"capabilities_baseline: {name} adds {sorted(added)}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"hostPorts: {name}")
        if (sc(c).get("procMount") or "Default") != "Default":
            found.append(f"procMount: {name}")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            handler = c.get(probe) or {}
            for action in ("httpGet", "tcpSocket"):
                if (handler.get(action) or {}).get("host"):
                    found.append(f"hostProbesAndhostLifecycle: {name} {probe}")
        for hook in (c.get("lifecycle") or {}).values():
            for action in ("httpGet", "tcpSocket"):
                if (hook.get(action) or {}).get("host"):
                    found.append(f"hostProbesAndhostLifecycle: {name} lifecycle")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f"hostPathVolumes: {volume['name']}")
    for holder in [pod_sc, *(sc(c) for c in containers)]:
        if (holder.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append("appArmorProfile: Unconfined")
        selinux = holder.get("seLinuxOptions") or {}
        if (
            selinux.get("type", "") not in SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            found.append(f"seLinuxOptions: {selinux}")
        if (holder.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append("seccompProfile_baseline: Unconfined")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl['name']}")

    # --- restricted ---
    for volume in spec.get("volumes") or []:
        sources = set(volume) - {"name"}
        if not sources <= RESTRICTED_VOLUME_SOURCES:
            found.append(f"restrictedVolumes: {volume['name']} uses {sorted(sources)}")
    for c in containers:
        name = c["name"]
        if sc(c).get("allowPrivilegeEscalation") is not False:
            found.append(f"allowPrivilegeEscalation: {name} does not set it false")
        caps = sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"capabilities_restricted: {name} does not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities_restricted: {name} adds {caps['add']}")
        non_root = sc(c).get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"runAsNonRoot: {name} may run as root")
        if sc(c).get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.append(f"runAsUser: {name} runs as 0")
        seccomp = (sc(c).get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            found.append(f"seccompProfile_restricted: {name} has {seccomp or 'none'}")
    return found
