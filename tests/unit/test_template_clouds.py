"""Which cloud a machine pool's launch templates are written for (issue #45: the seed's Google
Cloud pool was registered on the local cloud because ``a2-highgpu-8g`` is also a local
alias)."""

from __future__ import annotations

from pathlib import Path

from corral.shared.config.detect import load_as
from corral.shared.config.machine_pool import MachinePool
from corral.shared.template_clouds import config_shape, template_cloud, written_for

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def _templates(name: str) -> list[tuple[str, dict[str, object]]]:
    pool, _ = load_as(SEEDS / name, MachinePool)
    return [
        (t.instance_type, t.advanced_instance_config)
        for m in pool.machine_types
        for t in m.launch_templates
    ]


def test_the_seed_gcp_pool_is_written_for_gcp() -> None:
    clouds, why = written_for(_templates("anyscale-machine-pool-gcp.yaml"))
    assert clouds == {"gcp"}
    assert "instanceProperties" in why


def test_the_seed_aws_pool_is_written_for_aws() -> None:
    clouds, _ = written_for(_templates("anyscale-machine-pool-aws.yaml"))
    assert clouds == {"aws"}


def test_shapes_of_configs() -> None:
    assert config_shape({"CapacityReservationSpecification": {}}) == "aws"
    assert config_shape({"instance_properties": {}}) == "gcp"
    assert config_shape({"spec": {}}) == "kubernetes"
    assert config_shape({}) is None
    assert config_shape({"Mixed": 1, "shapes": 2}) is None


def test_a_bare_type_speaks_through_the_catalogs() -> None:
    assert template_cloud("a2-highgpu-8g", {}).cloud == "gcp"
    assert template_cloud("p4de.24xlarge", {}).cloud == "aws"
    assert template_cloud("cpu-2", {}).cloud is None  # a local alias only: no one cloud
