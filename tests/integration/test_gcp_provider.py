"""The GCP provider with the real google-cloud-compute client against the fake Compute API
(tests/fakes/gcp_compute.py): what it sends, how it reads errors, idempotency, teardown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from corral.services.providers.base import LaunchSpec
from corral.services.providers.gcp.errors import from_exception
from corral.services.providers.gcp.instance_body import (
    DEFAULT_GPU_IMAGE,
    insert_request_id,
    instance_name,
    label_key,
    label_value,
)
from corral.services.providers.gcp.provider import GcpProvider
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    LaunchTimeoutError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)

from fakes.gcp_compute import ERROR_KINDS, FakeCompute, FakeComputeControl, Fault

pytestmark = pytest.mark.integration

PROJECT = "corral-test"
NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_RE = re.compile(r"[a-z0-9_-]{0,63}")


@pytest.fixture
def fake() -> Iterator[FakeCompute]:
    with FakeCompute(project=PROJECT) as server:
        yield server


def make_provider(fake: FakeCompute, **kwargs: Any) -> GcpProvider:
    return GcpProvider(
        PROJECT,
        api_endpoint=fake.url,
        credentials=AnonymousCredentials(),
        teardown_backoff_s=0.01,
        **kwargs,
    )


@pytest.fixture
def provider(fake: FakeCompute) -> GcpProvider:
    return make_provider(fake)


def spec(attempt: str = "r-1-0-0-0", **fields: Any) -> LaunchSpec:
    request = attempt.split("-0-")[0]
    values: dict[str, Any] = {
        "request_id": request,
        "attempt_id": attempt,
        "cloud": "gcp",
        "region": "us-central1",
        "zone": "us-central1-a",
        "instance_type": "n2-standard-4",
        "tags": {"corral-managed": "true", "corral-request": request, "corral-attempt": attempt},
        **fields,
    }
    return LaunchSpec(**values)


def bodies(fake: FakeCompute) -> list[dict[str, Any]]:
    return [i["body"] for i in fake.inserts]


# --- what Corral sends ---------------------------------------------------------------------
def test_launch_sends_names_labels_and_request_ids_and_returns_running_nodes(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    got = provider.launch(spec(count=2))
    assert [g.state for g in got] == ["running", "running"]
    assert [g.tags["corral-node"] for g in got] == ["0", "1"]
    names = [instance_name("r-1-0-0-0", "0"), instance_name("r-1-0-0-0", "1")]
    assert [g.provider_id for g in got] == [f"us-central1-a/{n}" for n in names]
    assert {(g.region, g.zone, g.instance_type, g.market) for g in got} == {
        ("us-central1", "us-central1-a", "n2-standard-4", "on_demand")
    }
    sent = fake.inserts
    assert [s["requestId"] for s in sent] == [insert_request_id("r-1-0-0-0", n) for n in "01"]
    body = sent[0]["body"]
    assert body["name"] == names[0]
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n2-standard-4"
    assert body["labels"] == {
        "corral-managed": "true",
        "corral-request": "r-1",
        "corral-attempt": "r-1-0-0-0",
        "corral-node": "0",
    }
    assert body["scheduling"] == {"provisioningModel": "STANDARD"}
    assert "reservationAffinity" not in body
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith("family/debian-12")


def test_spot_sends_the_spot_provisioning_model_deleted_on_reclaim(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    (got,) = provider.launch(spec(market="spot", instance_type="g2-standard-8"))
    assert got.market == "spot"
    assert bodies(fake)[0]["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",  # a GPU machine cannot live-migrate
    }


def test_a_reservation_id_is_sent_as_specific_reservation_affinity(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    (got,) = provider.launch(spec(market="reserved", reservation_id="res-a100"))
    assert got.market == "reserved"
    assert bodies(fake)[0]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["res-a100"],
    }


@pytest.mark.parametrize(
    "seed",
    [
        {"instanceProperties": {"reservationAffinity": {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name", "values": ["res-seed"]}}},
        {"instance_properties": {"reservation_affinity": {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name", "values": ["res-seed"]}}},
    ],
)  # fmt: skip
def test_the_seeds_reservation_affinity_is_used_in_either_spelling(
    fake: FakeCompute, provider: GcpProvider, seed: dict[str, Any]
) -> None:
    provider.launch(spec(market="reserved", advanced_instance_config=seed))
    assert bodies(fake)[0]["reservationAffinity"]["values"] == ["res-seed"]


def test_reserved_without_a_reservation_fails_before_calling_the_api(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    with pytest.raises(InvalidRequestError, match="needs a reservation"):
        provider.launch(spec(market="reserved"))
    assert fake.calls == []


def test_the_seed_is_the_base_of_the_body_and_corral_fields_win(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    seed = {
        "instanceProperties": {
            "labels": {"team": "vision", "corral-attempt": "spoofed"},
            "disks": [
                {"boot": True, "autoDelete": True, "initializeParams": {
                    "sourceImage": "projects/my/global/images/cuda", "diskSizeGb": "200",
                    "diskType": "pd-ssd"}}
            ],
            "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}],
            "serviceAccounts": [{"email": "runner@p.iam.gserviceaccount.com",
                                 "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
            "machineType": "n1-standard-96",
        }
    }  # fmt: skip
    provider.launch(spec(instance_type="n1-standard-8", advanced_instance_config=seed))
    body = bodies(fake)[0]
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert body["labels"]["team"] == "vision"
    assert body["labels"]["corral-attempt"] == "r-1-0-0-0"
    assert body["disks"][0]["initializeParams"] == {
        "sourceImage": "projects/my/global/images/cuda",
        "diskSizeGb": "200",
        "diskType": "zones/us-central1-a/diskTypes/pd-ssd",
    }
    assert body["guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
         "acceleratorCount": 1}
    ]  # fmt: skip
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["serviceAccounts"][0]["email"] == "runner@p.iam.gserviceaccount.com"


def test_n1_gpus_named_by_the_spec_are_attached(fake: FakeCompute, provider: GcpProvider) -> None:
    provider.launch(spec(instance_type="n1-standard-16", accelerators={"V100": 2}))
    assert bodies(fake)[0]["guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-v100",
         "acceleratorCount": 2}
    ]  # fmt: skip


def test_a_tasks_image_id_reaches_instances_insert_as_written(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    """Issue 24: resources.image_id was ignored. An image, a family or their URLs, as written;
    it replaces the seed's boot disk image too."""
    family = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
    provider.launch(spec(image_id=family))
    seeded = {
        "instanceProperties": {
            "disks": [{"boot": True, "initializeParams": {"sourceImage": "old", "diskSizeGb": 9}}]
        }
    }
    provider.launch(spec("r-2-0-0-0", image_id=family, advanced_instance_config=seeded))
    for body in bodies(fake):
        assert body["disks"][0]["initializeParams"]["sourceImage"] == family


