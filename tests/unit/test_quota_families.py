"""Quota families (issue #46 item 1): a quota error blocks what the cloud counts together, per
provider, and nothing else.

Sources of the facts asserted here:
- AWS: EC2 User Guide, "Amazon EC2 service quotas" (On-Demand Instance quotas): "Running
  On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "Running On-Demand G and VT
  instances", "Running On-Demand P instances", "... F", "... X", "... Inf", "... DL", "... Trn",
  "... HPC", "... High Memory instances"; Spot Instance quotas: "All Standard (A, C, D, H, I, M,
  R, T, Z) Spot Instance Requests", "All G and VT Spot Instance Requests", "All P Spot Instance
  Requests"..., separate from the on-demand ones.
- GCP: Compute Engine "Allocation quotas" (GPU quota, CPU quota, preemptible quotas): metrics
  ``NVIDIA_T4_GPUS``, ``NVIDIA_A100_80GB_GPUS``, ``NVIDIA_L4_GPUS`` per region; spot VMs count
  against ``PREEMPTIBLE_NVIDIA_T4_GPUS``, ``PREEMPTIBLE_CPUS``; ``CPUS`` for N1, and a quota per
  series for E2 (``E2_CPUS``), N2 (``N2_CPUS``), A2 (``A2_CPUS``)... (the Compute API's
  ``google.cloud.compute.v1.Quota.Metric`` enum lists each metric).
- Kubernetes: "Resource Quotas" (kubernetes.io/docs/concepts/policy/resource-quotas): per
  namespace, per resource (``requests.cpu``, ``requests.nvidia.com/gpu``, ``pods``); the quota
  admission refuses with "exceeded quota: <name>, requested: r=n, used: r=n, limited: r=n".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError

from corral.services.providers.aws.errors import classify, from_sdk_error, quota_family, with_family
from corral.services.providers.gcp.errors import classify as gcp_classify
from corral.services.providers.gcp.errors import detail_of
from corral.shared.errors import CapacityError, QuotaError, Scope
from corral.shared.placement import Ask, Block
from corral.shared.quota_families import (
    aws_vcpu_class,
    gcp_cpu_metric,
    gcp_gpu_metric,
    primary_family,
    quota_families,
)


@dataclass(frozen=True)
class Cand:
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str = "on_demand"
    accelerators: dict[str, int] = field(default_factory=dict)
    num_nodes: int = 1


# --- AWS: the vCPU quota class of an instance type --------------------------------------------
@pytest.mark.parametrize(
    ("instance_type", "klass"),
    [
        ("m5.large", "standard"),
        ("c6i.xlarge", "standard"),
        ("r5.2xlarge", "standard"),
        ("t3.micro", "standard"),
        ("z1d.large", "standard"),
        ("i4i.large", "standard"),
        ("d3.xlarge", "standard"),
        ("h1.2xlarge", "standard"),
        ("a1.medium", "standard"),
        ("g4dn.xlarge", "g-vt"),
        ("g5.48xlarge", "g-vt"),
        ("vt1.3xlarge", "g-vt"),
        ("p3.2xlarge", "p"),
        ("p4d.24xlarge", "p"),
        ("p5.48xlarge", "p"),
        ("f1.2xlarge", "f"),
        ("x2idn.16xlarge", "x"),
        ("inf2.xlarge", "inf"),
        ("dl1.24xlarge", "dl"),
        ("trn1.32xlarge", "trn"),
        ("hpc6a.48xlarge", "hpc"),
        ("u-6tb1.metal", "high-memory"),
    ],
)
def test_aws_vcpu_classes_follow_the_documented_limits(instance_type: str, klass: str) -> None:
    assert aws_vcpu_class(instance_type) == klass


def test_aws_spot_and_on_demand_are_counted_apart_and_reservations_as_on_demand() -> None:
    assert quota_families("aws", "g5.xlarge", "on_demand") == {"on_demand:g-vt"}
    assert quota_families("aws", "g5.xlarge", "spot") == {"spot:g-vt"}
    # On-Demand Capacity Reservations count against the on-demand limits.
    assert quota_families("aws", "g5.xlarge", "reserved") == {"on_demand:g-vt"}


def test_aws_vcpu_limit_names_the_class_of_the_type_it_refused() -> None:
    answer = {"Error": {"Code": "VcpuLimitExceeded", "Message": "You have requested more vCPU"}}
    err = with_family(from_sdk_error(ClientError(answer, "RunInstances")), "p4d.24xlarge", "spot")
    assert isinstance(err, QuotaError)
    assert (err.scope, err.family) == (Scope.FAMILY, "spot:p")
    assert quota_family("g4dn.xlarge", "on_demand") == "on_demand:g-vt"
    # A limit every instance shares still blocks the region; capacity is untouched.
    volumes = with_family(classify("VolumeLimitExceeded"), "g4dn.xlarge", "on_demand")
    assert (volumes.scope, volumes.family) == (Scope.REGION, None)
    sold = with_family(classify("InsufficientInstanceCapacity"), "p4d.24xlarge", "on_demand")
    assert (sold.scope, sold.family) == (Scope.ZONE, None)


def test_an_aws_p_quota_block_spares_standard_and_g_types_and_spot() -> None:
    p4d = Cand("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", accelerators={"A100": 8})
    block = Block.from_scope(Scope.FAMILY, p4d, family="on_demand:p")
    assert block == Block("aws", "us-east-1", quota_family="on_demand:p")
    assert block.matches(p4d)
    assert block.matches(Cand("aws", "us-east-1", "us-east-1f", "p3.2xlarge"))
    assert not block.matches(Cand("aws", "us-east-1", "us-east-1a", "m5.large"))
    assert not block.matches(Cand("aws", "us-east-1", "us-east-1a", "g5.xlarge"))
    assert not block.matches(Cand("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "spot"))
    assert not block.matches(Cand("aws", "us-west-2", "us-west-2a", "p4d.24xlarge"))


# --- GCP: per GPU type and region, plus CPUs ------------------------------------------------------
def test_gcp_metric_names() -> None:
    assert gcp_gpu_metric("T4", "on_demand") == "NVIDIA_T4_GPUS"
    assert gcp_gpu_metric("T4", "spot") == "PREEMPTIBLE_NVIDIA_T4_GPUS"
    assert gcp_gpu_metric("A100-80GB", "on_demand") == "NVIDIA_A100_80GB_GPUS"
    assert gcp_cpu_metric("n1-standard-8", "on_demand") == "CPUS"
    assert gcp_cpu_metric("e2-standard-4", "on_demand") == "E2_CPUS"
    assert gcp_cpu_metric("n2-standard-8", "on_demand") == "N2_CPUS"
    assert gcp_cpu_metric("a2-highgpu-1g", "on_demand") == "A2_CPUS"
    assert gcp_cpu_metric("g2-standard-4", "spot") == "PREEMPTIBLE_CPUS"
    # An n1 machine with a T4 counts against both; the T4 one is its own.
    assert quota_families("gcp", "n1-standard-8", "on_demand", "T4") == {"CPUS", "NVIDIA_T4_GPUS"}
    assert primary_family("gcp", "n1-standard-8", "on_demand", "T4") == "NVIDIA_T4_GPUS"
    assert primary_family("gcp", "n1-standard-8", "on_demand") == "CPUS"


def test_a_gcp_t4_quota_error_blocks_t4s_not_cpu_machines() -> None:
    message = "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region us-central1."
    detail = detail_of({"code": "QUOTA_EXCEEDED", "message": message})  # an operation's error
    err = gcp_classify(403, [detail], detail.message)
    assert isinstance(err, QuotaError) and (err.scope, err.family) == (
        Scope.FAMILY,
        "NVIDIA_T4_GPUS",
    )
    t4 = Cand("gcp", "us-central1", "us-central1-a", "n1-standard-8", accelerators={"T4": 1})
    block = Block.from_scope(err.scope, t4, family=err.family)
    assert block is not None and block.kind == "quota"
    assert block.matches(t4)
    assert block.matches(Cand("gcp", "us-central1", "us-central1-b", "n1-standard-4",
                              accelerators={"T4": 1}))  # fmt: skip
    # The same machine type without a GPU, the CPUs of the region: not blocked.
    assert not block.matches(Cand("gcp", "us-central1", "us-central1-a", "n1-standard-8"))
    assert not block.matches(Cand("gcp", "us-central1", "us-central1-a", "a2-highgpu-1g",
                                  accelerators={"A100": 1}))  # fmt: skip
    # Spot T4s count against PREEMPTIBLE_NVIDIA_T4_GPUS: another quota.
    assert not block.matches(Cand("gcp", "us-central1", "us-central1-a", "n1-standard-8", "spot",
                                  accelerators={"T4": 1}))  # fmt: skip
    # A quota error that names no metric blocks the candidate's own GPU quota.
    unnamed = Block.from_scope(Scope.FAMILY, t4)
    assert unnamed == Block("gcp", "us-central1", quota_family="NVIDIA_T4_GPUS")


# --- Kubernetes: a namespace's ResourceQuota, per resource ---------------------------------------
def _api_exception(status: int, message: str) -> Any:
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=status, reason="Forbidden")
    exc.body = json.dumps({"message": message, "reason": "Forbidden"})
    return exc


def test_a_resource_quota_refusal_blocks_that_resource_in_that_namespace() -> None:
    from corral.services.providers.kubernetes.provider import _typed

    message = (
        'pods "train-0" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: "
        "requests.nvidia.com/gpu=4"
    )
    err = _typed(_api_exception(403, message))
    assert isinstance(err, QuotaError)
    assert (err.scope, err.family) == (Scope.FAMILY, "requests.nvidia.com/gpu")
    gpu_pod = Cand("kubernetes", "ctx", "team-a", "8CPU--32GB--T4:1", accelerators={"T4": 1})
    block = Block.from_scope(err.scope, gpu_pod, family="team-a:requests.nvidia.com/gpu")
    assert block is not None and block.matches(gpu_pod)
    assert not block.matches(Cand("kubernetes", "ctx", "team-a", "4CPU--16GB"))  # CPU pods
    assert not block.matches(
        Cand("kubernetes", "ctx", "team-b", "8CPU--32GB--T4:1", accelerators={"T4": 1})
    )  # another namespace's quota
    # A refusal that names no resource blocks the shape in the namespace, as before.
    vague = _typed(_api_exception(403, "exceeded quota: q"))
    assert (vague.scope, vague.family) == (Scope.ZONE, None)


# --- the local cloud and any other: per accelerator kind and market ------------------------------
def test_local_quota_families_are_per_accelerator_and_market() -> None:
    assert quota_families("local", "gpu-t4-1", "on_demand", "T4") == {"on_demand:T4"}
    assert quota_families("local", "cpu-4", "spot") == {"spot:cpu"}


# --- a shortfall is a ceiling ---------------------------------------------------------------------
def test_a_shortfall_blocks_only_asks_over_what_was_free() -> None:
    where = Cand("local", "lab-west", "lab-west-a", "gpu-a100-8", accelerators={"A100": 8})
    err = CapacityError("lab-west-a has 1 of 1 gpu-a100-8 free, asked for 2", free=1)
    block = Block.from_scope(err.scope, where, free=err.free)
    assert block is not None and (block.above, block.kind) == (1, "shortfall")
    assert not block.matches(where)  # one node: fits what was free
    assert block.matches(where, Ask("A100", 2))
    assert block.matches(Cand("local", "lab-west", "lab-west-a", "gpu-a100-8", num_nodes=3))
    assert "asks of more than 1 node" in str(block)
    # Nothing free: a plain sold-out block, every ask.
    sold = Block.from_scope(Scope.ZONE, where, free=0)
    assert sold is not None and sold.above is None and sold.matches(where)
