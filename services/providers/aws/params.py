"""An attempt's :class:`~corral.services.providers.base.LaunchSpec` as EC2 RunInstances
parameters. Pure: no AWS call here.

``advanced_instance_config`` is passed through as RunInstances parameters; Corral's own choices
go on top: the instance type, the zone, ``MinCount = MaxCount = count`` (all or nothing), the
ClientToken, the market (spot through ``InstanceMarketOptions``, a capacity reservation through
``CapacityReservationSpecification``) and Corral's tags, merged into the config's
``TagSpecifications`` by the AWS merge rules (Corral's keys win).
"""

from __future__ import annotations

import hashlib
from typing import Any

from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    LaunchSpec,
    blind_boot_lines,
    check_env_names,
)
from corral.shared.errors import InvalidRequestError
from corral.shared.merge import MergeError, merge_advanced_instance_config

TAG_MARKET = "corral-market"  # the market Corral launched in (moto reports no reservation)
MARKETS = ("on_demand", "spot", "reserved")
SSM_PREFIXES = ("resolve:ssm:", "ssm:")  # an image named by an SSM parameter (EC2's spelling too)
USER_DATA_MAX_BYTES = 16 * 1024  # EC2's limit on user data before base64


def client_token(attempt_id: str) -> str:
    """The RunInstances ClientToken of an attempt: the same on every delivery, 55 ASCII
    characters (EC2 allows 64)."""
    return "corral-" + hashlib.sha256(attempt_id.encode()).hexdigest()[:48]


def run_params(spec: LaunchSpec, image_id: str | None, boot: str | None = None) -> dict[str, Any]:
    """The RunInstances parameters of an attempt: ``advanced_instance_config`` passed through,
    with Corral's own choices (type, zone, count, market, token, tags) on top. ``image_id``:
    the AMI to boot (the task's, resolved, or the default; None when the config's ImageId or
    launch template names it). ``boot``: the UserData to send (the node agent's) instead of
    the blind setup-and-run script."""
    try:
        params = merge_advanced_instance_config(
            "aws", spec.advanced_instance_config, {"TagSpecifications": _tag_specs(spec)}
        )
    except MergeError as exc:
        raise InvalidRequestError(f"advanced_instance_config: {exc}") from None
    if spec.image_id and "ImageId" in params:
        raise InvalidRequestError(
            "resources.image_id and advanced_instance_config.ImageId cannot both be given"
        )
    if image_id:
        params["ImageId"] = image_id
    params.update(
        InstanceType=spec.instance_type,
        MinCount=spec.count,
        MaxCount=spec.count,
        ClientToken=client_token(spec.attempt_id),
    )
    params["Placement"] = {**(params.get("Placement") or {}), "AvailabilityZone": spec.zone}
    params["Placement"].pop("AvailabilityZoneId", None)
    _set_market(params, spec)
    script = user_data(spec) if boot is None else _checked_size(boot)
    if script is not None:
        if "UserData" in params:
            raise InvalidRequestError(
                "advanced_instance_config.UserData and the task's setup/run cannot both be given"
            )
        params["UserData"] = script
    return params


def reservation_id(spec: LaunchSpec) -> str | None:
    """The capacity reservation named by the spec, or inside advanced_instance_config as
    ``CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId``."""
    if spec.reservation_id:
        return spec.reservation_id
    node: object = spec.advanced_instance_config
    for key in ("CapacityReservationSpecification", "CapacityReservationTarget"):
        node = node.get(key) if isinstance(node, dict) else None
    rid = node.get("CapacityReservationId") if isinstance(node, dict) else None
    return rid if isinstance(rid, str) and rid else None


def effective_market(spec: LaunchSpec) -> str:
    """The market the instances run in: a named reservation makes an on-demand launch reserved."""
    return "reserved" if spec.market != "spot" and reservation_id(spec) else spec.market


