"""A Determined pool's provider as the launch the cloud receives (issue #45 item 4).

The provider files are the ones of Determined's own tests, translated (each test names its
source): ``master/internal/config/provconfig/aws_config_test.go`` and ``gcp_config_test.go``
parse them; here they must become the RunInstances parameters and the Compute Engine
``instanceProperties`` that Determined's provisioner sends (``agentrm/provisioner/aws.go``,
``launchInstances``; ``gcp_config.go``, ``InstanceProperties``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from corral.shared.config.detect import load_config
from corral.shared.config.master_config import MasterConfig
from corral.shared.configio import ConfigError
from corral.shared.det_providers import agent_launch, zones_in
from corral.shared.resource_pools import resolve_pools


def _provider(provider: dict[str, Any]) -> dict[str, Any]:
    master = MasterConfig.model_validate(
        {"resource_pools": [{"pool_name": "default", "provider": provider}]}
    )
    [pool] = resolve_pools(master).pools
    assert pool.provider is not None
    return pool.provider


def test_unmarshal_aws_cluster_config() -> None:
    """aws_config_test.go: TestUnmarshalAWSClusterConfig, as the RunInstances it makes."""
    launch = agent_launch(
        _provider(
            {
                "type": "aws",
                "region": "test.region",
                "image_id": "test.image",
                "instance_name": "test.instance_name",
                "ssh_key_name": "test.key",
                "network_interface": {
                    "public_ip": False,
                    "subnet_id": "test.subnet",
                    "security_group_id": "test.security",
                },
                "tag_key": "dai",
                "tag_value": "agent",
                "root_volume_size": 120,
                "instance_type": "p2.xlarge",
                "iam_instance_profile_arn": "test_instance_profile",
                "custom_tags": [{"key": "key1", "value": "value1"}],
            }
        ),
        "master",
    )
    assert (launch.cloud, launch.instance_type, launch.market) == ("aws", "p2.xlarge", "ON_DEMAND")
    assert launch.region == "test.region"
    assert launch.config == {
        "ImageId": "test.image",
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/sda1",
                "Ebs": {"DeleteOnTermination": True, "VolumeSize": 120, "VolumeType": "gp2"},
            }
        ],
        "KeyName": "test.key",
        "IamInstanceProfile": {"Arn": "test_instance_profile"},
        "NetworkInterfaces": [
            {
                "DeviceIndex": 0,
                "DeleteOnTermination": True,
                "AssociatePublicIpAddress": False,
                "SubnetId": "test.subnet",
                "Groups": ["test.security"],
            }
        ],
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "Name", "Value": "test.instance_name"},
                    {"Key": "dai", "Value": "agent"},
                    {"Key": "key1", "Value": "value1"},
                ],
            }
        ],
    }


def test_default_aws_cluster_config_public_ip_and_tag_key() -> None:
    """aws_config_test.go: TestDefaultAWSClusterConfig: Determined's defaults are a public IP
    on the interface and the tag key managed_by."""
    launch = agent_launch(
        _provider(
            {
                "type": "aws",
                "region": "us-west-2",
                "instance_type": "m5.large",
                "network_interface": {"subnet_id": "subnet-1"},
                "tag_value": "mine",
            }
        ),
        "master",
    )
    [nic] = launch.config["NetworkInterfaces"]
    assert nic["AssociatePublicIpAddress"] is True
    [spec] = launch.config["TagSpecifications"]
    assert spec["Tags"] == [{"Key": "managed_by", "Value": "mine"}]


def test_spot_with_a_max_price_is_a_spot_launch_capped_at_it() -> None:
    launch = agent_launch(
        _provider(
            {"type": "aws", "instance_type": "p3.2xlarge", "spot": True, "spot_max_price": "2.50"}
        ),
        "m",
    )
    assert launch.market == "SPOT"
    assert launch.config["InstanceMarketOptions"]["SpotOptions"] == {"MaxPrice": "2.50"}


def test_max_agent_starting_period_is_the_boot_deadline() -> None:
    launch = agent_launch(
        _provider({"type": "aws", "instance_type": "m5.large", "max_agent_starting_period": "7m"}),
        "m",
    )
    assert launch.boot_deadline_s == 420.0


def test_unmarshal_gcp_cluster_config() -> None:
    """gcp_config_test.go: TestUnmarshalGCPClusterConfig, as gcp_config.go's
    InstanceProperties makes it (here in Compute Engine's camelCase)."""
    launch = agent_launch(
        _provider(
            {
                "type": "gcp",
                "project": "test-project",
                "zone": "test-zone",
                "boot_disk_size": 100,
                "boot_disk_source_image": "test-source_image",
                "labels": {"test-labels-key": "test-labels-value"},
                "label_key": "test-label-key",
                "label_value": "test-label-value",
                "network_interface": {
                    "network": "test-network",
                    "subnetwork": "test-subnetwork",
                    "external_ip": True,
                },
                "network_tags": ["test-tag1", "test-tag2"],
                "service_account": {
                    "email": "my-project-123@service.account.com",
                    "scopes": ["a", "b"],
                },
                "instance_type": {
                    "machine_type": "custom-1-1",
                    "gpu_type": "nvidia-tesla-v100",
                    "gpu_num": 2,
                },
            }
        ),
        "master",
    )
    assert (launch.cloud, launch.instance_type, launch.market) == ("gcp", "custom-1-1", "ON_DEMAND")
    assert (launch.zones, launch.project) == (("test-zone",), "test-project")
    assert launch.config == {
        "instanceProperties": {
            "guestAccelerators": [{"acceleratorType": "nvidia-tesla-v100", "acceleratorCount": 2}],
            "disks": [
                {
                    "boot": True,
                    "autoDelete": True,
                    "initializeParams": {"sourceImage": "test-source_image", "diskSizeGb": "100"},
                }
            ],
            "labels": {
                "test-labels-key": "test-labels-value",
                "test-label-key": "test-label-value",
            },
            "networkInterfaces": [
                {
                    "network": "test-network",
                    "subnetwork": "test-subnetwork",
                    "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "networkTier": "PREMIUM"}],
                }
            ],
            "tags": {"items": ["test-tag1", "test-tag2"]},
            "serviceAccounts": [
                {"email": "my-project-123@service.account.com", "scopes": ["a", "b"]}
            ],
        }
    }


def test_gcp_service_account_scopes_default_to_cloud_platform_and_preemptible_is_spot() -> None:
    """gcp_config.go: InitDefaultValues gives a service account with no scopes the
    cloud-platform scope; InstanceProperties sets Scheduling.Preemptible."""
    launch = agent_launch(
        _provider(
            {
                "type": "gcp",
                "instance_type": {"machine_type": "n1-standard-8", "preemptible": True},
                "service_account": {"email": "sa@p.iam.gserviceaccount.com"},
                "boot_disk_source_image": "projects/p/global/images/i",
                "boot_disk_type": "projects/determined-ai/zones/us-central1-a/diskTypes/pd-ssd",
            }
        ),
        "master",
    )
    props = launch.config["instanceProperties"]
    assert props["serviceAccounts"][0]["scopes"] == [
        "https://www.googleapis.com/auth/cloud-platform"
    ]
    assert props["disks"][0]["initializeParams"]["diskType"] == "pd-ssd"  # filepath.Base
    assert launch.market == "SPOT"


def test_a_gcp_network_needs_both_network_and_subnetwork() -> None:
    """gcp_config.go: the interface is added only when both are set."""
    launch = agent_launch(
        _provider(
            {
                "type": "gcp",
                "instance_type": {"machine_type": "n1-standard-8"},
                "network_interface": {"network": "n"},
            }
        ),
        "m",
    )
    assert launch.config == {}


def test_zones_in_keeps_the_region_and_zones_the_file_names() -> None:
    aws = agent_launch(_provider({"type": "aws", "instance_type": "m5.large", "region": "b"}), "m")
    pairs = [("a1", "a"), ("b1", "b"), ("b2", "b")]
    assert zones_in(pairs, aws) == ["b1", "b2"]
    gcp = agent_launch(
        _provider({"type": "gcp", "zone": "b2", "instance_type": {"machine_type": "x"}}), "m"
    )
    assert zones_in(pairs, gcp) == ["b2"]


def test_provider_fields_corral_does_otherwise_are_noticed_at_their_line(tmp_path: Path) -> None:
    path = tmp_path / "master.yaml"
    provider = {
        "type": "aws",
        "region": "us-west-2",
        "instance_type": "m5.large",
        "agent_docker_image": "determinedai/determined-agent:0.38.0",
        "startup_script": "echo hi",
        "log_group": "g",
    }
    path.write_text(
        yaml.safe_dump(
            {"resource_pools": [{"pool_name": "default", "provider": provider}]}, sort_keys=False
        )
    )
    notices = load_config(path).notices
    said = {n.split(": ")[1]: n for n in notices}
    assert set(said) == {
        "resource_pools[0].provider.agent_docker_image",
        "resource_pools[0].provider.startup_script",
        "resource_pools[0].provider.log_group",
    }, notices
    assert "node agent" in said["resource_pools[0].provider.agent_docker_image"]
    assert said["resource_pools[0].provider.startup_script"].startswith(f"{path}:")


def test_spot_max_price_is_digits_with_at_most_one_decimal_point(tmp_path: Path) -> None:
    """aws_config.go: validateMaxSpotPrice refuses two decimal points or a non-digit."""
    for good in ("2.50", "3", "0.125"):
        assert _provider({"type": "aws", "instance_type": "m5.large", "spot_max_price": good})
    for bad in ("1.2.3", "$2", "2,50"):
        path = tmp_path / "master.yaml"
        provider = {"type": "aws", "instance_type": "m5.large", "spot": True}
        provider["spot_max_price"] = bad
        path.write_text(
            yaml.safe_dump({"resource_pools": [{"pool_name": "p", "provider": provider}]})
        )
        try:
            load_config(path)
        except ConfigError as exc:
            [issue] = exc.issues
            assert issue.loc == "resource_pools[0].provider.spot_max_price", issue
        else:
            raise AssertionError(f"{bad!r} was accepted")
