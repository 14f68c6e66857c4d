"""The AWS provider: EC2 through boto3. One attempt is one RunInstances call in one zone.

- **Idempotent by attempt.** Every RunInstances carries a ClientToken derived from the attempt id
  (AWS returns the first call's instances to a repeated token) and Corral's tags; a launch first
  looks for instances tagged with its attempt and returns those instead of launching again.
- **Fast failover.** botocore's own retries are off for launches: a sold-out zone answers with
  HTTP 500, which botocore would otherwise retry for seconds. Failover happens in Corral.
- **All or nothing.** ``MinCount = MaxCount = count``; a launch that still comes back short, or
  fails after instances exist, terminates them before raising. A teardown that keeps failing
  raises: it is reported, never forgotten.
- **Parameters.** :mod:`.params` turns a spec into RunInstances parameters (pure).
- **Regions.** A client per region, built on first use. ``describe`` without an attempt tag
  asks every region Corral may launch in (the catalog's AWS regions, unless given).

Credentials come from boto3's usual chain and are never logged. ``endpoint_url`` points the
clients elsewhere (tests use moto's server on 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from corral.services.providers.aws.errors import from_sdk_error, is_ambiguous, with_family
from corral.services.providers.aws.params import (
    TAG_MARKET,
    check_spec,
    needs_image,
    run_params,
    ssm_parameter,
)
from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    CatalogOfferings,
    Features,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.providers.nodes import NodeAgents, NodeBookLogs
from corral.services.state.nodes import NodeBook
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    ProviderError,
    Scope,
)
from corral.shared.ports import port_text
from corral.shared.retry import with_retries

log = logging.getLogger("corral.providers.aws")

# The images a launch boots when neither the task (resources.image_id), the config's ImageId
# nor a launch template names one: public SSM parameters that always point at the newest build.
# Canonical publishes Ubuntu's under /aws/service/canonical/; AWS its Deep Learning AMIs (NVIDIA
# driver, CUDA, Docker with the NVIDIA container toolkit) under /aws/service/deeplearning/.
DEFAULT_IMAGE_ID = (
    "ssm:/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
)
DEFAULT_GPU_IMAGE_ID = (
    "ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
IMAGE_CACHE_S = 600.0  # an SSM parameter's AMI is read again after this long

# EC2 states as the port's. A stopped machine is "stopped": one Corral stopped (corral stop,
# autostop) waits to be started; any other (a spot interruption with behaviour "stop", someone
# in the console) no longer runs its work, so the observer takes it for lost.
STATES: dict[str, str] = {
    "pending": "pending",
    "running": "running",
    "shutting-down": "terminating",
    "terminated": "terminated",
    "stopping": "stopped",
    "stopped": "stopped",
}
ENDED = ("terminating", "terminated")
REMEMBERED_ATTEMPTS = 10_000  # attempts whose region this process remembers


class AwsProvider(CatalogOfferings, NodeBookLogs):
    """The ``aws`` cloud. Thread-safe: launches run in a worker thread next to describes."""

    name = "aws"
    poll_interval_s: float  # DescribeInstances is rate-limited per account (see __init__)

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        default_image_id: str | None = None,
        default_gpu_image_id: str | None = None,
        session: boto3.session.Session | None = None,
        regions: Sequence[str] | None = None,
        sdk_max_attempts: int = 3,
        terminate_attempts: int = 3,
        terminate_backoff_s: float = 1.0,
        launch_resends: int = 2,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
        credentials_ttl_s: float = 60.0,
        nodes: NodeAgents | None = None,
        log_book: NodeBook | None = None,
        poll_interval_s: float = 2.0,
    ) -> None:
        """``regions``: where ``describe`` looks (None: the catalog's AWS regions).
        ``sdk_max_attempts``: botocore's tries for describe and terminate (launches get one).
        ``terminate_attempts``: Corral's own tries of a teardown before it raises.
        ``launch_resends``: resends of a RunInstances that got no answer (same ClientToken).
        ``nodes``: boot the node agent on every machine (None: a blind boot script).
        ``poll_interval_s``: the shortest time between two looks at the machines
        (the registry passes the settings' ``timers.cloud_poll_interval_s``; 2 s as shipped)."""
        self.poll_interval_s = poll_interval_s
        self._use_agents(nodes, log_book)
        # StopInstances / StartInstances (EBS-backed machines); agents register via the API.
        self.features = Features(stop=True, agents_through_api=nodes is not None, subnet_zones=True)
        self.endpoint_url = endpoint_url
        # None: Corral's defaults above; one image given for CPU launches serves GPU ones too.
        self.default_image_id = default_image_id or DEFAULT_IMAGE_ID
        self.default_gpu_image_id = default_gpu_image_id or default_image_id or DEFAULT_GPU_IMAGE_ID
        self._images: dict[tuple[str, str], tuple[float, str]] = {}  # (region, path) -> AMI
        self._groups: dict[tuple[str, str, str], str] = {}  # (region, vpc, name) -> group id
        self.sdk_max_attempts = sdk_max_attempts
        self.terminate_attempts = max(1, terminate_attempts)
        self.terminate_backoff_s = terminate_backoff_s
        self.launch_resends = launch_resends
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.credentials_ttl_s = credentials_ttl_s
        self._session = session
        self._regions = tuple(regions) if regions is not None else None
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str, str], Any] = {}
        # attempt id -> region, so describe() by attempt asks one region; the newest only.
        self._attempt_regions: OrderedDict[str, str] = OrderedDict()
        self._credentials_seen: tuple[float, bool] | None = None

    # --- clients ---------------------------------------------------------------------------
    def session(self) -> boto3.session.Session:
        """The boto3 session (built on first use: its credential chain is read then)."""
        with self._lock:
            if self._session is None:
                self._session = boto3.session.Session()
            return self._session

    def client(self, region: str, purpose: str = "ops", service: str = "ec2") -> Any:
        """The EC2 (or ``service``'s) client of a region. ``purpose`` "launch": botocore never
        retries, so a capacity error reaches failover in milliseconds; "ops": botocore's
        standard retries."""
        session = self.session()
        with self._lock:
            key = (region, purpose, service)
            if key not in self._clients:
                tries = 1 if purpose == "launch" else self.sdk_max_attempts
                config = Config(
                    retries={"mode": "standard", "total_max_attempts": tries},
                    connect_timeout=self.connect_timeout_s,
                    read_timeout=self.read_timeout_s,
                    user_agent_extra="corral",
                )
                self._clients[key] = session.client(
                    service, region_name=region, endpoint_url=self.endpoint_url, config=config
                )
            return self._clients[key]

    def regions(self) -> tuple[str, ...]:
        """Where ``describe`` looks: the configured regions and any this process launched in."""
        if self._regions is not None:
            base = self._regions
        else:
            from corral.services.settings import installed_catalog

            base = installed_catalog().regions(self.name)
        with self._lock:
            touched = tuple(self._attempt_regions.values())
        return tuple(dict.fromkeys((*base, *touched)))

    def has_credentials(self) -> bool:
        """Whether boto3's chain finds credentials (remembered for ``credentials_ttl_s``: the
        chain may ask the instance metadata service, which takes a second off EC2)."""
        now = time.monotonic()
        seen = self._credentials_seen
        if seen is not None and now - seen[0] < self.credentials_ttl_s:
            return seen[1]
        try:
            found = self.session().get_credentials() is not None
        except BotoCoreError as exc:  # e.g. a profile named in the environment does not exist
            log.warning("AWS credentials could not be read: %s", type(exc).__name__)
            found = False
        self._credentials_seen = (now, found)
        return found

    def subnet_zone(self, region: str, subnet_id: str) -> str | None:
        """The zone a subnet of ``region`` is in (None: the region has no such subnet)."""
        try:
            found = self.client(region).describe_subnets(SubnetIds=[subnet_id])["Subnets"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidSubnetID.NotFound":
                return None
            raise
        return str(found[0]["AvailabilityZone"]) if found else None

    # --- launch ----------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]:
        """``spec.count`` instances in ``spec.zone``, all or none; idempotent by attempt id."""
        check_spec(spec)
        boot = None if self.nodes is None else self.nodes.boot_script(spec)
        params = run_params(spec, self.image_for(spec), boot)
        if spec.ports:
            self._open_ports(spec, params)
        with self._lock:
            self._attempt_regions[spec.attempt_id] = spec.region
            if len(self._attempt_regions) > REMEMBERED_ATTEMPTS:
                self._attempt_regions.popitem(last=False)
        found = self._described(spec.region, _tag_filters({TAG_ATTEMPT: spec.attempt_id}))
        if found:
            return self._seen(self._adopt(spec, found))
        log.info(
            "launching %d %s (%s) in %s for attempt %s",
            spec.count,
            spec.instance_type,
            spec.market,
            spec.zone,
            spec.attempt_id,
        )
        response = self._run_instances(spec.region, params)
        return self._seen(self._accept(spec, response.get("Instances", [])))

    # --- ports ------------------------------------------------------------------------------
    def _open_ports(self, spec: LaunchSpec, params: dict[str, Any]) -> None:
        """Open the task's ports (resources.ports) to the world: a security group of Corral's
        per set of ports and VPC (found again by name, so every launch of that set shares it),
        added beside the machine's other groups (the VPC's default one when none is named)."""
        ec2 = self.client(spec.region)
        try:
            vpc = self._vpc_of(ec2, params)
            group = self._ports_group(ec2, spec.region, vpc, spec.ports)
            if params.get("NetworkInterfaces"):
                nic = params["NetworkInterfaces"][0]
                nic["Groups"] = [*nic.get("Groups", []), group]
            elif params.get("SecurityGroupIds"):
                params["SecurityGroupIds"] = [*params["SecurityGroupIds"], group]
            else:
                default = _group_id(ec2, vpc, "default")
                params["SecurityGroupIds"] = [g for g in (default, group) if g]
        except ProviderError:
            raise
        except Exception as exc:
            raise from_sdk_error(exc) from exc

    def _vpc_of(self, ec2: Any, params: dict[str, Any]) -> str:
        subnet = params.get("SubnetId") or next(
            (n.get("SubnetId") for n in params.get("NetworkInterfaces") or [] if n.get("SubnetId")),
            None,
        )
        if subnet:
            [found] = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
            return str(found["VpcId"])
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
        if not vpcs:
            raise InvalidRequestError(
                "resources.ports needs a VPC: this region has no default VPC; name a subnet "
                "in advanced_instance_config (SubnetId)",
                code="VPCIdNotSpecified",
            )
        return str(vpcs[0]["VpcId"])

    def _ports_group(self, ec2: Any, region: str, vpc: str, ports: list[tuple[int, int]]) -> str:
        text = ",".join(port_text(r) for r in ports)
        name = "corral-ports-" + hashlib.sha256(text.encode()).hexdigest()[:12]
        with self._lock:
            known = self._groups.get((region, vpc, name))
        if known:
            return known
        group = _group_id(ec2, vpc, name)
        if group is None:
            try:
                group = str(
                    ec2.create_security_group(
                        GroupName=name,
                        Description=f"Corral: TCP {text} open (resources.ports)",
                        VpcId=vpc,
                        TagSpecifications=[
                            {
                                "ResourceType": "security-group",
                                "Tags": [{"Key": TAG_MANAGED, "Value": "true"}],
                            }
                        ],
                    )["GroupId"]
                )
            except Exception as exc:
                if _error_code(exc) != "InvalidGroup.Duplicate":
                    raise
                group = _group_id(ec2, vpc, name)  # another launch made it meanwhile
                assert group is not None
        rules = [
            {
                "IpProtocol": "tcp",
                "FromPort": lo,
                "ToPort": hi,
                "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "resources.ports"}],
            }
            for lo, hi in ports
        ]
        try:
            ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=rules)
        except Exception as exc:
            if _error_code(exc) != "InvalidPermission.Duplicate":
                raise
        with self._lock:
            self._groups[(region, vpc, name)] = group
        return group

    # --- images -----------------------------------------------------------------------------
    def image_for(self, spec: LaunchSpec) -> str | None:
        """The AMI a launch boots: the task's image, else the default for its kind (a GPU
        image when accelerators are asked for), an SSM parameter read in the launch's region.
        None when the config's ImageId or a launch template names the image."""
        if not needs_image(spec):
            return None
        named = spec.image_id or (
            self.default_gpu_image_id if spec.accelerators else self.default_image_id
        )
        path = ssm_parameter(named)
        if path is None:
            return named
        key, now = (spec.region, path), time.monotonic()
        with self._lock:
            seen = self._images.get(key)
        if seen is not None and now - seen[0] < IMAGE_CACHE_S:
            return seen[1]
        try:
            answer = self.client(spec.region, "ops", service="ssm").get_parameter(Name=path)
            ami = str(answer["Parameter"]["Value"])
        except Exception as exc:
            setting = (
                "resources.image_id"
                if spec.image_id
                else (
                    "CORRAL_AWS_DEFAULT_GPU_IMAGE_ID"
                    if spec.accelerators
                    else "CORRAL_AWS_DEFAULT_IMAGE_ID"
                )
            )
            raise InvalidRequestError(
                f"the image {named!r} ({setting}) could not be read from SSM in "
                f"{spec.region}: {exc}; name an AMI id or another parameter",
                code="InvalidAMIID.Unresolved",
            ) from None
        with self._lock:
            self._images[key] = (now, ami)
        return ami

    def _run_instances(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        client = self.client(region, "launch")
        resends = 0
        while True:
            try:
                response: dict[str, Any] = client.run_instances(**params)
                return response
            except Exception as exc:
                # No answer at all: the call may have launched. Resending the same ClientToken
                # returns those instances instead of launching more.
                if is_ambiguous(exc) and resends < self.launch_resends:
                    resends += 1
                    log.warning("RunInstances in %s got no answer; sending it again", region)
                    continue
                # A vCPU limit names no class: the instance type asked for does.
                market = "spot" if params.get("InstanceMarketOptions") else "on_demand"
                raise with_family(
                    from_sdk_error(exc), str(params.get("InstanceType", "")), market
                ) from exc

    def _accept(self, spec: LaunchSpec, raw: list[dict[str, Any]]) -> list[ProviderInstance]:
        """The launched instances, or none of them: a short result is terminated."""
        ids = [str(i["InstanceId"]) for i in raw if "InstanceId" in i]
        try:
            if len(raw) != spec.count:
                # MinCount = MaxCount makes EC2 all-or-nothing; never trust that blindly.
                raise CapacityError(
                    f"RunInstances returned {len(raw)} of {spec.count} instances in {spec.zone}",
                    code="PartialLaunch",
                )
            return self._instances(spec.region, raw)
        except Exception as exc:
            self._roll_back(spec.region, ids, exc)
            raise

    def _adopt(self, spec: LaunchSpec, found: list[dict[str, Any]]) -> list[ProviderInstance]:
        """A redelivered attempt: return what the first delivery launched, if it is whole."""
        live = [i for i in found if _state(i) not in ENDED]
        by_reservation: dict[str, list[dict[str, Any]]] = {}
        for inst in sorted(live, key=lambda i: str(i.get("LaunchTime", ""))):
            by_reservation.setdefault(str(inst.get("ReservationId")), []).append(inst)
        # One RunInstances is one reservation; keep the first whole one, end any other.
        keep = next((g for g in by_reservation.values() if len(g) == spec.count), [])
        extra = [str(i["InstanceId"]) for i in live if i not in keep]
        if extra:
            log.warning("attempt %s: terminating extra instances %s", spec.attempt_id, extra)
            self._terminate_in_region(spec.region, extra)
        if keep:
            log.info("attempt %s already launched: returning its instances", spec.attempt_id)
            return self._instances(spec.region, keep)
        if live:
            raise CapacityError(
                f"attempt {spec.attempt_id} found {len(live)} of {spec.count} instances alive "
                "and terminated them",
                code="PartialLaunch",
            )
        raise ProviderError(
            f"attempt {spec.attempt_id} launched before and its instances have ended",
            code="AttemptEnded",
            scope=Scope.NONE,
        )

    def _roll_back(self, region: str, ids: list[str], cause: BaseException) -> None:
        """Terminate what a failed launch got; if that fails too, say so loudly."""
        if not ids:
            return
        try:
            self._terminate_in_region(region, ids)
        except ProviderError as exc:
            log.error("launch failed and its instances %s in %s may leak: %s", ids, region, exc)
            raise ProviderError(
                f"launch failed ({cause}) and terminating {', '.join(ids)} in {region} "
                f"failed too: {exc}",
                code="TeardownFailed",
            ) from cause

    # --- describe --------------------------------------------------------------------------
    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]:
        """Corral's instances (tagged ``corral-managed``) carrying every tag given, in every
        region Corral may use; an attempt's own region only, when this process launched it."""
        wanted = {**(tags or {}), TAG_MANAGED: "true"}
        with self._lock:
            region = self._attempt_regions.get(wanted.get(TAG_ATTEMPT, ""))
        regions = (region,) if region else self.regions()
        out: list[ProviderInstance] = []
        for r in regions:
            out.extend(self._instances(r, self._described(r, _tag_filters(wanted))))
        return self._seen(out)

    def _described(self, region: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """DescribeInstances in one region as instance dicts, each with its ReservationId."""
        out: list[dict[str, Any]] = []
        try:
            pages = (
                self.client(region).get_paginator("describe_instances").paginate(Filters=filters)
            )
            for page in pages:
                for res in page.get("Reservations", []):
                    out.extend(
                        {**i, "ReservationId": res.get("ReservationId")}
                        for i in res.get("Instances", [])
                    )
        except Exception as exc:
            err = from_sdk_error(exc)
            if err.code == "OptInRequired":  # a region the account has not enabled: empty
                return []
            raise err from exc
        return out

    def _instances(self, region: str, raw: Iterable[dict[str, Any]]) -> list[ProviderInstance]:
        ordered = sorted(raw, key=lambda i: int(i.get("AmiLaunchIndex", 0)))
        return [_to_instance(region, i) for i in ordered]

    # --- terminate -------------------------------------------------------------------------
    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Terminate instances; unknown and ended ids are fine. Without ``zone``, each id's
        region is looked up. Retried ``terminate_attempts`` times; raises if it still fails."""
        ids = sorted(set(provider_ids))
        if not ids:
            return
        if self.nodes is not None:
            self.nodes.end(ids)
        if zone:
            self._terminate_in_region(self._region_of_zone(zone), ids)
            return
        for region, found in self._locate(ids).items():
            self._terminate_in_region(region, found)

    def _locate(self, ids: list[str]) -> dict[str, list[str]]:
        """The region of each id that exists and has not ended, looked up region by region."""
        missing, out = set(ids), {}
        for region in self.regions():
            if not missing:
                break
            filters = [{"Name": "instance-id", "Values": sorted(missing)}]
            found = self._described(region, filters)
            live = [str(i["InstanceId"]) for i in found if _state(i) != "terminated"]
            missing -= {str(i["InstanceId"]) for i in found}
            if live:
                out[region] = live
        return out

    def _terminate_in_region(self, region: str, ids: list[str]) -> None:
        def failed(try_no: int, exc: Exception) -> None:
            log.warning("terminating %s in %s failed (try %d): %s", ids, region, try_no, exc)

        try:
            with_retries(
                lambda: self._terminate_once(region, ids),
                tries=self.terminate_attempts,
                base_s=self.terminate_backoff_s,
                sleep=time.sleep,
                # No retry will fix credentials or a malformed id: those are raised at once.
                retryable=lambda exc: (
                    isinstance(exc, ProviderError)
                    and not isinstance(exc, AuthError | InvalidRequestError)
                ),
                on_failure=failed,
            )
        except (AuthError, InvalidRequestError):
            raise
        except ProviderError as last:
            raise ProviderError(
                f"could not terminate {', '.join(ids)} in {region} after "
                f"{self.terminate_attempts} tries: {last}",
                code="TerminateFailed",
            ) from last

    def _terminate_once(self, region: str, ids: list[str]) -> None:
        client = self.client(region)
        try:
            client.terminate_instances(InstanceIds=ids)
            return
        except Exception as exc:
            err = from_sdk_error(exc)
            if not err.code.startswith("InvalidInstanceID."):
                raise err from exc
        # Some ids are unknown here (never launched, or ended long ago): end the others.
        found = self._described(region, [{"Name": "instance-id", "Values": ids}])
        live = [str(i["InstanceId"]) for i in found if _state(i) != "terminated"]
        if live:
            try:
                client.terminate_instances(InstanceIds=live)
            except Exception as exc:
                raise from_sdk_error(exc) from exc

    # --- stop and start ----------------------------------------------------------------------
    def stop(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Stop machines (StopInstances): their EBS volumes are kept, compute is not billed;
        their agents keep their node tokens for :meth:`start`. An instance-store-backed
        machine cannot stop: EC2 refuses (UnsupportedOperation), raised as is."""
        ids = sorted(set(provider_ids))
        if not ids:
            return
        if self.nodes is not None:
            self.nodes.pause(ids)
        self._each_region(ids, zone, "stop_instances")

    def start(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Start stopped machines (StartInstances); their agents resume on boot."""
        ids = sorted(set(provider_ids))
        if ids:
            self._each_region(ids, zone, "start_instances")

    def _each_region(self, ids: list[str], zone: str | None, call: str) -> None:
        by_region = {self._region_of_zone(zone): ids} if zone else self._locate(ids)
        for region, found in by_region.items():
            try:
                getattr(self.client(region), call)(InstanceIds=found)
            except Exception as exc:
                raise from_sdk_error(exc) from exc

    def _region_of_zone(self, zone: str) -> str:
        known = [r for r in self.regions() if zone.startswith(r)]
        return max(known, key=len) if known else zone.rstrip("abcdefghijklmnopqrstuvwxyz")


def _tag_filters(tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{k}", "Values": [v]} for k, v in sorted(tags.items())]


def _group_id(ec2: Any, vpc: str, name: str) -> str | None:
    found = ec2.describe_security_groups(
        Filters=[
            {"Name": "group-name", "Values": [name]},
            {"Name": "vpc-id", "Values": [vpc]},
        ]
    )["SecurityGroups"]
    return str(found[0]["GroupId"]) if found else None


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


def _state(inst: dict[str, Any]) -> str:
    return STATES.get(str((inst.get("State") or {}).get("Name", "")), "lost")


def _to_instance(region: str, inst: dict[str, Any]) -> ProviderInstance:
    tags = {str(t["Key"]): str(t["Value"]) for t in inst.get("Tags") or []}
    tags.setdefault(TAG_NODE, str(inst.get("AmiLaunchIndex", 0)))
    if inst.get("InstanceLifecycle") == "spot":
        derived = "spot"
    else:
        derived = "reserved" if inst.get("CapacityReservationId") else "on_demand"
    return ProviderInstance(
        provider_id=str(inst["InstanceId"]),
        cloud="aws",
        region=region,
        zone=str((inst.get("Placement") or {}).get("AvailabilityZone", "")),
        instance_type=str(inst.get("InstanceType", "")),
        market=tags.get(TAG_MARKET) or derived,
        state=_state(inst),
        address=inst.get("PublicIpAddress") or inst.get("PrivateIpAddress") or None,
        tags=tags,
    )
