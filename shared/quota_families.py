"""Quota families: the account limits a machine counts against, named as each cloud names them.

A quota error blocks one family in one region (:class:`~corral.shared.placement.Block` with a
``quota_family``), not the region: a T4 quota used up says nothing about CPU machines there.
The family's name carries the market where the cloud counts markets apart (AWS's spot and
on-demand vCPU limits, GCP's ``PREEMPTIBLE_`` quotas), so one name is (family, market).

Why the facts live here and not only in each provider: a block is matched against every
candidate in the pure core (failover's walk, the planner, ``why`` and the simulator, which must
play the same rules), so the families of a candidate are a pure function of its cloud,
instance type, market and accelerator. The providers name the family of the error they raise
with the same function (AWS: the instance type's class; GCP: the metric its message names).

Sources of each fact:
- AWS: the EC2 User Guide, "Amazon EC2 service quotas" / "On-Demand Instance quotas": vCPU
  limits are per instance-family class, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
  instances", "... G and VT instances", "... P instances", "... F instances", "... X
  instances", "... Inf instances", "... DL instances", "... Trn instances", "... HPC
  instances", "... High Memory instances" (u-*); and "Spot Instance quotas": "All Standard (A,
  C, D, H, I, M, R, T, Z) Spot Instance Requests", "All G and VT Spot ...", and so on, counted
  apart from on-demand. On-Demand Capacity Reservations count against the on-demand limits.
- GCP: Compute Engine "Allocation quotas": GPUs per type per region (metric ``NVIDIA_T4_GPUS``,
  ``NVIDIA_A100_GPUS``, ``NVIDIA_A100_80GB_GPUS``, ``NVIDIA_L4_GPUS``, ...), their preemptible
  (spot) twins ``PREEMPTIBLE_NVIDIA_T4_GPUS``...; vCPUs per region as ``CPUS`` for N1 and the
  older series and per series for the others (``E2_CPUS``, ``N2_CPUS``, ``N2D_CPUS``,
  ``C2_CPUS``, ``A2_CPUS``...: the metrics of the Compute API's ``Quota.Metric`` enum), spot
  vCPUs as ``PREEMPTIBLE_CPUS``.
- Kubernetes: a ResourceQuota limits each resource of a namespace apart ("Resource Quotas":
  ``requests.cpu``, ``limits.memory``, ``requests.nvidia.com/gpu``, ``pods``...): a family is
  ``<namespace>:<resource>`` (the namespace is the provider's zone).
- Every other cloud (the local cloud among them): ``<market>:<accelerator or cpu>``; the local
  cloud's injected quota errors may name another family.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

# --- AWS --------------------------------------------------------------------------------------
# The letters an instance family starts with -> its vCPU quota class (see the module's sources).
AWS_CLASS_OF_LETTERS: dict[str, str] = {
    **{letter: "standard" for letter in "acdhimrtz"},
    "g": "g-vt",
    "vt": "g-vt",
    "p": "p",
    "f": "f",
    "x": "x",
    "inf": "inf",
    "dl": "dl",
    "trn": "trn",
    "hpc": "hpc",
}


def aws_vcpu_class(instance_type: str) -> str:
    """The vCPU quota class of an EC2 instance type: ``g4dn.xlarge`` -> ``g-vt``, ``inf2.xlarge``
    -> ``inf``, ``m5.large`` -> ``standard``, ``u-6tb1.metal`` -> ``high-memory``. A family this
    table does not know is its own class (its letters): blocking it blocks only its own kind."""
    series = instance_type.split(".", 1)[0].lower()
    if series.startswith("u-"):
        return "high-memory"
    letters = ""
    for ch in series:
        if not ch.isalpha():
            break
        letters += ch
    return AWS_CLASS_OF_LETTERS.get(letters, letters or series)


def _aws(instance_type: str, market: str, accelerator: str | None, zone: str) -> tuple[str, ...]:
    # Spot requests count against the spot limits; on-demand and reserved (capacity
    # reservations) against the on-demand ones.
    kind = "spot" if market == "spot" else "on_demand"
    return (f"{kind}:{aws_vcpu_class(instance_type)}",)


# --- GCP --------------------------------------------------------------------------------------
# Machine series with a vCPU quota of their own; the rest count against CPUS.
# The Compute API's Quota.Metric enum (google.cloud.compute.v1) names them: A2_CPUS, C2_CPUS,
# C2D_CPUS, C3_CPUS, E2_CPUS, M1_CPUS, M2_CPUS, M3_CPUS, N2_CPUS, N2A_CPUS, N2D_CPUS, T2A_CPUS,
# T2D_CPUS, ...; N1 (and older) count against CPUS.
GCP_SERIES_CPU_QUOTAS = frozenset(
    {
        "a2",
        "a3",
        "c2",
        "c2d",
        "c3",
        "c3d",
        "e2",
        "g2",
        "h3",
        "m1",
        "m2",
        "m3",
        "n2",
        "n2a",
        "n2d",
        "t2a",
        "t2d",
        "z3",
    }
)


def gcp_gpu_metric(accelerator: str, market: str) -> str:
    """The regional quota metric of a GPU type: ``T4`` -> ``NVIDIA_T4_GPUS`` (spot:
    ``PREEMPTIBLE_NVIDIA_T4_GPUS``); ``A100-80GB`` -> ``NVIDIA_A100_80GB_GPUS``."""
    name = accelerator.upper().replace("-", "_")
    metric = f"NVIDIA_{name}_GPUS" if not name.startswith("NVIDIA_") else f"{name}_GPUS"
    return f"PREEMPTIBLE_{metric}" if market == "spot" else metric


def gcp_cpu_metric(instance_type: str, market: str) -> str:
    """The regional vCPU quota metric of a machine type: ``n1-standard-8`` -> ``CPUS``,
    ``a2-highgpu-1g`` -> ``A2_CPUS``; spot vCPUs -> ``PREEMPTIBLE_CPUS``."""
    if market == "spot":
        return "PREEMPTIBLE_CPUS"
    series = instance_type.split("-", 1)[0].lower()
    return f"{series.upper()}_CPUS" if series in GCP_SERIES_CPU_QUOTAS else "CPUS"


def _gcp(instance_type: str, market: str, accelerator: str | None, zone: str) -> tuple[str, ...]:
    cpus = gcp_cpu_metric(instance_type, market)
    if accelerator is None:
        return (cpus,)
    return (gcp_gpu_metric(accelerator, market), cpus)


# --- Kubernetes -------------------------------------------------------------------------------
K8S_GPU_RESOURCE = "nvidia.com/gpu"
_K8S_CPU = ("cpu", "requests.cpu", "limits.cpu", "memory", "requests.memory", "limits.memory")
_K8S_PODS = ("pods", "count/pods")
_K8S_GPU = (K8S_GPU_RESOURCE, f"requests.{K8S_GPU_RESOURCE}", f"limits.{K8S_GPU_RESOURCE}")


def k8s_family(namespace: str, resource: str) -> str:
    return f"{namespace}:{resource}"


def _kubernetes(
    instance_type: str, market: str, accelerator: str | None, zone: str
) -> tuple[str, ...]:
    resources = (*(_K8S_GPU if accelerator else ()), *_K8S_CPU, *_K8S_PODS)
    return tuple(k8s_family(zone, r) for r in resources)


# --- any other cloud --------------------------------------------------------------------------
def default_family(market: str, accelerator: str | None) -> str:
    """``on_demand:A100``, ``spot:cpu``: one quota per accelerator kind (or CPUs) and market."""
    kind = "spot" if market == "spot" else "on_demand"
    return f"{kind}:{accelerator.upper() if accelerator else 'cpu'}"


def _default(
    instance_type: str, market: str, accelerator: str | None, zone: str
) -> tuple[str, ...]:
    return (default_family(market, accelerator),)


# A cloud's families of a machine, the one most its own first (its GPUs' before its CPUs').
Rule = Callable[[str, str, str | None, str], tuple[str, ...]]
RULES: dict[str, Rule] = {"aws": _aws, "gcp": _gcp, "kubernetes": _kubernetes}


@lru_cache(maxsize=65536)
def quota_families(
    cloud: str, instance_type: str, market: str, accelerator: str | None = None, zone: str = ""
) -> frozenset[str]:
    """The quota families a machine of this type and market counts against (``accelerator``:
    its accelerator kind, None for CPU machines; ``zone``: where it runs, for clouds whose
    quotas are per zone, such as a Kubernetes namespace)."""
    return frozenset(RULES.get(cloud, _default)(instance_type, market, accelerator, zone))


@lru_cache(maxsize=65536)
def primary_family(
    cloud: str, instance_type: str, market: str, accelerator: str | None = None, zone: str = ""
) -> str | None:
    """The family a quota error names when the cloud's answer does not say: the one most
    particular to this machine (a GPU machine's GPU quota, not the CPUs it shares with every
    machine of the region)."""
    found = RULES.get(cloud, _default)(instance_type, market, accelerator, zone)
    return found[0] if found else None
