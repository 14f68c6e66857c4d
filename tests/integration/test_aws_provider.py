"""The AWS provider against moto's server, behind a proxy that injects EC2 errors and records
what Corral sends (tests/fakes/aws_faults.py). No Celery here: the provider alone."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from corral.services.providers.aws.params import client_token
from corral.services.providers.aws.provider import (
    DEFAULT_GPU_IMAGE_ID,
    DEFAULT_IMAGE_ID,
    AwsProvider,
)
from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    LaunchSpec,
)
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)
from corral.shared.observe import observe

from fakes.aws_faults import FaultyMoto, post_fault, recorded_requests

pytestmark = pytest.mark.integration

AMI = "ami-12c6146b"  # one of moto's default images
REGIONS = ("us-east-1", "us-west-2")
RESERVATION = "cr-0123456789abcdef0"
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def fake_session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )


# One session for the module's providers: it caches botocore's service models, so building a
# provider's clients takes milliseconds instead of a second. Each provider has its own clients.
SESSION = fake_session()


@pytest.fixture(scope="module")
def moto_server() -> Iterator[FaultyMoto]:
    with FaultyMoto() as server:
        for region in REGIONS:  # moto builds a region's backend on first use: seconds
            SESSION.client("ec2", region_name=region, endpoint_url=server.url).describe_instances()
        yield server


@pytest.fixture
def proxy(moto_server: FaultyMoto, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyMoto]:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    moto_server.clear_faults()
    moto_server.clear_requests()
    yield moto_server
    moto_server.clear_faults()


@pytest.fixture
def provider(proxy: FaultyMoto) -> Callable[..., AwsProvider]:
    def make(**kw: Any) -> AwsProvider:
        options: dict[str, Any] = {
            "endpoint_url": proxy.url,
            "session": SESSION,
            "default_image_id": AMI,
            "regions": REGIONS,
            "terminate_backoff_s": 0.01,
            **kw,
        }
        return AwsProvider(**options)

    return make


def spec(**kw: Any) -> LaunchSpec:
    """A fresh attempt: unique request and attempt ids, so tests never see each other."""
    request_id = f"r-{uuid.uuid4().hex[:10]}"
    fields: dict[str, Any] = {
        "request_id": request_id,
        "attempt_id": f"{request_id}-0-0-0",
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "p3.2xlarge",
        **kw,
    }
    return LaunchSpec(**fields)


# --- errors -------------------------------------------------------------------------------
def test_a_sold_out_zone_fails_in_milliseconds_with_one_request(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    proxy.add_fault("InsufficientInstanceCapacity", zone="us-east-1a")
    p = provider()
    p.client("us-east-1", "launch"), p.client("us-east-1")  # built once per process, not timed
    started = time.monotonic()
    with pytest.raises(CapacityError) as info:
        p.launch(spec())
    elapsed_s = time.monotonic() - started
    assert info.value.scope == Scope.ZONE
    assert info.value.code == "InsufficientInstanceCapacity"
    # HTTP 500: botocore would retry it for about a second; it must not.
    assert len(proxy.requests()) == 1
    assert elapsed_s < 1.0
    # The same type in another zone is not affected.
    assert len(p.launch(spec(zone="us-east-1b"))) == 1


@pytest.mark.parametrize(
    ("code", "market", "cls", "scope"),
    [
        ("VcpuLimitExceeded", "on_demand", QuotaError, Scope.FAMILY),  # its vCPU class (#46)
        ("MaxSpotInstanceCountExceeded", "spot", QuotaError, Scope.INSTANCE_TYPE),
        ("RequestLimitExceeded", "on_demand", ThrottledError, Scope.NONE),
        ("InternalError", "on_demand", ThrottledError, Scope.NONE),
        ("AuthFailure", "on_demand", AuthError, Scope.CLOUD),
        ("InvalidParameterValue", "on_demand", InvalidRequestError, Scope.REQUEST),
        ("Unsupported", "on_demand", CapacityError, Scope.ZONE),
    ],
)
def test_sdk_errors_become_typed_errors_without_sdk_retries(
    proxy: FaultyMoto,
    provider: Callable[..., AwsProvider],
    code: str,
    market: str,
    cls: type[ProviderError],
    scope: Scope,
) -> None:
    proxy.add_fault(code, zone="us-east-1c", market=market)
    with pytest.raises(ProviderError) as info:
        provider().launch(spec(zone="us-east-1c", market=market))
    assert type(info.value) is cls
    assert info.value.scope == scope
    assert info.value.code == code
    assert [r.fault for r in proxy.requests()] == [code]


def test_a_fault_with_a_count_clears_after_it(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    proxy.add_fault("InsufficientInstanceCapacity", instance_type="g5.xlarge", count=1)
    p = provider()
    with pytest.raises(CapacityError):
        p.launch(spec(instance_type="g5.xlarge"))
    assert len(p.launch(spec(instance_type="g5.xlarge"))) == 1
    assert proxy.faults() == []


# --- idempotency --------------------------------------------------------------------------
def test_a_redelivered_launch_returns_the_first_instances(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    s = spec(count=2)
    first = provider().launch(s)
    # Another worker process (a fresh provider) gets the redelivered message.
    again = provider().launch(s)
    assert sorted(i.provider_id for i in again) == sorted(i.provider_id for i in first)
    assert len(first) == 2
    assert len(proxy.requests()) == 1


def test_the_client_token_is_sent_and_stable_per_attempt(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    proxy.add_fault("RequestLimitExceeded", zone="us-east-1d", count=1)
    p = provider()
    s = spec(zone="us-east-1d")
    with pytest.raises(ThrottledError):
        p.launch(s)
    p.launch(s)  # the same attempt, delivered again: now it launches
    other = spec(zone="us-east-1d")
    p.launch(other)
    tokens = [r.params["ClientToken"] for r in proxy.requests()]
    assert tokens[0] == tokens[1] == client_token(s.attempt_id)
    assert tokens[2] == client_token(other.attempt_id) != tokens[0]
    assert all(len(t) <= 64 and t.isascii() for t in tokens)


def test_tags_carry_the_request_and_attempt(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    s = spec(tags={"owner": "alice"})
    provider().launch(s)
    (sent,) = proxy.requests()
    for kind in ("instance", "volume"):
        tags = sent.tags(kind)
        assert tags[TAG_REQUEST] == s.request_id
        assert tags[TAG_ATTEMPT] == s.attempt_id
        assert tags[TAG_MANAGED] == "true"
        assert tags["owner"] == "alice"


# --- markets ------------------------------------------------------------------------------
def test_spot_sends_instance_market_options(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    p = provider()
    s = spec(
        market="spot",
        advanced_instance_config={"InstanceMarketOptions": {"SpotOptions": {"MaxPrice": "1.5"}}},
    )
    (launched,) = p.launch(s)
    (sent,) = proxy.requests()
    assert sent.params["InstanceMarketOptions.MarketType"] == "spot"
    assert sent.params["InstanceMarketOptions.SpotOptions.MaxPrice"] == "1.5"
    assert sent.params["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert not any(k.startswith("CapacityReservation") for k in sent.params)
    (seen,) = p.describe({TAG_ATTEMPT: s.attempt_id})
    assert launched.market == seen.market == "spot"


def test_on_demand_drops_market_options_from_the_config(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    config = {"InstanceMarketOptions": {"MarketType": "spot"}}
    provider().launch(spec(advanced_instance_config=config))
    (sent,) = proxy.requests()
    assert not any(k.startswith("InstanceMarketOptions") for k in sent.params)


@pytest.mark.parametrize(
    ("market", "reservation_id", "config"),
    [
        ("reserved", RESERVATION, {}),
        (
            "on_demand",
            None,
            {
                "CapacityReservationSpecification": {
                    "CapacityReservationPreference": "open",
                    "CapacityReservationTarget": {"CapacityReservationId": RESERVATION},
                }
            },
        ),
    ],
)
def test_a_reservation_sends_its_id(
    proxy: FaultyMoto,
    provider: Callable[..., AwsProvider],
    market: str,
    reservation_id: str | None,
    config: dict[str, Any],
) -> None:
    p = provider()
    s = spec(market=market, reservation_id=reservation_id, advanced_instance_config=config)
    p.launch(s)
    (sent,) = proxy.requests()
    key = "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
    assert sent.params[key] == RESERVATION
    # A target and a preference exclude each other in EC2.
    assert "CapacityReservationSpecification.CapacityReservationPreference" not in sent.params
    assert sent.market == "reserved"
    (seen,) = p.describe({TAG_ATTEMPT: s.attempt_id})
    assert seen.market == "reserved"


@pytest.mark.parametrize(
    ("market", "reservation_id"), [("reserved", None), ("spot", RESERVATION), ("any", None)]
)
def test_impossible_markets_fail_before_any_call(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider], market: str, reservation_id: str | None
) -> None:
    with pytest.raises(InvalidRequestError):
        provider().launch(spec(market=market, reservation_id=reservation_id))
    assert proxy.requests() == []


# --- parameters ---------------------------------------------------------------------------
def test_advanced_instance_config_is_passed_through_under_corrals_choices(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    s = spec(
        zone="us-east-1b",
        advanced_instance_config={
            "ImageId": "ami-03cf127a",
            "InstanceType": "t3.micro",
            "MinCount": 5,
            "Placement": {"AvailabilityZone": "us-east-1f", "Tenancy": "default"},
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}],
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "team", "Value": "ml"},
                        {"Key": TAG_ATTEMPT, "Value": "spoofed"},
                    ],
                }
            ],
        },
    )
    provider().launch(s)
    (sent,) = proxy.requests()
    p = sent.params
    assert p["ImageId"] == "ami-03cf127a"
    assert p["BlockDeviceMapping.1.DeviceName"] == "/dev/sda1"
    assert p["BlockDeviceMapping.1.Ebs.VolumeSize"] == "200"
    assert (p["InstanceType"], p["MinCount"], p["MaxCount"]) == ("p3.2xlarge", "1", "1")
    assert (p["Placement.AvailabilityZone"], p["Placement.Tenancy"]) == ("us-east-1b", "default")
    instance_tags = sent.tags("instance")
    assert instance_tags["team"] == "ml"
    assert instance_tags[TAG_ATTEMPT] == s.attempt_id
    assert sent.tags("volume")[TAG_ATTEMPT] == s.attempt_id


def test_the_default_image_is_used_when_the_config_names_none(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    provider(default_image_id="ami-03cf127a").launch(spec())
    assert proxy.requests()[0].params["ImageId"] == "ami-03cf127a"


def test_a_tasks_image_id_reaches_run_instances_as_written(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    """Issue 24: resources.image_id was ignored."""
    provider().launch(spec(image_id="ami-03cf127a"))
    assert proxy.requests()[0].params["ImageId"] == "ami-03cf127a"


def test_an_image_named_by_an_ssm_parameter_boots_the_ami_it_points_at(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    """``ssm:/path`` (or EC2's own ``resolve:ssm:/path``) is read in the launch's region; moto
    ships Amazon Linux's public parameters as AWS does."""
    path = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"
    ssm = SESSION.client("ssm", region_name="us-east-1", endpoint_url=proxy.url)
    ami = ssm.get_parameter(Name=path)["Parameter"]["Value"]
    assert ami.startswith("ami-")
    p = provider()
    p.launch(spec(image_id=f"ssm:{path}"))
    p.launch(spec(image_id=f"resolve:ssm:{path}"))
    assert [r.params["ImageId"] for r in proxy.requests()] == [ami, ami]


def test_an_image_id_beside_the_configs_image_id_is_refused(
    provider: Callable[..., AwsProvider],
) -> None:
    both = spec(image_id="ami-03cf127a", advanced_instance_config={"ImageId": "ami-12c6146b"})
    with pytest.raises(InvalidRequestError, match="cannot both be given"):
        provider().launch(both)


def test_ports_open_in_a_security_group_of_corrals_shared_by_launches_of_those_ports(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    """Issue 24: a service's ports were ignored. resources.ports become ingress rules of one
    security group per set of ports (beside the VPC's default group), and the machine's
    address is what describe reports."""
    p = provider()
    ports = [(8080, 8080), (9000, 9010)]
    first = p.launch(spec(ports=ports))
    p.launch(spec(ports=ports))
    sent = [r.params for r in proxy.requests()]
    groups = [
        sorted(v for k, v in params.items() if k.startswith("SecurityGroupId")) for params in sent
    ]
    assert groups[0] == groups[1] and len(groups[0]) == 2
    ec2 = SESSION.client("ec2", region_name="us-east-1", endpoint_url=proxy.url)
    found = ec2.describe_security_groups(GroupIds=groups[0])["SecurityGroups"]
    ours = [g for g in found if g["GroupName"].startswith("corral-ports-")]
    assert [g["GroupName"] for g in found if g not in ours] == ["default"]
    [group] = ours
    rules = {(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in group["IpPermissions"]}
    assert rules == {("tcp", 8080, 8080), ("tcp", 9000, 9010)}
    assert all(ip["CidrIp"] == "0.0.0.0/0" for r in group["IpPermissions"] for ip in r["IpRanges"])
    [seen] = [i for i in p.describe() if i.provider_id == first[0].provider_id]
    assert seen.address and seen.address.count(".") == 3


def test_the_defaults_are_public_ssm_parameters_a_gpu_launch_gets_the_deep_learning_ami(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    """No placeholder: a launch naming no image boots Canonical's Ubuntu 22.04, a GPU launch
    AWS's Deep Learning Base GPU AMI, both read from public SSM parameters (moto does not ship
    those two, so the launch stops at the read, naming the parameter and the setting)."""
    assert DEFAULT_IMAGE_ID == (
        "ssm:/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
    )
    assert DEFAULT_GPU_IMAGE_ID.startswith("ssm:/aws/service/deeplearning/ami/x86_64/")
    p = provider(default_image_id=None)
    with pytest.raises(InvalidRequestError) as cpu:
        p.launch(spec(instance_type="m5.large"))
    assert DEFAULT_IMAGE_ID in str(cpu.value) and "CORRAL_AWS_DEFAULT_IMAGE_ID" in str(cpu.value)
    with pytest.raises(InvalidRequestError) as gpu:
        p.launch(spec(accelerators={"V100": 1}))
    assert DEFAULT_GPU_IMAGE_ID in str(gpu.value)
    assert "CORRAL_AWS_DEFAULT_GPU_IMAGE_ID" in str(gpu.value)
    assert proxy.requests() == []  # nothing launched with a wrong image


def test_setup_and_run_become_user_data(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    s = spec(setup="pip install torch", run="python train.py", envs={"MSG": "a b'c"}, count=2)
    provider().launch(s)
    script = base64.b64decode(proxy.requests()[0].params["UserData"]).decode()
    assert script.startswith("#!/bin/bash\n")
    assert "export MSG='a b'\"'\"'c'\n" in script
    assert "export CORRAL_NUM_NODES=2\n" in script
    assert script.index("pip install torch") < script.index("python train.py")


def test_user_data_and_a_task_script_conflict(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    s = spec(run="true", advanced_instance_config={"UserData": "#!/bin/sh\n"})
    with pytest.raises(InvalidRequestError):
        provider().launch(s)
    assert proxy.requests() == []


# --- all or nothing -----------------------------------------------------------------------
def short_launches(p: AwsProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make RunInstances give one instance whatever was asked (EC2 never should)."""
    real = p._run_instances

    def one(region: str, params: dict[str, Any]) -> dict[str, Any]:
        return real(region, {**params, "MinCount": 1, "MaxCount": 1})

    monkeypatch.setattr(p, "_run_instances", one)


def test_a_short_multi_node_launch_is_terminated(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    p = provider()
    short_launches(p, monkeypatch)
    s = spec(count=3)
    with pytest.raises(CapacityError) as info:
        p.launch(s)
    assert info.value.code == "PartialLaunch"
    assert [i.state for i in p.describe({TAG_ATTEMPT: s.attempt_id})] == ["terminated"]


def test_a_failed_roll_back_is_reported(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    p = provider(sdk_max_attempts=1, terminate_attempts=2)
    short_launches(p, monkeypatch)
    proxy.add_fault("InternalError", action="TerminateInstances")
    s = spec(count=2)
    with pytest.raises(ProviderError) as info:
        p.launch(s)
    assert info.value.code == "TeardownFailed"
    (left,) = p.describe({TAG_ATTEMPT: s.attempt_id})
    assert left.provider_id in str(info.value)  # named, so it can be cleaned up
    assert len(proxy.requests("TerminateInstances")) == 2


def test_nodes_are_numbered(proxy: FaultyMoto, provider: Callable[..., AwsProvider]) -> None:
    p = provider()
    s = spec(count=3)
    launched = p.launch(s)
    assert [i.tags[TAG_NODE] for i in launched] == ["0", "1", "2"]
    seen = p.describe({TAG_ATTEMPT: s.attempt_id})
    assert sorted(i.tags[TAG_NODE] for i in seen) == ["0", "1", "2"]


# --- describe -----------------------------------------------------------------------------
def test_describe_filters_by_tag_and_maps_states(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    p = provider()
    a, b = spec(), spec(region="us-west-2", zone="us-west-2a")
    (ia,) = p.launch(a)
    assert ia.state == "pending"  # RunInstances answers before the machine boots
    (ib,) = p.launch(b)
    foreign = fake_session().client("ec2", region_name="us-east-1", endpoint_url=proxy.url)
    foreign_id = foreign.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    # A fresh provider (no memory of these launches) looks in every region.
    fresh = provider()
    assert [i.provider_id for i in fresh.describe({TAG_REQUEST: a.request_id})] == [ia.provider_id]
    everything = {i.provider_id: i for i in fresh.describe()}
    assert {ia.provider_id, ib.provider_id} <= set(everything)
    assert foreign_id not in everything  # not Corral's
    assert everything[ib.provider_id].region == "us-west-2"
    assert everything[ia.provider_id].state == "running"
    foreign.stop_instances(InstanceIds=[ia.provider_id])
    stopped = fresh.describe({TAG_REQUEST: a.request_id})[0]
    assert stopped.state == "stopped"
    assert observe("running", stopped).lost  # not stopped by Corral: lost, as before
    fresh.terminate([ia.provider_id])
    assert fresh.describe({TAG_REQUEST: a.request_id})[0].state == "terminated"


@pytest.mark.parametrize(
    ("ec2_state", "state"),
    [
        ("pending", "pending"),
        ("running", "running"),
        ("shutting-down", "terminating"),
        ("terminated", "terminated"),
        ("stopping", "stopped"),
        ("stopped", "stopped"),
        ("something-new", "lost"),
    ],
)
def test_ec2_states_map_to_the_ports(ec2_state: str, state: str) -> None:
    from corral.services.providers.aws.provider import _to_instance

    raw = {"InstanceId": "i-1", "State": {"Name": ec2_state}, "InstanceType": "p3.2xlarge"}
    assert _to_instance("us-east-1", raw).state == state


# --- terminate ----------------------------------------------------------------------------
def test_terminate_is_idempotent(proxy: FaultyMoto, provider: Callable[..., AwsProvider]) -> None:
    p = provider()
    s = spec(region="us-west-2", zone="us-west-2b", count=2)
    ids = [i.provider_id for i in p.launch(s)]
    unknown = "i-0123456789abcdef0"
    fresh = provider()  # does not know the region: it looks the ids up
    fresh.terminate([*ids, unknown])
    fresh.terminate([*ids, unknown])
    fresh.terminate([unknown], zone="us-east-1a")
    fresh.terminate([*ids, unknown], zone="us-west-2b")
    fresh.terminate([])
    assert [i.state for i in fresh.describe({TAG_ATTEMPT: s.attempt_id})] == ["terminated"] * 2


def test_a_failing_teardown_is_retried(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    p = provider(sdk_max_attempts=1, terminate_attempts=3)
    s = spec()
    (inst,) = p.launch(s)
    proxy.add_fault("InternalError", action="TerminateInstances", count=2)
    p.terminate([inst.provider_id], zone=s.zone)
    assert [r.fault for r in proxy.requests("TerminateInstances")] == [
        "InternalError",
        "InternalError",
        None,
    ]
    assert p.describe({TAG_ATTEMPT: s.attempt_id})[0].state == "terminated"


def test_a_teardown_that_keeps_failing_raises(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    p = provider(sdk_max_attempts=1, terminate_attempts=3)
    s = spec()
    (inst,) = p.launch(s)
    proxy.add_fault("ServiceUnavailable", action="TerminateInstances")
    with pytest.raises(ProviderError) as info:
        p.terminate([inst.provider_id], zone=s.zone)
    assert info.value.code == "TerminateFailed"
    assert inst.provider_id in str(info.value)
    assert len(proxy.requests("TerminateInstances")) == 3
    assert p.describe({TAG_ATTEMPT: s.attempt_id})[0].state == "running"


# --- credentials and control from other processes ------------------------------------------
def test_has_credentials_follows_boto3s_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        empty = tmp_path / name.lower()
        empty.write_text("")
        monkeypatch.setenv(name, str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    remembering = AwsProvider()
    assert remembering.has_credentials() is False
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert AwsProvider().has_credentials() is True
    # The answer is remembered for a while: the chain may be slow to ask.
    assert remembering.has_credentials() is False
    assert AwsProvider(credentials_ttl_s=0).has_credentials() is True


def test_faults_can_be_armed_over_http(
    proxy: FaultyMoto, provider: Callable[..., AwsProvider]
) -> None:
    post_fault(proxy.url, "InsufficientHostCapacity", zone="us-east-1f", count=1)
    with urllib.request.urlopen(f"{proxy.url}/_faults", timeout=5) as resp:
        assert json.loads(resp.read())[0]["code"] == "InsufficientHostCapacity"
    p = provider()
    with pytest.raises(CapacityError):
        p.launch(spec(zone="us-east-1f"))
    p.launch(spec(zone="us-east-1f"))
    sent = recorded_requests(proxy.url)
    assert [(r.zone, r.fault) for r in sent] == [
        ("us-east-1f", "InsufficientHostCapacity"),
        ("us-east-1f", None),
    ]
