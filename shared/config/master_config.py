"""A Determined master config: the resource manager, resource pools and their providers.

Two formats are read. The current one has ``resource_manager`` (cluster-wide scheduler
defaults and the default aux/compute pools) and ``resource_pools`` (each with an optional
``scheduler`` and ``provider``). The legacy one has top-level ``scheduler`` and ``provisioner``
and means a single pool named ``default``. How pools resolve is :mod:`corral.shared.resource_pools`.

Every other documented master key (``port``, ``db``, ``checkpoint_storage``, ``security``, ...)
is accepted and noticed as not acted on. Durations are held in seconds (``*_s`` fields).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from ..configio import PathKey
from . import DurationS, one_of, words
from .base import StrictModel

SchedulerType = Literal["fair_share", "priority", "round_robin"]
FittingPolicy = Literal["best", "worst"]
ProviderType = Literal["aws", "gcp", "hpc", "local"]
ManagerType = Literal["agent", "kubernetes", "slurm", "pbs"]
SlotType = Literal["gpu", "cuda", "cpu", "rocm"]  # Determined: cuda is gpu's other name
DEFAULT_POOL_NAME = "default"
# Determined's validateMaxSpotPrice (aws_config.go): digits with at most one decimal point.
SPOT_PRICE = re.compile(r"(\d+\.?\d*|\.\d+)")


def _spot_price(value: str | None) -> str | None:
    if value is not None and not SPOT_PRICE.fullmatch(value):
        raise ValueError(
            f"expected a price in dollars: digits with at most one decimal point, got {value!r}"
        )
    return value


POD_SPEC_KEYS = ("cpu_pod_spec", "gpu_pod_spec")  # task_container_defaults' pod templates


class SchedulerConfig(StrictModel):
    """How a pool orders and places tasks. Pool-level settings are all-or-nothing."""

    type: Annotated[SchedulerType | None, BeforeValidator(one_of(SchedulerType))] = None
    fitting_policy: Annotated[FittingPolicy | None, BeforeValidator(one_of(FittingPolicy))] = None
    allow_heterogeneous_fits: bool | None = None
    preemption: bool | None = None  # priority scheduler
    default_priority: int | None = Field(None, ge=1, le=99)  # priority scheduler; 42 if unset

    def is_blank(self) -> bool:
        """True when no field is set: a blank pool scheduler inherits the cluster's."""
        return not self.model_fields_set


class AwsNetworkInterface(StrictModel):
    public_ip: bool | None = None
    security_group_id: str | None = None
    subnet_id: str | None = None


class AwsTag(StrictModel):
    key: str
    value: str


class GcpNetworkInterface(StrictModel):
    network: str | None = None
    subnetwork: str | None = None
    external_ip: bool | None = None


class GcpServiceAccount(StrictModel):
    email: str | None = None
    scopes: list[str] | None = None


class GcpInstanceType(StrictModel):
    machine_type: str | None = None
    gpu_type: str | None = None
    gpu_num: int | None = Field(None, ge=0)
    preemptible: bool | None = None


# Which provider fields belong to which provider type (the common ones belong to all).
_AWS_ONLY = words(
    """region root_volume_size image_id tag_key tag_value instance_name ssh_key_name
        iam_instance_profile_arn log_group log_stream spot spot_max_price custom_tags"""
)
_GCP_ONLY = words(
    """base_config project zone boot_disk_size boot_disk_source_image boot_disk_type labels
        label_key label_value name_prefix network_tags service_account
        operation_timeout_period_s use_cloud_logging"""
)
_HPC_ONLY = frozenset({"partition"})
_NOT_FOR: dict[str, frozenset[str]] = {
    "aws": _GCP_ONLY | _HPC_ONLY,
    "gcp": _AWS_ONLY | _HPC_ONLY,
    "hpc": _AWS_ONLY | _GCP_ONLY,
    "local": (_GCP_ONLY - {"zone"}) | _HPC_ONLY,  # Corral's local cloud: regions and zones
}


