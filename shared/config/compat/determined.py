"""A Determined master config (resource manager, pools, schedulers, providers): each key's class.

Keys are as the file writes them; see :mod:`corral.shared.config.compat` for the classes.
"""

from __future__ import annotations

from ..provider_fields import PROVIDER_OTHERWISE as _PROVIDER_OTHERWISE
from .entry import Table, honoured, noticed

_M = "tests/unit/test_config_master_config.py::"
_PEER = "tests/unit/test_determined_peer_cases.py::"
_SCHED = "tests/unit/test_determined_schedulers.py::"
_KUBE = "tests/unit/test_master_config_kubernetes.py::"
_POOLS = "tests/integration/test_determined_pools.py::"
_HONOURED = "tests/unit/test_compat_honoured.py::"
_MASTER = "Corral is the master: its own settings and API apply"
_NO_AGENT = "no Determined agent runs: Corral's node agent runs the tasks"
_AGENT_OUT = "agents connect out to Corral's API, not to a Determined master"
_NO_SLURM = "the agent and kubernetes managers only: a slurm or pbs manager's key is not read"
_DP = "tests/unit/test_det_providers.py::"
_AWS_POOL = (
    "tests/integration/test_node_pools.py::"
    "test_a_determined_aws_pool_launches_in_the_files_region_with_its_image_and_subnet"
)
_GCP_POOL = (
    "tests/integration/test_determined_providers.py::"
    "test_a_determined_gcp_pool_inserts_in_the_files_zone_with_its_image_and_network"
)

