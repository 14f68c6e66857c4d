"""Seeded property tests of the advanced_instance_config merge rules, one generator per cloud.

Generators draw from small vocabularies (three device names, two container names, ...) so that
templates and overrides collide often. Each draws valid configs only: the refusals have example
tests of their own in test_merge.py.

The oracle here is written independently of corral.shared.merge: a config is flattened into
(address, leaf) pairs, where a list entry with an identity is addressed by that identity and
any other by its position, and an address is resolved in the merged result the same way.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.shared.merge import merge_advanced_instance_config

# derandomize: the same examples on every run and machine; no example database on disk.
# 60 seeded examples per property in the default run (drawing them is most of its cost);
# `make fuzz` draws 200 (CORRAL_PROPERTY_EXAMPLES).
EXAMPLES = int(os.environ.get("CORRAL_PROPERTY_EXAMPLES", "60"))
SEEDED = settings(derandomize=True, database=None, max_examples=EXAMPLES, deadline=None)

Step = tuple[Any, ...]
Address = tuple[Step, ...]


def text(*choices: str) -> st.SearchStrategy[str]:
    return st.sampled_from(choices)


def unique(by: Callable[[Any], Any], entries: st.SearchStrategy[Any], size: int = 3) -> Any:
    return st.lists(entries, max_size=size, unique_by=by)


def config(often: dict[str, Any], sometimes: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Half the draws carry every ``often`` field, so templates and overrides meet there; the
    other half any subset of all the fields."""
    return st.one_of(
        st.fixed_dictionaries({}, optional={**often, **sometimes}),
        st.fixed_dictionaries(often, optional=sometimes),
    )


# --- AWS -------------------------------------------------------------------------------------

AWS_TAG = st.fixed_dictionaries({"Key": text("team", "env", "owner"), "Value": text("a", "b")})
AWS_TAG_SPEC = st.fixed_dictionaries(
    {"ResourceType": text("instance", "volume")},
    optional={"Tags": unique(lambda t: t["Key"], AWS_TAG)},
)
AWS_EBS = st.fixed_dictionaries(
    {}, optional={"VolumeSize": st.integers(8, 4000), "VolumeType": text("gp3", "io2")}
)
AWS_BLOCK_DEVICE = st.fixed_dictionaries(
    {"DeviceName": text("/dev/sda1", "/dev/sdb", "/dev/sdf")},
    optional={"Ebs": AWS_EBS, "VirtualName": text("ephemeral0")},
)
AWS_NIC = st.fixed_dictionaries(
    {"DeviceIndex": st.integers(0, 1)},
    optional={
        "NetworkCardIndex": st.integers(0, 1),
        "SubnetId": text("subnet-a", "subnet-b"),
        "Groups": st.lists(text("sg-1", "sg-2"), max_size=2),
        "InterfaceType": text("efa", "interface"),
    },
)


def aws_nic_id(nic: Mapping[str, Any]) -> tuple[Any, Any]:
    return (nic["DeviceIndex"], nic.get("NetworkCardIndex", 0))


AWS_CONFIG = config(
    often={
        "TagSpecifications": unique(lambda s: s["ResourceType"], AWS_TAG_SPEC),
        "BlockDeviceMappings": unique(lambda d: d["DeviceName"], AWS_BLOCK_DEVICE),
        "NetworkInterfaces": unique(aws_nic_id, AWS_NIC),
    },
    sometimes={
        "CapacityReservationSpecification": st.one_of(
            st.just({"CapacityReservationTarget": {"CapacityReservationId": "cr-xxx"}}),
            st.just({"CapacityReservationPreference": "open"}),
        ),
        "EbsOptimized": st.booleans(),
        "MetadataOptions": st.fixed_dictionaries(
            {}, optional={"HttpTokens": text("required"), "HttpPutResponseHopLimit": st.just(2)}
        ),
    },
)

# --- Google Cloud (drawn in snake_case, then each field name respelled at random) ------------

