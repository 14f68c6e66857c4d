"""A Determined pool's ``provider`` as the launch the cloud receives: the region, image,
network and the rest of the file are what EC2's RunInstances or Compute Engine's insert gets.

Pure: from the provider's fields as :func:`corral.shared.resource_pools.resolve_pools` holds
them (field names, durations in seconds) to an :class:`AgentLaunch`. The mapping follows
Determined's own provisioner (``master/internal/rm/agentrm/provisioner/aws.go``,
``launchInstances``; ``master/internal/config/provconfig/gcp_config.go``,
``InstanceProperties``), with Corral's own choices on top at launch (its tags, its boot
script, the zone it tries):

AWS (RunInstances parameters)
    ``image_id`` -> ``ImageId``; ``root_volume_size`` -> a ``/dev/sda1`` gp2 root volume of
    that many GiB deleted on termination; ``ssh_key_name`` -> ``KeyName``;
    ``iam_instance_profile_arn`` -> ``IamInstanceProfile.Arn``; ``network_interface`` -> one
    interface (device 0, ``AssociatePublicIpAddress`` = ``public_ip``, true when unset, as
    Determined's default; ``SubnetId``; ``Groups`` = [``security_group_id``]);
    ``instance_name`` -> the ``Name`` tag; ``tag_key``/``tag_value`` -> one tag (Determined's
    ``managed_by`` key when only the value is set; the master's name when only the key is);
    ``custom_tags`` -> tags; ``spot`` -> the spot market, ``spot_max_price`` -> its
    ``MaxPrice``; ``region`` -> only that region's zones are tried.
Google Cloud (``instanceProperties``)
    ``base_config`` is the body the rest goes over; ``instance_type.machine_type`` -> the
    machine type; ``gpu_type``/``gpu_num`` -> ``guestAccelerators``; ``preemptible`` -> the
    spot market; ``boot_disk_source_image``/``boot_disk_size``/``boot_disk_type`` -> the boot
    disk; ``labels`` and ``label_key``/``label_value`` -> labels; ``network_interface``
    (``network`` and ``subnetwork``, as Determined needs both; ``external_ip`` -> a one-to-one
    NAT) -> the interface; ``network_tags`` -> ``tags.items``; ``service_account`` ->
    ``serviceAccounts`` (scopes: cloud-platform when unset); ``zone`` -> only that zone is
    tried; ``project`` must be the project Corral's credentials launch in (checked at launch).

Corral's tags and labels win over the file's on a clash, so it can find its machines again.
A pool's config is an admin's (the pool routes are admins'), so identity and network fields
(instance profile, key, subnet, service account) are passed on as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
DET_TAG_KEY = "managed_by"  # Determined's default tag_key (aws_config.go)
DET_LABEL_KEY = "managed-by"  # Determined's default label_key (gcp_config.go)


@dataclass(frozen=True)
class AgentLaunch:
    """How one agent of a pool is launched."""

    cloud: str
    instance_type: str
    market: str = "ON_DEMAND"  # ON_DEMAND | SPOT (a LaunchTemplate's market_type)
    config: dict[str, Any] = field(default_factory=dict)  # advanced_instance_config
    region: str | None = None  # only this region's zones
    zones: tuple[str, ...] | None = None  # only these zones
    project: str | None = None  # Google Cloud: the project the file names
    boot_deadline_s: float | None = None  # max_agent_starting_period


def agent_launch(provider: Mapping[str, Any], master: str) -> AgentLaunch:
    """The launch of one agent of a pool whose provider is ``provider`` (its fields as set)."""
    kind = str(provider.get("type") or "")
    deadline = provider.get("max_agent_starting_period_s")
    deadline_s = float(deadline) if deadline is not None else None
    if kind == "aws":
        return _aws(provider, master, deadline_s)
    if kind == "gcp":
        return _gcp(provider, master, deadline_s)
    instance = provider.get("instance_type")
    if isinstance(instance, Mapping):
        instance = instance.get("machine_type")
    return AgentLaunch(
        cloud=kind,
        instance_type=str(instance),
        market="SPOT" if provider.get("spot") else "ON_DEMAND",
        zones=(str(provider["zone"]),) if provider.get("zone") else None,
        region=str(provider["region"]) if provider.get("region") else None,
        boot_deadline_s=deadline_s,
    )


def _aws(provider: Mapping[str, Any], master: str, deadline_s: float | None) -> AgentLaunch:
    config: dict[str, Any] = {}
    if provider.get("image_id"):
        config["ImageId"] = str(provider["image_id"])
    if provider.get("root_volume_size"):
        config["BlockDeviceMappings"] = [
            {
                "DeviceName": "/dev/sda1",
                "Ebs": {
                    "DeleteOnTermination": True,
                    "VolumeSize": int(provider["root_volume_size"]),
                    "VolumeType": "gp2",
                },
            }
        ]
    if provider.get("ssh_key_name"):
        config["KeyName"] = str(provider["ssh_key_name"])
    if provider.get("iam_instance_profile_arn"):
        config["IamInstanceProfile"] = {"Arn": str(provider["iam_instance_profile_arn"])}
    nic = provider.get("network_interface")
    if isinstance(nic, Mapping):
        interface: dict[str, Any] = {
            "DeviceIndex": 0,
            "DeleteOnTermination": True,
            "AssociatePublicIpAddress": bool(nic.get("public_ip", True)),
        }
        if nic.get("subnet_id"):
            interface["SubnetId"] = str(nic["subnet_id"])
        if nic.get("security_group_id"):
            interface["Groups"] = [str(nic["security_group_id"])]
        config["NetworkInterfaces"] = [interface]
    tags = _aws_tags(provider, master)
    if tags:
        pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
        config["TagSpecifications"] = [{"ResourceType": "instance", "Tags": pairs}]
    spot = bool(provider.get("spot"))
    if spot and provider.get("spot_max_price"):
        config["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"MaxPrice": str(provider["spot_max_price"])},
        }
    return AgentLaunch(
        cloud="aws",
        instance_type=str(provider.get("instance_type")),
        market="SPOT" if spot else "ON_DEMAND",
        config=config,
        region=str(provider["region"]) if provider.get("region") else None,
        boot_deadline_s=deadline_s,
    )


def _aws_tags(provider: Mapping[str, Any], master: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    if provider.get("instance_name"):
        tags["Name"] = str(provider["instance_name"])
    if provider.get("tag_key") or provider.get("tag_value"):
        key = str(provider.get("tag_key") or DET_TAG_KEY)
        tags[key] = str(provider.get("tag_value") or master)
    for tag in provider.get("custom_tags") or ():
        tags[str(tag["key"])] = str(tag["value"])
    return tags


def _gcp(provider: Mapping[str, Any], master: str, deadline_s: float | None) -> AgentLaunch:
    props: dict[str, Any] = dict(provider.get("base_config") or {})
    instance = provider.get("instance_type") or {}
    machine = str(instance.get("machine_type") or props.get("machineType") or "")
    if instance.get("gpu_type") and instance.get("gpu_num"):
        props["guestAccelerators"] = [
            {"acceleratorType": str(instance["gpu_type"]), "acceleratorCount": instance["gpu_num"]}
        ]
    if provider.get("boot_disk_source_image"):
        params: dict[str, Any] = {"sourceImage": str(provider["boot_disk_source_image"])}
        if provider.get("boot_disk_size"):
            params["diskSizeGb"] = str(provider["boot_disk_size"])
        if provider.get("boot_disk_type"):
            params["diskType"] = str(provider["boot_disk_type"]).rstrip("/").rsplit("/", 1)[-1]
        boot = {"boot": True, "autoDelete": True, "initializeParams": params}
        props["disks"] = [boot, *props.get("disks", [])]
    labels = dict(props.get("labels") or {})
    labels.update({str(k): str(v) for k, v in (provider.get("labels") or {}).items()})
    if provider.get("label_key") or provider.get("label_value"):
        labels[str(provider.get("label_key") or DET_LABEL_KEY)] = str(
            provider.get("label_value") or master
        )
    if labels:
        props["labels"] = labels
    nic = provider.get("network_interface")
    if isinstance(nic, Mapping) and nic.get("network") and nic.get("subnetwork"):
        interface: dict[str, Any] = {
            "network": str(nic["network"]),
            "subnetwork": str(nic["subnetwork"]),
        }
        if nic.get("external_ip"):
            interface["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "networkTier": "PREMIUM"}]
        props["networkInterfaces"] = [*props.get("networkInterfaces", []), interface]
    if provider.get("network_tags"):
        items = [*(props.get("tags") or {}).get("items", []), *provider["network_tags"]]
        props["tags"] = {"items": [str(i) for i in items]}
    account = provider.get("service_account") or {}
    if account.get("email"):
        scopes = list(account.get("scopes") or [CLOUD_PLATFORM_SCOPE])
        entry = {"email": str(account["email"]), "scopes": scopes}
        props["serviceAccounts"] = [*props.get("serviceAccounts", []), entry]
    return AgentLaunch(
        cloud="gcp",
        instance_type=machine,
        market="SPOT" if instance.get("preemptible") else "ON_DEMAND",
        config={"instanceProperties": props} if props else {},
        zones=(str(provider["zone"]),) if provider.get("zone") else None,
        project=str(provider["project"]) if provider.get("project") else None,
        boot_deadline_s=deadline_s,
    )


def zones_in(pairs: list[tuple[str, str]], launch: AgentLaunch) -> list[str]:
    """The zones of ``pairs`` (zone, region) the launch may use: its zones, in its region."""
    return [
        zone
        for zone, region in pairs
        if (launch.region is None or region == launch.region)
        and (launch.zones is None or zone in launch.zones)
    ]