class Provider(StrictModel):
    """A pool's dynamic agents: which cloud, what instance, how many, when idle ones go."""

    type: Annotated[ProviderType, BeforeValidator(one_of(ProviderType))]
    # Every provider type.
    master_url: str | None = None
    master_cert_name: str | None = None
    startup_script: str | None = None
    container_startup_script: str | None = None
    agent_docker_image: str | None = None
    agent_docker_network: str | None = None
    agent_docker_runtime: str | None = None
    agent_fluent_image: str | None = None
    agent_reconnect_attempts: int | None = Field(None, ge=0)
    agent_reconnect_backoff: int | None = Field(None, ge=0)
    agent_config_file_contents: dict[str, Any] | None = None
    max_idle_agent_period_s: DurationS | None = Field(None, alias="max_idle_agent_period", gt=0)
    max_agent_starting_period_s: DurationS | None = Field(
        None, alias="max_agent_starting_period", gt=0
    )
    min_instances: int | None = Field(None, ge=0)  # Determined's default 0
    max_instances: int | None = Field(None, ge=0)  # Determined's default 5
    launch_error_timeout_s: DurationS | None = Field(None, alias="launch_error_timeout", ge=0)
    launch_error_retries: int | None = Field(None, ge=0)
    # aws (also local: instance_type as text, instance_slots) and gcp (instance_type as object).
    instance_type: str | GcpInstanceType | None = None
    instance_slots: int | None = Field(None, ge=0)
    cpu_slots_allowed: bool | None = None
    network_interface: AwsNetworkInterface | GcpNetworkInterface | None = None
    region: str | None = None
    root_volume_size: int | None = Field(None, ge=1)
    image_id: str | None = None
    tag_key: str | None = None
    tag_value: str | None = None
    instance_name: str | None = None
    ssh_key_name: str | None = None
    iam_instance_profile_arn: str | None = None
    log_group: str | None = None
    log_stream: str | None = None
    spot: bool | None = None
    spot_max_price: Annotated[str | None, AfterValidator(_spot_price)] = None  # e.g. "2.50"
    custom_tags: list[AwsTag] | None = None
    # gcp
    base_config: dict[str, Any] | None = None
    project: str | None = None
    zone: str | None = None
    boot_disk_size: int | None = Field(None, ge=1)
    boot_disk_source_image: str | None = None
    boot_disk_type: str | None = None
    labels: dict[str, str] | None = None
    label_key: str | None = None
    label_value: str | None = None
    name_prefix: str | None = None
    network_tags: list[str] | None = None
    service_account: GcpServiceAccount | None = None
    operation_timeout_period_s: DurationS | None = Field(
        None, alias="operation_timeout_period", gt=0
    )
    use_cloud_logging: bool | None = None
    # hpc
    partition: str | None = None

    def done_otherwise(self) -> list[tuple[PathKey, str]]:
        out: list[tuple[PathKey, str]] = []
        instance = self.instance_type
        if isinstance(instance, GcpInstanceType) and instance.preemptible:
            out.append(
                (
                    ("instance_type", "preemptible"),
                    "launched in the SPOT provisioning model (preemptible's successor: reclaimed "
                    "the same way, with no 24-hour limit)",
                )
            )
        return out

    @model_validator(mode="after")
    def _fields_fit_type(self) -> Provider:
        wrong = sorted(_NOT_FOR[self.type] & self.model_fields_set)
        if wrong:
            keys = ", ".join(_key(self, name) for name in wrong)
            raise ValueError(f"{keys}: not a field of a {self.type} provider")
        gcp_shape = isinstance(self.instance_type, GcpInstanceType)
        if self.instance_type is not None and gcp_shape != (self.type == "gcp"):
            shape = "a mapping {machine_type, gpu_type, gpu_num}" if self.type == "gcp" else "text"
            raise ValueError(f"instance_type of a {self.type} provider is {shape}")
        if (
            self.min_instances is not None
            and self.max_instances is not None
            and self.max_instances < self.min_instances
        ):
            raise ValueError("max_instances is below min_instances")
        return self


def _key(model: StrictModel, name: str) -> str:
    info = type(model).model_fields[name]
    return info.alias or name


class LegacyProvisioner(Provider):
    """The legacy top-level ``provisioner``; very old files name the cloud ``provider:``."""

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict) and "provider" in data and "type" not in data:
            data = {("type" if k == "provider" else k): v for k, v in data.items()}
        return data