def _set_market(params: dict[str, Any], spec: LaunchSpec) -> None:
    """Spot through InstanceMarketOptions, reservations through
    CapacityReservationSpecification; the planner's market wins over the config's."""
    rid = reservation_id(spec)
    market = effective_market(spec)
    options = params.get("InstanceMarketOptions")
    if market == "spot":
        if rid:
            raise InvalidRequestError(f"a spot launch cannot use capacity reservation {rid}")
        options = dict(options or {})
        spot = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        options["SpotOptions"] = {**spot, **(options.get("SpotOptions") or {})}
        options["MarketType"] = "spot"
        params["InstanceMarketOptions"] = options
        return
    # A capacity block (MarketType "capacity-block") is a reservation with its own market type.
    if not (market == "reserved" and (options or {}).get("MarketType") == "capacity-block"):
        params.pop("InstanceMarketOptions", None)
    if market != "reserved":
        return
    crs = dict(params.get("CapacityReservationSpecification") or {})
    if rid is None:
        target = crs.get("CapacityReservationTarget") or {}
        if not target.get("CapacityReservationResourceGroupArn"):
            raise InvalidRequestError("market 'reserved' needs a capacity reservation id")
        return
    crs.pop("CapacityReservationPreference", None)  # exclusive with a target
    crs["CapacityReservationTarget"] = {"CapacityReservationId": rid}
    params["CapacityReservationSpecification"] = crs


def _tag_specs(spec: LaunchSpec) -> list[dict[str, Any]]:
    """Corral's tags on the instances and their volumes; they win over the config's."""
    tags = {
        **spec.tags,
        TAG_MANAGED: "true",
        TAG_REQUEST: spec.request_id,
        TAG_ATTEMPT: spec.attempt_id,
        TAG_MARKET: effective_market(spec),
    }
    if spec.count == 1:
        tags.setdefault(TAG_NODE, "0")
    else:
        tags.pop(TAG_NODE, None)  # one tag set for every node: describe reads AmiLaunchIndex
    pairs = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    return [{"ResourceType": kind, "Tags": pairs} for kind in ("instance", "volume")]


def user_data(spec: LaunchSpec) -> str | None:
    """The boot script running the task's setup and run (None when it has neither)."""
    if not spec.setup and not spec.run:
        return None
    env = {
        "CORRAL_REQUEST_ID": spec.request_id,
        "CORRAL_ATTEMPT_ID": spec.attempt_id,
        "CORRAL_NUM_NODES": str(spec.count),
        **spec.envs,
    }
    check_env_names(env)
    # One UserData for every node: the rank is known only for a launch of one.
    lines = blind_boot_lines(spec, env, "0" if spec.count == 1 else None)
    return _checked_size("\n".join(["#!/bin/bash", "set -euo pipefail", *lines]) + "\n")


def _checked_size(script: str) -> str:
    if len(script.encode()) > USER_DATA_MAX_BYTES:
        raise InvalidRequestError(
            f"the boot script is {len(script.encode())} bytes; EC2 takes {USER_DATA_MAX_BYTES}",
            code="UserDataTooLarge",
        )
    return script


def check_spec(spec: LaunchSpec) -> None:
    """Refuse a spec no AWS call could satisfy, before any call."""
    if spec.cloud != "aws":
        raise InvalidRequestError(f"cloud {spec.cloud!r} sent to the AWS provider")
    if spec.count < 1:
        raise InvalidRequestError(f"count must be at least 1, got {spec.count}")
    if spec.market not in MARKETS:
        raise InvalidRequestError(f"unknown market {spec.market!r}; expected one of {MARKETS}")
    if not spec.zone.startswith(spec.region):
        raise InvalidRequestError(f"zone {spec.zone} is not in region {spec.region}")


def ssm_parameter(image_id: str) -> str | None:
    """The SSM parameter path an image names (``ssm:/aws/service/...``, EC2's own
    ``resolve:ssm:/aws/service/...``, or a bare ``/aws/service/...`` path), or None for an AMI
    id or anything else EC2 takes as written."""
    for prefix in SSM_PREFIXES:
        if image_id.startswith(prefix):
            return image_id[len(prefix) :]
    return image_id if image_id.startswith("/") else None


def needs_image(spec: LaunchSpec) -> bool:
    """Whether Corral must name the AMI: the task names one, or neither the config's ImageId
    nor a launch template does."""
    config = spec.advanced_instance_config
    return bool(spec.image_id) or ("ImageId" not in config and "LaunchTemplate" not in config)