DETERMINED: Table = {
    "MasterConfig": {
        "resource_manager": honoured(
            "see resource_manager.*", _M + "test_default_pools_must_exist"
        ),
        "resource_pools": honoured(
            "see resource_pools[].*", _M + "test_duplicate_pools_and_mixed_formats"
        ),
        "scheduler": honoured(
            "the legacy form: the one pool's scheduler", _M + "test_legacy_seed_is_one_default_pool"
        ),
        "provisioner": honoured(
            "the legacy form: the one pool's provider", _M + "test_legacy_seed_is_one_default_pool"
        ),
        "additional_resource_managers": noticed("one resource manager is used: the first"),
        "task_container_defaults": noticed(
            "not acted on except a kubernetes manager's pod specs (cpu_pod_spec, gpu_pod_spec)"
        ),
        **{
            key: noticed(_MASTER)
            for key in [
                "config_file",
                "port",
                "root",
                "cache",
                "launch_error",
                "cluster_name",
                "ui_customization",
                "tensorboard_timeout",
                "notebook_timeout",
                "checkpoint_storage",
                "db",
                "security",
                "webhooks",
                "telemetry",
                "observability",
                "logging",
                "retention_policy",
                "scim",
                "oidc",
                "saml",
                "reserved_ports",
                "log",
                "enable_cors",
                "feature_switches",
                "integrations",
                "det_cloud",
                "__internal",
            ]
        },
    },
    "ResourceManager": {
        "type": honoured(
            "agent or kubernetes",
            "tests/integration/test_kubernetes_determined.py::test_a_kubernetes_master_runs_its_pools_tasks_as_pods",
        ),
        "scheduler": honoured(
            "every pool's scheduler unless the pool has one",
            "tests/unit/test_pools.py::test_a_pool_with_any_scheduler_field_never_inherits",
        ),
        "default_aux_resource_pool": honoured(
            "zero-slot tasks go there", _M + "test_unset_default_pool_is_default_which_must_exist"
        ),
        "default_compute_resource_pool": honoured(
            "slot tasks go there", _M + "test_unset_default_pool_is_default_which_must_exist"
        ),
        "default_cpu_resource_pool": honoured(
            "old name of default_aux_resource_pool",
            _HONOURED + "test_determined_old_default_pool_names_and_namespace",
        ),
        "default_gpu_resource_pool": honoured(
            "old name of default_compute_resource_pool",
            _HONOURED + "test_determined_old_default_pool_names_and_namespace",
        ),
        "no_default_resource_pools": noticed(
            "the pools are those the file lists (a pool named default when it lists none)"
        ),
        "namespace": honoured(
            "old name of default_namespace",
            _HONOURED + "test_determined_old_default_pool_names_and_namespace",
        ),
        "default_namespace": honoured(
            "the pods' namespace",
            _HONOURED + "test_determined_old_default_pool_names_and_namespace",
        ),
        "max_slots_per_pod": honoured(
            "slots one pod holds", _KUBE + "test_cpu_slots_take_slot_resource_requests"
        ),
        "slot_type": honoured(
            "gpu or cpu slots", _KUBE + "test_cpu_slots_take_slot_resource_requests"
        ),
        "slot_resource_requests": honoured(
            "a cpu slot's request", _KUBE + "test_cpu_slots_take_slot_resource_requests"
        ),
        "kubernetes_namespace": honoured(
            "the pods' namespace", _KUBE + "test_the_fixture_resolves_to_gpu_and_cpu_pods"
        ),
        **{
            key: noticed(_MASTER)
            for key in ["require_authentication", "client_ca", "cluster_name", "name", "metadata"]
        },
        **{
            key: noticed(
                "Corral creates the pods from outside the cluster, with its own kube config"
            )
            for key in [
                "master_service_name",
                "leave_kubernetes_resources",
                "default_scheduler",
                "kubeconfig_path",
                "determined_master_host",
                "determined_master_port",
                "determined_master_scheme",
                "fluent",
                "internal_task_gateway",
            ]
        },
        **{
            key: noticed(_NO_SLURM)
            for key in [
                "master_host",
                "master_port",
                "host",
                "port",
                "protocol",
                "security",
                "container_run_type",
                "auth_file",
                "rendezvous_network_interface",
                "proxy_network_interface",
                "user_name",
                "group_name",
                "sudo_authorized",
                "apptainer_image_root",
                "singularity_image_root",
                "job_storage_root",
                "path",
                "ld_library_path",
                "launcher_jvm_args",
                "tres_supported",
                "gres_supported",
                "partition_overrides",
                "job_project_source",
            ]
        },
    },
    "SchedulerConfig": {
        "type": honoured(
            "fair_share, priority or round_robin", _SCHED + "test_fair_share_pass_worst_fit"
        ),
        "fitting_policy": honoured("best or worst fit", _SCHED + "test_fair_share_pass_worst_fit"),
        "allow_heterogeneous_fits": honoured(
            "a task may span unlike agents",
            _PEER + "test_allow_heterogeneous_fits_reaches_the_scheduler",
        ),
        "preemption": honoured("a more urgent task preempts", _PEER + "test_priority_backfilling"),
        "default_priority": honoured(
            "a task's priority when it sets none", _SCHED + "test_seed_two_pools_limits_and_refusal"
        ),
    },
    "SlotResourceRequests": {
        "cpu": honoured(
            "the CPUs a cpu slot requests", _KUBE + "test_cpu_slots_take_slot_resource_requests"
        ),
    },
    "ResourcePool": {
        "pool_name": honoured("the pool's name", _M + "test_duplicate_pools_and_mixed_formats"),
        "description": noticed("kept with the pool; not shown"),
        "provider": honoured(
            "see resource_pools[].provider.*",
            _POOLS + "test_zero_slot_tasks_run_on_the_aux_pool_and_idle_agents_are_reaped",
        ),
        "scheduler": honoured(
            "the pool's own scheduler",
            "tests/unit/test_pools.py::test_a_pool_with_any_scheduler_field_never_inherits",
        ),
        "max_aux_containers_per_agent": honoured(
            "zero-slot tasks per agent at most", _SCHED + "test_zero_slot_tasks_pack_under_best_fit"
        ),
        "max_cpu_containers_per_agent": honoured(
            "the older name of max_aux_containers_per_agent",
            _HONOURED + "test_determined_max_cpu_containers_per_agent_is_the_aux_limit",
        ),
        "task_container_defaults": honoured(
            "a kubernetes manager's pod specs for this pool",
            _KUBE + "test_the_fixture_resolves_to_gpu_and_cpu_pods",
        ),
        "max_slots": noticed(
            "not a field of a Determined pool: loaded and dropped, as Determined does",
            by_model=True,
        ),
        "agent_reattach_enabled": noticed(_AGENT_OUT),
        "agent_reconnect_wait": noticed(_AGENT_OUT),
        "kubernetes_namespace": honoured(
            "the pool's pods' namespace", _KUBE + "test_the_fixture_resolves_to_gpu_and_cpu_pods"
        ),
    },
    "Provider": {
        "type": honoured(
            "the cloud agents launch on",
            _POOLS + "test_zero_slot_tasks_run_on_the_aux_pool_and_idle_agents_are_reaped",
        ),
        "instance_type": honoured("the agents' instance type", _M + "test_two_pool_seed_providers"),
        "instance_slots": honoured(
            "slots per agent",
            "tests/unit/runtime/test_runtime_pools.py::test_a_determined_experiment_keeps_to_its_max_slots",
        ),
        "spot": honoured(
            "agents on the spot market",
            _SCHED + "test_fallback_pools_take_a_task_its_own_pool_cannot",
        ),
        "min_instances": honoured(
            "agents kept up at least",
            _POOLS + "test_zero_slot_tasks_run_on_the_aux_pool_and_idle_agents_are_reaped",
        ),
        "max_instances": honoured(
            "agents at most",
            "tests/unit/runtime/test_runtime_pools.py::test_a_determined_experiment_keeps_to_its_max_slots",
        ),
        "max_idle_agent_period": honoured(
            "an idle agent goes after this long",
            _POOLS + "test_zero_slot_tasks_run_on_the_aux_pool_and_idle_agents_are_reaped",
        ),
        **{key: noticed(text) for key, text in _PROVIDER_OTHERWISE.items()},
        "max_agent_starting_period": honoured(
            "an agent that has not registered by then is a failed boot",
            _DP + "test_max_agent_starting_period_is_the_boot_deadline",
        ),
        "cpu_slots_allowed": honoured(
            "a CPU instance has one slot", _DP + "test_unmarshal_aws_cluster_config"
        ),
        **{
            key: honoured("what EC2 receives for the agents", _AWS_POOL)
            for key in [
                "region",
                "image_id",
                "network_interface",
                "root_volume_size",
                "tag_key",
                "tag_value",
                "custom_tags",
                "instance_name",
                "ssh_key_name",
                "iam_instance_profile_arn",
            ]
        },
        "spot_max_price": honoured(
            "spot agents bid at most this",
            _DP + "test_spot_with_a_max_price_is_a_spot_launch_capped_at_it",
        ),
        **{
            key: honoured("what Compute Engine receives for the agents", _GCP_POOL)
            for key in [
                "base_config",
                "zone",
                "boot_disk_size",
                "boot_disk_source_image",
                "boot_disk_type",
                "labels",
                "label_key",
                "label_value",
                "network_tags",
                "service_account",
            ]
        },
        "project": honoured(
            "must be Corral's GCP project (CORRAL_GCP_PROJECT): another fails the agent launch",
            _DP + "test_unmarshal_gcp_cluster_config",
        ),
        "partition": noticed("no HPC launcher: an hpc provider's agents are not launched"),
    },
    "GcpInstanceType": {
        "machine_type": honoured(
            "the agents' machine type", _M + "test_gcp_provider_instance_type_is_a_mapping"
        ),
        "gpu_num": honoured(
            "slots per agent when instance_slots is unset",
            _M + "test_gcp_provider_instance_type_is_a_mapping",
        ),
        "gpu_type": honoured("the agents' guestAccelerators", _GCP_POOL),
        "preemptible": noticed(
            "launched in the SPOT provisioning model (preemptible's successor)", by_model=True
        ),
    },
    "AwsNetworkInterface": {
        key: honoured("the agents' network interface on EC2", _AWS_POOL)
        for key in ("public_ip", "security_group_id", "subnet_id")
    },
    "GcpNetworkInterface": {
        key: honoured("the agents' network on Compute Engine", _GCP_POOL)
        for key in ("network", "subnetwork", "external_ip")
    },
    "AwsTag": {key: honoured("a tag on the agents", _AWS_POOL) for key in ("key", "value")},
    "GcpServiceAccount": {
        key: honoured("the agents' service account", _GCP_POOL) for key in ("email", "scopes")
    },
}