class ResourcePool(StrictModel):
    """One pool of identical agents, with its own scheduler and provider."""

    pool_name: str = Field(min_length=1)
    description: str | None = None
    provider: Provider | None = None  # None: a static pool (agents started by hand)
    scheduler: SchedulerConfig | None = None
    max_aux_containers_per_agent: int | None = Field(None, ge=0)
    max_cpu_containers_per_agent: int | None = Field(None, ge=0)  # old name of the above
    task_container_defaults: dict[str, Any] | None = None
    agent_reattach_enabled: bool | None = None
    agent_reconnect_wait_s: DurationS | None = Field(None, alias="agent_reconnect_wait", ge=0)
    kubernetes_namespace: str | None = None
    # Not a field of Determined's pool, yet its files carry it: Determined's pool parser
    # (ResourcePoolConfig.UnmarshalJSON, resource_pool_config.go) checks no unknown key, so
    # it loads the file and drops the value. Accepted, and noticed (done_otherwise).
    max_slots: int | None = Field(None, ge=0)

    def done_otherwise(self) -> list[tuple[PathKey, str]]:
        if "max_slots" not in self.model_fields_set:
            return []
        return [
            (
                ("max_slots",),
                "not a field of a Determined resource pool: Determined loads the file and drops "
                "it, and so does Corral (the pool's size is its provider's max_instances; a "
                "job's slots are capped by its own resources.max_slots)",
            )
        ]

    def aux_per_agent(self) -> int | None:
        """Zero-slot tasks one agent holds at most (None: 100). Determined's pool parser
        copies the older ``max_cpu_containers_per_agent``, when written, over
        ``max_aux_containers_per_agent``: the older name wins when both are written."""
        if self.max_cpu_containers_per_agent is not None:
            return self.max_cpu_containers_per_agent
        return self.max_aux_containers_per_agent


class SlotResourceRequests(StrictModel):
    """What one slot requests on a kubernetes manager whose ``slot_type`` is cpu."""

    cpu: float | None = Field(None, gt=0)


# Which resource manager fields belong to which manager type (the common ones belong to all).
_KUBE_ONLY = words(
    """namespace default_namespace max_slots_per_pod slot_type slot_resource_requests
    kubernetes_namespace master_service_name leave_kubernetes_resources default_scheduler
    kubeconfig_path determined_master_host determined_master_port determined_master_scheme
    fluent internal_task_gateway"""
)
_HPC_MANAGER_ONLY = words(
    """master_host master_port host port protocol security container_run_type auth_file
    rendezvous_network_interface proxy_network_interface user_name group_name sudo_authorized
    apptainer_image_root singularity_image_root job_storage_root path ld_library_path
    launcher_jvm_args tres_supported gres_supported partition_overrides job_project_source"""
)
_MANAGER_ONLY: dict[str, frozenset[str]] = {
    "agent": _KUBE_ONLY | _HPC_MANAGER_ONLY,
    "kubernetes": _HPC_MANAGER_ONLY,
    "slurm": _KUBE_ONLY,
    "pbs": _KUBE_ONLY,
}


