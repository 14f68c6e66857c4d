"""Which instance types the catalog keeps, and the clouds' GPU names in Corral's spelling.

The catalog keeps every type that carries a GPU and the common general-purpose, compute and
memory families (SkyPilot's default CPU choices are among them); the rest of a cloud's
hundreds of families (storage-dense, burstable, ARM, FPGA, ...) would make every plan slower
and the package larger for machines a GPU control plane is rarely asked for.
"""

from __future__ import annotations

import re

COMMON_CPU_FAMILIES: dict[str, frozenset[str]] = {
    "aws": frozenset({"m4", "m5", "m6i", "m7i", "c5", "c6i", "c7i", "r5", "r6i", "r7i"}),
    "gcp": frozenset({"e2", "n1", "n2", "n2d", "c2", "c3"}),
}

# GCP's accelerator type names (Compute API) -> Corral's canonical names.
GCP_ACCELERATORS: dict[str, str] = {
    "nvidia-tesla-k80": "K80",
    "nvidia-tesla-p4": "P4",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-v100": "V100",
    "nvidia-tesla-t4": "T4",
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100-MEGA",
    "nvidia-h200-141gb": "H200",
    "nvidia-b200": "B200",
}

# The GPU words of GCP's billing SKU descriptions ("Nvidia Tesla T4 GPU running in ...").
GCP_SKU_GPUS: dict[str, str] = {
    "tesla k80": "K80",
    "tesla p4": "P4",
    "tesla p100": "P100",
    "tesla v100": "V100",
    "tesla t4": "T4",
    "l4": "L4",
    "tesla a100": "A100",
    "a100 80gb": "A100-80GB",
    "h100 80gb": "H100",
    "h100 80gb mega": "H100-MEGA",
    "h200 141gb": "H200",
    "b200": "B200",
}

_AWS_FAMILY = re.compile(r"^([a-z]+[0-9]+[a-z-]*)\.")


def family(cloud: str, instance_type: str) -> str:
    """``m6i.large`` -> ``m6i``; ``n2-highmem-8`` -> ``n2``; ``g6e.xlarge`` -> ``g6e``."""
    name = instance_type.lower()
    if cloud == "aws":
        found = _AWS_FAMILY.match(name)
        return found.group(1) if found else name.split(".")[0]
    return name.split("-")[0]


def keep_type(cloud: str, instance_type: str, accelerator: str | None) -> bool:
    """True for a GPU type, or a type of one of the cloud's common CPU families."""
    if accelerator:
        return True
    return family(cloud, instance_type) in COMMON_CPU_FAMILIES.get(cloud, frozenset())


def aws_gpu_name(name: str, memory_mib_per_gpu: float) -> str:
    """AWS's GpuInfo name in Corral's spelling: the 80 GB A100 and the 32 GB V100 are named
    apart from their smaller siblings, as SkyPilot names them."""
    upper = name.strip().upper().replace(" ", "-")
    if upper == "A100" and memory_mib_per_gpu >= 70 * 1024:
        return "A100-80GB"
    if upper == "V100" and memory_mib_per_gpu >= 30 * 1024:
        return "V100-32GB"
    return upper