def test_ports_open_in_a_firewall_rule_of_corrals_shared_by_launches_of_those_ports(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    """Issue 24: resources.ports become one firewall rule per set of ports and network, which
    targets a network tag every machine of those launches carries; the machine's address is
    its external (NAT) one."""
    provider.launch(spec(ports=[(8080, 8080), (9000, 9010)]))
    provider.launch(spec("r-2-0-0-0", ports=[(8080, 8080), (9000, 9010)]))
    [(name, rule)] = fake.firewalls.items()
    assert name.startswith("corral-ports-")
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": ["8080", "9000-9010"]}]
    assert (rule["sourceRanges"], rule["targetTags"], rule["direction"]) == (
        ["0.0.0.0/0"],
        [name],
        "INGRESS",
    )
    assert all(b["tags"]["items"] == [name] for b in bodies(fake))


def test_a_gpu_machine_boots_a_deep_learning_image_with_its_driver(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    provider.launch(spec(instance_type="n1-standard-16", accelerators={"V100": 2}))
    body = bodies(fake)[0]
    image = body["disks"][0]["initializeParams"]["sourceImage"]
    assert image == DEFAULT_GPU_IMAGE
    assert image.startswith("projects/deeplearning-platform-release/global/images/family/")
    assert {"key": "install-nvidia-driver", "value": "True"} in body["metadata"]["items"]


def test_the_startup_script_runs_setup_then_run_with_the_nodes_envs(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    provider.launch(spec(count=2, setup="pip install x", run="python train.py", envs={"A": "b c"}))
    items = bodies(fake)[1]["metadata"]["items"]
    script = next(i["value"] for i in items if i["key"] == "startup-script")
    assert "export A='b c'" in script
    assert "export CORRAL_NODE_RANK=1" in script and "export CORRAL_NUM_NODES=2" in script
    assert script.index("pip install x") < script.index("python train.py")


def test_unclean_ids_become_valid_names_and_labels_and_still_match_on_describe(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    attempt = "Req_Ünïcode/" + "x" * 80 + "-0-0-0"
    launched = provider.launch(spec(attempt=attempt))  # the fake refuses invalid ones with a 400
    body = bodies(fake)[0]
    assert NAME_RE.fullmatch(body["name"])
    assert all(LABEL_RE.fullmatch(v) for v in body["labels"].values())
    found = provider.describe({"corral-attempt": attempt})
    assert [p.provider_id for p in found] == [launched[0].provider_id]


def test_names_are_valid_and_distinct_for_ids_that_clean_up_alike() -> None:
    ids = ["r-1-0-0-0", "R-1-0-0-0", "r_1_0_0_0", "r.1.0.0.0", "-" * 70, "x" * 200, "9-a"]
    names = {instance_name(i, "0") for i in ids}
    assert len(names) == len(ids)
    assert all(NAME_RE.fullmatch(n) for n in names)
    assert instance_name("r-1-0-0-0", "12") != instance_name("r-1-0-0-0", "1")
    assert label_value("Ab") != label_value("ab") and LABEL_RE.fullmatch(label_value("Ab"))
    assert re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", label_key("9Key.Name"))


# --- errors from the API -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "error", "scope"),
    [
        ("stockout", CapacityError, Scope.ZONE),
        ("stockout_details", CapacityError, Scope.ZONE),
        ("quota_region", QuotaError, Scope.FAMILY),  # its quota metric in the region (#46)
        ("quota_region_http", QuotaError, Scope.FAMILY),
        ("quota_gpus_all_regions", QuotaError, Scope.INSTANCE_TYPE),
        ("rate_limit", ThrottledError, Scope.NONE),
        ("backend", ThrottledError, Scope.NONE),
        ("permission", AuthError, Scope.CLOUD),
        ("unauthenticated", AuthError, Scope.CLOUD),
        ("invalid", InvalidRequestError, Scope.REQUEST),
    ],
)
def test_api_errors_become_typed_errors_and_leave_nothing_behind(
    fake: FakeCompute,
    provider: GcpProvider,
    kind: str,
    error: type[ProviderError],
    scope: Scope,
) -> None:
    fake.add_fault(Fault(kind, zone="us-central1-b"))
    with pytest.raises(error) as caught:
        provider.launch(spec(zone="us-central1-b", count=2))
    assert caught.value.scope == scope
    assert type(caught.value) is error
    assert fake.instances == {}
    # Another zone is unaffected: the fault was the zone's.
    assert len(provider.launch(spec(attempt="r-2-0-0-0"))) == 1


def test_a_stockout_names_its_code(fake: FakeCompute, provider: GcpProvider) -> None:
    fake.add_fault(Fault("stockout", machine_type="a2-highgpu-8g", provisioning_model="SPOT"))
    with pytest.raises(CapacityError) as caught:
        provider.launch(spec(instance_type="a2-highgpu-8g", market="spot"))
    assert caught.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    # The same type on demand is another pool: the fault does not match it.
    (got,) = provider.launch(spec(attempt="r-2-0-0-0", instance_type="a2-highgpu-8g"))
    assert got.market == "on_demand"


def test_an_unknown_machine_type_fails_fast(fake: FakeCompute, provider: GcpProvider) -> None:
    fake.machine_types = {"n2-standard-4"}
    with pytest.raises(InvalidRequestError, match="does not exist in zone") as caught:
        provider.launch(spec(instance_type="n2-standrd-4"))
    assert caught.value.scope == Scope.REQUEST


def test_the_sdk_raises_a_stockout_operation_as_service_unavailable(fake: FakeCompute) -> None:
    """What the research note says, checked: the reason sits in e.response.error.errors."""
    fake.add_fault(Fault("stockout"))
    client = compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake.url),
    )
    body = compute_v1.Instance(
        name="vm-1",
        machine_type="zones/us-central1-a/machineTypes/n2-standard-4",
        disks=[compute_v1.AttachedDisk(boot=True)],
    )
    op = client.insert(project=PROJECT, zone="us-central1-a", instance_resource=body)
    with pytest.raises(api_exceptions.ServiceUnavailable) as caught:
        op.result(timeout=5)
    assert caught.value.response.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert isinstance(from_exception(caught.value), CapacityError)


# --- idempotency ---------------------------------------------------------------------------
def test_a_redelivered_launch_returns_the_first_instances_and_creates_nothing(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    first = provider.launch(spec(count=3))
    inserts = len(fake.inserts)
    again = make_provider(fake).launch(spec(count=3))  # another worker process, say
    assert [p.provider_id for p in again] == [p.provider_id for p in first]
    assert len(fake.inserts) == inserts == 3
    assert len(fake.instances) == 3


def test_a_launch_cut_short_inserts_only_the_nodes_it_did_not_create(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    s = spec(count=2)
    labels = {**s.tags, "corral-node": "0"}
    fake.put_instance("us-central1-a", instance_name(s.attempt_id, "0"), labels)
    got = provider.launch(s)
    assert [b["name"] for b in bodies(fake)] == [instance_name(s.attempt_id, "1")]
    assert len(got) == 2


def test_a_name_taken_by_a_concurrent_delivery_counts_as_created(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    # Not yet visible to the label list, but its name is taken: the insert gets a 409.
    s = spec()
    fake.put_instance("us-central1-a", instance_name(s.attempt_id, "0"), {})
    (got,) = provider.launch(s)
    assert got.provider_id == f"us-central1-a/{instance_name(s.attempt_id, '0')}"
    assert len(fake.instances) == 1


def test_the_fake_honours_request_ids(fake: FakeCompute) -> None:
    client = compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake.url),
    )
    body = compute_v1.Instance(
        name="vm-1",
        machine_type="zones/us-central1-a/machineTypes/n2-standard-4",
        disks=[compute_v1.AttachedDisk(boot=True)],
    )
    req = compute_v1.InsertInstanceRequest(
        project=PROJECT, zone="us-central1-a", instance_resource=body, request_id="0f" * 16
    )
    first, second = client.insert_unary(request=req), client.insert_unary(request=req)
    assert first.name == second.name
    assert len(fake.instances) == 1
    req.request_id = "1e" * 16  # a new request for the same name: the name is taken
    with pytest.raises(api_exceptions.Conflict):
        client.insert_unary(request=req)


# --- all or nothing, and teardown ----------------------------------------------------------
def test_a_multi_node_launch_that_fails_midway_deletes_what_it_got(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    fake.add_fault(Fault("stockout", after=2))  # nodes 0 and 1 launch, node 2 finds none
    with pytest.raises(CapacityError):
        provider.launch(spec(count=3))
    assert fake.instances == {}
    deletes = [path for method, path in fake.calls if method == "DELETE"]
    assert {p.rsplit("/", 1)[1] for p in deletes} == {instance_name("r-1-0-0-0", n) for n in "012"}


def test_a_failed_rollback_is_retried_then_reported_with_what_is_left(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    fake.add_fault(Fault("stockout", after=1))
    fake.add_fault(Fault("backend", method="delete"))
    with pytest.raises(ProviderError) as caught:
        provider.launch(spec(count=2))
    err = caught.value
    assert err.code == "TeardownFailed"
    assert err.scope == Scope.REQUEST  # stop failing over: something is left running
    assert instance_name("r-1-0-0-0", "0") in err.message
    assert isinstance(err.__cause__, CapacityError)
    deletes = [path for method, path in fake.calls if method == "DELETE"]
    assert len(deletes) >= provider.teardown_tries
    assert len(fake.instances) == 1


def test_terminate_is_idempotent(fake: FakeCompute, provider: GcpProvider) -> None:
    got = provider.launch(spec(count=2))
    ids = [g.provider_id for g in got]
    provider.terminate(ids)
    assert fake.instances == {}
    provider.terminate(ids)  # 404s: fine
    provider.terminate([ids[0].split("/")[1]], zone="us-central1-a")  # a bare name with a zone
    assert provider.describe() == []


def test_a_failing_terminate_is_retried_and_raised_then_succeeds(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    (got,) = provider.launch(spec())
    fake.add_fault(Fault("permission", method="delete", count=provider.teardown_tries))
    with pytest.raises(AuthError, match="could not delete"):
        provider.terminate([got.provider_id])
    assert len(fake.instances) == 1
    provider.terminate([got.provider_id])  # the fault ran out
    assert fake.instances == {}


def test_a_delete_that_outlasts_the_wait_but_is_done_counts_as_done(fake: FakeCompute) -> None:
    fake.op_polls = 1000  # operations never report DONE in time
    provider = make_provider(fake, operation_timeout_s=0.2)
    with pytest.raises(LaunchTimeoutError):
        provider.launch(spec())  # the insert hangs: the attempt times out, and is rolled back
    assert fake.instances == {}


# --- describe ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("PROVISIONING", "pending"),
        ("STAGING", "pending"),
        ("RUNNING", "running"),
        ("STOPPING", "terminating"),
        ("SUSPENDING", "terminating"),
        ("TERMINATED", "terminated"),
    ],
)
def test_describe_maps_gcp_statuses(
    fake: FakeCompute, provider: GcpProvider, status: str, state: str
) -> None:
    (got,) = provider.launch(spec())
    fake.set_status("us-central1-a", got.provider_id.split("/")[1], status)
    assert [p.state for p in provider.describe({"corral-request": "r-1"})] == [state]


def test_describe_filters_by_labels_across_zones_and_skips_foreign_machines(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    a = provider.launch(spec())
    b = provider.launch(spec(attempt="r-1-0-1-0", zone="europe-west4-a", region="europe-west4"))
    c = provider.launch(spec(attempt="r-9-0-0-0"))
    fake.put_instance("us-central1-a", "someone-elses-vm", {"corral-request": "r-1"})
    by_request = provider.describe({"corral-request": "r-1"})
    assert sorted(p.provider_id for p in by_request) == sorted([a[0].provider_id, b[0].provider_id])
    assert {p.region for p in by_request} == {"us-central1", "europe-west4"}
    assert [p.provider_id for p in provider.describe({"corral-attempt": "r-9-0-0-0"})] == [
        c[0].provider_id
    ]
    assert len(provider.describe()) == 3


def test_an_instance_still_booting_is_pending_then_running(fake: FakeCompute) -> None:
    fake.boot_statuses = ("PROVISIONING", "STAGING")
    fake.op_polls = 2  # the insert operation is awaited through ZoneOperations.wait
    provider = make_provider(fake)
    (got,) = provider.launch(spec())
    assert got.state == "pending"
    assert [p.state for p in provider.describe()] == ["pending"]
    assert [p.state for p in provider.describe()] == ["running"]
    waits = [path for method, path in fake.calls if path.endswith("/wait")]
    assert len(waits) == 2


def test_describe_when_the_api_throttles_raises_throttled(
    fake: FakeCompute,
) -> None:
    fake.add_fault(Fault("rate_limit", method="list", zone="*"))
    provider = make_provider(fake, read_retry_s=0.5)
    started = time.monotonic()
    with pytest.raises(ThrottledError):
        provider.describe()
    assert time.monotonic() - started < 5  # the client's own retries are bounded


# --- faults from another process -----------------------------------------------------------
def test_faults_set_over_the_control_path_reach_every_client(
    fake: FakeCompute, provider: GcpProvider
) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from fakes.gcp_compute import FakeComputeControl, Fault
        FakeComputeControl({fake.url!r}).add_fault(Fault("quota_region", zone="us-central1-c"))
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    with pytest.raises(QuotaError):
        provider.launch(spec(zone="us-central1-c"))
    control = FakeComputeControl(fake.url)
    assert [i["zone"] for i in control.inserts()] == ["us-central1-c"]
    control.clear_faults()
    provider.launch(spec(attempt="r-2-0-0-0", zone="us-central1-c"))
    assert len(control.instances()) == 1


def test_every_fault_kind_is_known() -> None:
    with pytest.raises(ValueError):
        FakeCompute().add_fault(Fault("no-such-kind"))
    assert {"stockout", "quota_region", "quota_gpus_all_regions", "permission"} <= set(ERROR_KINDS)


# --- credentials ---------------------------------------------------------------------------
# Three places google.auth.default() looks, tried in one child process (the SDK takes seconds
# to import). The metadata server check is off: google-auth reads NO_GCE_CHECK when it is
# imported and compares it with the lowercase word "true"; GCE_METADATA_* point nowhere in
# case it did not. Each case times has_credentials() alone.
CREDENTIAL_CASES = """
import json, os, sys, time
from corral.services.providers.gcp.provider import GcpProvider
base, out = sys.argv[1], {}
def case(name, **env):
    for key in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"):
        os.environ.pop(key, None)
    os.environ.update(env)
    provider = GcpProvider()
    started = time.monotonic()
    ok = provider.has_credentials()
    took_s = time.monotonic() - started
    out[name] = [ok, provider._api().project if ok else None, took_s]
case("nothing")
case("missing_key_file", GOOGLE_APPLICATION_CREDENTIALS=os.path.join(base, "missing.json"))
adc = os.path.join(os.environ["CLOUDSDK_CONFIG"], "application_default_credentials.json")
os.makedirs(os.path.dirname(adc))
with open(adc, "w") as f:
    json.dump({"type": "authorized_user", "client_id": "id.apps.googleusercontent.com",
               "client_secret": "not-a-secret", "refresh_token": "not-a-token"}, f)
case("user_credentials", GOOGLE_CLOUD_PROJECT="from-the-env")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def credential_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    base = tmp_path_factory.mktemp("gcp-auth")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
    env.update(
        HOME=str(base),
        CLOUDSDK_CONFIG=str(base / "gcloud"),
        NO_GCE_CHECK="true",
        GCE_METADATA_HOST="127.0.0.1:1",
        GCE_METADATA_IP="127.0.0.1:1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", CREDENTIAL_CASES, str(base)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    cases: dict[str, list[Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return cases


def test_no_credentials_anywhere_is_false_fast_and_offline(
    credential_cases: dict[str, list[Any]],
) -> None:
    ok, _project, took_s = credential_cases["nothing"]
    assert ok is False
    assert took_s < 2.5  # a metadata server probe retries with backoff for 3 s or more


def test_a_missing_key_file_is_false(credential_cases: dict[str, list[Any]]) -> None:
    assert credential_cases["missing_key_file"][0] is False


def test_user_credentials_are_found_and_the_project_comes_with_them(
    credential_cases: dict[str, list[Any]],
) -> None:
    assert credential_cases["user_credentials"][:2] == [True, "from-the-env"]


def test_credentials_without_a_project_are_not_enough() -> None:
    provider = GcpProvider(credentials=AnonymousCredentials())
    assert provider.has_credentials() is False
    with pytest.raises(AuthError, match="no Google Cloud project"):
        provider.describe()