class ResourceManager(StrictModel):
    """Cluster-level settings: scheduler defaults and the default pools."""

    type: Annotated[ManagerType, BeforeValidator(one_of(ManagerType))] = "agent"
    scheduler: SchedulerConfig | None = None
    default_aux_resource_pool: str | None = None
    default_compute_resource_pool: str | None = None
    no_default_resource_pools: bool | None = None
    default_cpu_resource_pool: str | None = None  # old name of default_aux_resource_pool
    default_gpu_resource_pool: str | None = None  # old name of default_compute_resource_pool
    require_authentication: bool | None = None
    client_ca: str | None = None
    cluster_name: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    # kubernetes (acted on: the namespaces, max_slots_per_pod, slot_type, slot_resource_requests)
    namespace: str | None = None  # Determined's older name of default_namespace
    default_namespace: str | None = None
    max_slots_per_pod: int | None = Field(None, ge=0)
    slot_type: Annotated[SlotType | None, BeforeValidator(one_of(SlotType))] = None
    slot_resource_requests: SlotResourceRequests | None = None
    kubernetes_namespace: str | None = None
    master_service_name: str | None = None
    leave_kubernetes_resources: bool | None = None
    default_scheduler: str | None = None
    kubeconfig_path: str | None = None
    determined_master_host: str | None = None
    determined_master_port: int | None = None
    determined_master_scheme: str | None = None
    fluent: dict[str, Any] | None = None
    internal_task_gateway: dict[str, Any] | None = None
    # slurm / pbs
    master_host: str | None = None
    master_port: int | None = None
    host: str | None = None
    port: int | None = None
    protocol: str | None = None
    security: dict[str, Any] | None = None
    container_run_type: str | None = None
    auth_file: str | None = None
    rendezvous_network_interface: str | None = None
    proxy_network_interface: str | None = None
    user_name: str | None = None
    group_name: str | None = None
    sudo_authorized: str | None = None
    apptainer_image_root: str | None = None
    singularity_image_root: str | None = None
    job_storage_root: str | None = None
    path: str | None = None
    ld_library_path: str | None = None
    launcher_jvm_args: str | None = None
    tres_supported: bool | None = None
    gres_supported: bool | None = None
    partition_overrides: dict[str, Any] | None = None
    job_project_source: str | None = None

    @model_validator(mode="after")
    def _fields_fit_type(self) -> ResourceManager:
        wrong = sorted(_MANAGER_ONLY.get(self.type, frozenset()) & self.model_fields_set)
        if wrong:
            keys = ", ".join(_key(self, name) for name in wrong)
            raise ValueError(f"{keys}: not a field of the {self.type} resource manager")
        return self

    def kube_namespace(self) -> str:
        """The namespace a kubernetes manager's pods go to (Determined's ``default``)."""
        return self.default_namespace or self.namespace or "default"

    def aux_pool(self) -> str:
        """The default pool for zero-slot tasks (``default`` when unset)."""
        return self.default_aux_resource_pool or self.default_cpu_resource_pool or DEFAULT_POOL_NAME

    def compute_pool(self) -> str:
        """The default pool for slot tasks (``default`` when unset)."""
        return (
            self.default_compute_resource_pool
            or self.default_gpu_resource_pool
            or DEFAULT_POOL_NAME
        )


_LEGACY_KEYS = ("scheduler", "provisioner")
_CURRENT_KEYS = ("resource_manager", "resource_pools", "additional_resource_managers")