GCP_DATA_DISK = st.fixed_dictionaries(
    {"device_name": text("data-0", "data-1")},
    optional={
        "auto_delete": st.booleans(),
        "mode": text("READ_WRITE", "READ_ONLY"),
        "initialize_params": st.fixed_dictionaries(
            {"disk_size_gb": text("100", "2000")}, optional={"disk_type": text("pd-ssd")}
        ),
    },
)
GCP_BOOT_DISK = st.fixed_dictionaries(
    {"device_name": st.just("boot"), "boot": st.just(True)},
    optional={"auto_delete": st.booleans(), "type": text("PERSISTENT")},
)
# An override may name the boot disk by boot: true alone.
GCP_NAMELESS_BOOT_DISK = st.fixed_dictionaries(
    {"boot": st.just(True)}, optional={"auto_delete": st.booleans()}
)
GCP_NIC = st.fixed_dictionaries(
    {},
    optional={
        "network": text("global/networks/a", "global/networks/b"),
        "nic_type": text("GVNIC"),
        "access_configs": st.lists(st.just({"type": "ONE_TO_ONE_NAT"}), max_size=1),
    },
)


def gcp_disk_id(disk: Mapping[str, Any]) -> Any:
    return "boot" if disk.get("boot") else disk["device_name"]


def gcp_instance_properties(disk: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return config(
        often={"disks": st.lists(disk, min_size=1, max_size=3, unique_by=gcp_disk_id)},
        sometimes={
            "labels": st.dictionaries(text("team", "team_name", "env"), text("x", "y")),
            "network_interfaces": st.lists(GCP_NIC, max_size=2),
            "reservation_affinity": st.fixed_dictionaries(
                {"consume_reservation_type": text("SPECIFIC_RESERVATION", "ANY_RESERVATION")},
                optional={"values": st.lists(text("projects/p/reservations/r"), max_size=1)},
            ),
            "scheduling": st.fixed_dictionaries({}, optional={"preemptible": st.booleans()}),
        },
    )


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def respell(value: Any, coin: Callable[[], bool], labels: bool = False) -> Any:
    """Write each field name in camelCase or snake_case at random; label names are data."""
    if isinstance(value, dict):
        return {
            (k if labels or not coin() else camel(k)): respell(v, coin, k == "labels")
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [respell(v, coin) for v in value]
    return value


@st.composite
def gcp_config(draw: st.DrawFn, disk: st.SearchStrategy[Any]) -> Any:
    snake = draw(
        st.fixed_dictionaries(
            {"instance_properties": gcp_instance_properties(disk)},
            optional={"description": text("pool")},
        )
    )
    rnd = draw(st.randoms(use_true_random=False))
    return respell(snake, lambda: rnd.random() < 0.5)


GCP_TEMPLATE = gcp_config(st.one_of(GCP_DATA_DISK, GCP_BOOT_DISK))
GCP_OVERRIDE = gcp_config(st.one_of(GCP_DATA_DISK, GCP_BOOT_DISK, GCP_NAMELESS_BOOT_DISK))

# --- Kubernetes ------------------------------------------------------------------------------

K8S_ENV = st.fixed_dictionaries({"name": text("A", "B", "C"), "value": text("1", "2")})
K8S_MOUNT = st.fixed_dictionaries(
    {"mountPath": text("/data", "/dev/shm")},
    optional={"name": text("data", "dshm"), "readOnly": st.booleans()},
)
K8S_PORT = st.fixed_dictionaries(
    {"containerPort": st.sampled_from([6379, 8265])}, optional={"name": text("gcs", "dash")}
)
K8S_QUANTITIES = st.dictionaries(text("cpu", "memory", "nvidia.com/gpu"), text("1", "8", "64Gi"))
K8S_CONTAINER = st.fixed_dictionaries(
    {"name": text("ray", "sidecar")},
    optional={
        "image": text("ray:2.40", "envoy:1.30"),
        "args": st.lists(text("--a", "--b"), max_size=2),
        "env": unique(lambda e: e["name"], K8S_ENV),
        "volumeMounts": unique(lambda m: m["mountPath"], K8S_MOUNT),
        "ports": unique(lambda p: p["containerPort"], K8S_PORT),
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": K8S_QUANTITIES, "requests": K8S_QUANTITIES}
        ),
    },
)
# One source kind per volume name, so no draw swaps a template volume's source (refused).
K8S_VOLUME = st.one_of(
    st.builds(
        lambda medium: {"name": "dshm", "emptyDir": medium},
        st.sampled_from([{}, {"medium": "Memory"}]),
    ),
    st.builds(
        lambda claim: {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
        text("a", "b"),
    ),
)
K8S_CONFIG = config(
    sometimes={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(text("team", "pool"), text("x", "y")),
                "annotations": st.dictionaries(text("note"), text("x")),
            },
        ),
    },
    often={
        "spec": st.fixed_dictionaries(
            {
                "containers": st.lists(
                    K8S_CONTAINER, min_size=1, max_size=2, unique_by=lambda c: c["name"]
                )
            },
            optional={
                "initContainers": unique(lambda c: c["name"], K8S_CONTAINER, 2),
                "volumes": unique(lambda v: v["name"], K8S_VOLUME, 2),
                "tolerations": st.lists(
                    st.fixed_dictionaries(
                        {"key": text("gpu", "spot"), "operator": st.just("Exists")}
                    ),
                    max_size=2,
                ),
                "nodeSelector": st.dictionaries(text("gpu", "zone"), text("a100", "us-a")),
                "imagePullSecrets": unique(
                    lambda s: s["name"], st.fixed_dictionaries({"name": text("r1", "r2")})
                ),
                "priorityClassName": text("high", "low"),
            },
        ),
    },
)