class MasterConfig(StrictModel):
    """A Determined master config file (``master.yaml``)."""

    resource_manager: ResourceManager | None = None
    resource_pools: list[ResourcePool] | None = None
    additional_resource_managers: list[dict[str, Any]] | None = None
    # Legacy format: one pool named "default".
    scheduler: SchedulerConfig | None = None
    provisioner: LegacyProvisioner | None = None
    # Documented, noticed (see compat.determined).
    config_file: str | None = None
    port: int | None = None
    task_container_defaults: dict[str, Any] | None = None
    root: str | None = None
    cache: dict[str, Any] | None = None
    launch_error: bool | None = None
    cluster_name: str | None = None
    ui_customization: dict[str, Any] | None = None
    tensorboard_timeout: int | None = None
    notebook_timeout: int | None = None
    checkpoint_storage: dict[str, Any] | None = None
    db: dict[str, Any] | None = None
    security: dict[str, Any] | None = None
    webhooks: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    observability: dict[str, Any] | None = None
    logging: dict[str, Any] | None = None
    retention_policy: dict[str, Any] | None = None
    scim: dict[str, Any] | None = None
    oidc: dict[str, Any] | None = None
    saml: dict[str, Any] | None = None
    reserved_ports: list[int] | None = None
    log: dict[str, Any] | None = None
    enable_cors: bool | None = None
    feature_switches: list[str] | None = None
    integrations: dict[str, Any] | None = None
    det_cloud: dict[str, Any] | None = None
    internal: dict[str, Any] | None = Field(None, alias="__internal")

    def acts_on(self, key: str) -> bool:
        """A kubernetes manager's pods take task_container_defaults' pod specs."""
        manager = self.resource_manager
        defaults = self.task_container_defaults or {}
        return (
            key == "task_container_defaults"
            and manager is not None
            and manager.type == "kubernetes"
            and any(k in defaults for k in POD_SPEC_KEYS)
        )

    def is_legacy(self) -> bool:
        """True for the old format (top-level scheduler/provisioner, one pool ``default``)."""
        return any(k in self.model_fields_set for k in _LEGACY_KEYS)

    def pool_names(self) -> list[str]:
        """The pools this file defines (``default`` when it defines none)."""
        if self.is_legacy() or not self.resource_pools:
            return [DEFAULT_POOL_NAME]
        return [p.pool_name for p in self.resource_pools]

    def problems(self) -> list[tuple[PathKey, str]]:
        """Cross-field mistakes, each with the path of the value at fault."""
        out: list[tuple[PathKey, str]] = []
        if self.is_legacy():
            for key in _CURRENT_KEYS:
                if key in self.model_fields_set:
                    legacy = " and ".join(k for k in _LEGACY_KEYS if k in self.model_fields_set)
                    out.append(
                        (
                            (key,),
                            f"cannot be mixed with the legacy top-level {legacy}; "
                            "move scheduler under resource_manager and provisioner "
                            "into a pool's provider",
                        )
                    )
            return out
        names = [p.pool_name for p in self.resource_pools or ()]
        for i, name in enumerate(names):
            if name in names[:i]:
                out.append((("resource_pools", i, "pool_name"), f"pool {name!r} is defined twice"))
        out.extend(self._default_pool_problems())
        if self.resource_manager is not None and self.resource_manager.type == "kubernetes":
            out.extend(self._kubernetes_problems(self.resource_manager))
        return out

    def _kubernetes_problems(self, manager: ResourceManager) -> list[tuple[PathKey, str]]:
        """A kubernetes manager runs each pool's tasks as pods: it needs max_slots_per_pod,
        its pools have no provider, and pod specs are Pod mappings."""
        out: list[tuple[PathKey, str]] = []
        if manager.max_slots_per_pod is None:
            out.append(
                (
                    ("resource_manager",),
                    "a kubernetes resource manager needs max_slots_per_pod "
                    "(the slots one pod holds, e.g. the GPUs of a node)",
                )
            )
        if manager.slot_type == "rocm":
            out.append(
                (
                    ("resource_manager", "slot_type"),
                    "rocm: Corral's pods request nvidia.com/gpu only; expected gpu, cuda or cpu",
                )
            )
        defaults: list[tuple[PathKey, dict[str, Any] | None]] = [
            (("task_container_defaults",), self.task_container_defaults)
        ]
        for i, pool in enumerate(self.resource_pools or ()):
            if pool.provider is not None:
                out.append(
                    (
                        ("resource_pools", i, "provider"),
                        "a kubernetes resource manager's pools run as pods on its cluster; "
                        "expected no provider (providers belong to the agent manager)",
                    )
                )
            defaults.append(
                (("resource_pools", i, "task_container_defaults"), pool.task_container_defaults)
            )
        for path, tcd in defaults:
            for key in POD_SPEC_KEYS:
                spec = (tcd or {}).get(key)
                if spec is not None and not isinstance(spec, dict):
                    out.append(((*path, key), "expected a Pod (a mapping with metadata and spec)"))
        return out

    def _default_pool_problems(self) -> list[tuple[PathKey, str]]:
        manager = self.resource_manager or ResourceManager()
        known = ", ".join(self.pool_names())
        out: list[tuple[PathKey, str]] = []
        for key, old_key, name in (
            ("default_aux_resource_pool", "default_cpu_resource_pool", manager.aux_pool()),
            ("default_compute_resource_pool", "default_gpu_resource_pool", manager.compute_pool()),
        ):
            if name in self.pool_names():
                continue
            written = next((k for k in (key, old_key) if k in manager.model_fields_set), None)
            if written is not None:
                out.append(
                    (
                        ("resource_manager", written),
                        f"names no pool {name!r}; expected one of {known}",
                    )
                )
            else:
                where: PathKey = ("resource_manager",) if self.resource_manager else ()
                out.append(
                    (
                        where,
                        f"{key} is unset, so it is {name!r}, which names no pool; "
                        f"set it to one of {known}",
                    )
                )
        return out