# --- the oracle: identities and addresses, written from the clouds' rules, not the code -------


def aws_identity(field: str, entry: Mapping[str, Any]) -> Any:
    keys = {"TagSpecifications": "ResourceType", "Tags": "Key", "BlockDeviceMappings": "DeviceName"}
    if field == "NetworkInterfaces":
        return aws_nic_id(entry)
    return entry[keys[field]] if field in keys else None


def fold(name: Any) -> Any:
    return name.replace("_", "").lower() if isinstance(name, str) else name


def gcp_identity(field: str, entry: Mapping[str, Any]) -> Any:
    if fold(field) != "disks":
        return None
    folded = {fold(k): v for k, v in entry.items()}
    return "boot" if folded.get("boot") else folded["devicename"]


K8S_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def k8s_identity(field: str, entry: Mapping[str, Any]) -> Any:
    return entry[K8S_MERGE_KEYS[field]] if field in K8S_MERGE_KEYS else None


CLOUDS: dict[str, tuple[Any, Any, Callable[[str, Mapping[str, Any]], Any], bool]] = {
    # cloud: (template strategy, override strategy, identity of a list entry, fold spelling)
    "aws": (AWS_CONFIG, AWS_CONFIG, aws_identity, False),
    "gcp": (GCP_TEMPLATE, GCP_OVERRIDE, gcp_identity, True),
    "kubernetes": (K8S_CONFIG, K8S_CONFIG, k8s_identity, False),
}


def leaves(value: Any, identity: Any, field: str = "", at: Address = ()) -> Iterator[Any]:
    """(address, leaf) pairs; an empty mapping or list is a leaf of its own."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, identity, key, (*at, ("key", key, field)))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            ident = identity(field, item) if isinstance(item, dict) else None
            step = ("index", i) if ident is None else ("id", ident)
            yield from leaves(item, identity, field, (*at, step))
    else:
        yield at, value


def resolve(value: Any, address: Address, identity: Any, folds: bool) -> Any:
    """The value at ``address`` in ``value``; KeyError when it is not there."""
    field = ""
    for step in address:
        if step[0] == "key":
            _, key, parent = step
            exact = not folds or fold(parent) == "labels"
            matches = [k for k in value if (k == key if exact else fold(k) == fold(key))]
            if len(matches) != 1:
                raise KeyError(address)
            value, field = value[matches[0]], key
        elif step[0] == "index":
            value = value[step[1]]
        else:
            found = [e for e in value if isinstance(e, dict) and identity(field, e) == step[1]]
            if len(found) != 1:
                raise KeyError(address)
            value = found[0]
    return value


def identity_addresses(value: Any, identity: Any, field: str = "", at: Address = ()) -> set[Any]:
    """The address of every list entry that has an identity, at any depth."""
    found: set[Any] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found |= identity_addresses(item, identity, key, (*at, ("key", key, field)))
    elif isinstance(value, list):
        for item in value:
            ident = identity(field, item) if isinstance(item, dict) else None
            if ident is not None:
                here = (*at, ("id", ident))
                found.add(here)
                found |= identity_addresses(item, identity, field, here)
    return found


def through_merged_positions(address: Address) -> bool:
    """Kubernetes merges every mapping and every keyed list; only index steps replace."""
    return all(step[0] != "index" for step in address)


# --- the properties --------------------------------------------------------------------------

cloud_params = pytest.mark.parametrize("cloud", sorted(CLOUDS))


def pair(cloud: str) -> st.SearchStrategy[tuple[Any, Any]]:
    template, override, _, _ = CLOUDS[cloud]
    return st.tuples(template, override)


@cloud_params
def test_an_empty_override_returns_the_template(cloud: str) -> None:
    @SEEDED
    @given(CLOUDS[cloud][0])
    def check(template: dict[str, Any]) -> None:
        assert merge_advanced_instance_config(cloud, template, {}) == template

    check()


@cloud_params
def test_nothing_the_template_identifies_is_removed(cloud: str) -> None:
    _, _, identity, folds = CLOUDS[cloud]

    @SEEDED
    @given(pair(cloud))
    def check(inputs: tuple[Any, Any]) -> None:
        template, override = inputs
        merged = merge_advanced_instance_config(cloud, template, override)
        for address in identity_addresses(template, identity):
            resolve(merged, address, identity, folds)  # raises KeyError when removed
        for key in template:  # every cloud merges the top level key by key
            resolve(merged, (("key", key, ""),), identity, folds)

    check()


def test_kubernetes_keeps_every_template_value_it_does_not_override() -> None:
    @SEEDED
    @given(pair("kubernetes"))
    def check(inputs: tuple[Any, Any]) -> None:
        template, override = inputs
        merged = merge_advanced_instance_config("kubernetes", template, override)
        overridden = dict(leaves(override, k8s_identity))
        for address, leaf in leaves(template, k8s_identity):
            if through_merged_positions(address) and not isinstance(leaf, dict | list):
                expected = overridden.get(address, leaf)
                assert resolve(merged, address, k8s_identity, False) == expected

    check()


@cloud_params
def test_every_override_value_appears_in_the_result(cloud: str) -> None:
    _, _, identity, folds = CLOUDS[cloud]

    @SEEDED
    @given(pair(cloud))
    def check(inputs: tuple[Any, Any]) -> None:
        template, override = inputs
        merged = merge_advanced_instance_config(cloud, template, override)
        for address, leaf in leaves(override, identity):
            found = resolve(merged, address, identity, folds)
            if isinstance(leaf, dict | list) and not leaf:
                assert isinstance(found, type(leaf))
            else:
                assert found == leaf, address

    check()


@cloud_params
def test_merging_the_same_override_twice_changes_nothing(cloud: str) -> None:
    @SEEDED
    @given(pair(cloud))
    def check(inputs: tuple[Any, Any]) -> None:
        template, override = inputs
        once = merge_advanced_instance_config(cloud, template, override)
        assert merge_advanced_instance_config(cloud, once, override) == once

    check()


@cloud_params
def test_inputs_are_never_mutated_nor_shared(cloud: str) -> None:
    @SEEDED
    @given(pair(cloud))
    def check(inputs: tuple[Any, Any]) -> None:
        before = copy.deepcopy(inputs)
        merged = merge_advanced_instance_config(cloud, *inputs)
        assert inputs == before
        scribble(merged)
        assert inputs == before

    check()


def scribble(value: Any) -> None:
    """Change every mutable container in ``value``, deepest first."""
    if isinstance(value, dict):
        for item in value.values():
            scribble(item)
        value["scribbled"] = True
    elif isinstance(value, list):
        for item in value:
            scribble(item)
        value.append("scribbled")


@cloud_params
def test_the_generators_make_templates_and_overrides_collide(cloud: str) -> None:
    """Guard the generators: the properties mean little if entries seldom match."""
    identity = CLOUDS[cloud][2]
    matched: list[bool] = []

    def spelling_free(addresses: set[Any]) -> set[Any]:
        return {tuple(fold(str(part)) for step in a for part in step) for a in addresses}

    # A fixed 200 draws (generating is cheap; no merge runs): the share is measured on the
    # same sample whatever CORRAL_PROPERTY_EXAMPLES asks of the properties.
    @settings(derandomize=True, database=None, max_examples=200, deadline=None)
    @given(pair(cloud))
    def count(inputs: tuple[Any, Any]) -> None:
        template, override = inputs
        common = spelling_free(identity_addresses(template, identity)) & spelling_free(
            identity_addresses(override, identity)
        )
        matched.append(bool(common))

    count()
    assert sum(matched) >= len(matched) // 4, f"{sum(matched)} of {len(matched)}"
