"""A Ray cluster launcher file (``ray up``'s YAML, Ray's ray-schema.json): each key's class.

``provider`` passes keys Ray's schema does not list through (a plugin's own); each one set is
noticed. Keys are as the file writes them; see :mod:`corral.shared.config.compat`.
"""

from __future__ import annotations

from .entry import Table, honoured, noticed, refused

_C = "tests/unit/test_config_cluster.py::"
_RES = "tests/unit/test_autoscaler_resources.py::"
_DEC = "tests/unit/test_autoscaler_decide.py::"
_LAUNCH = "tests/unit/test_cluster_launcher.py::"
_ZONES = "tests/unit/test_cluster_file_zones.py::"
_HONOURED = "tests/unit/test_compat_honoured.py::"
_SSH = "Corral's node agents connect out to Corral: no SSH login is made"
_AZURE = "Corral has no Azure provider: the Azure keys are not read"
# Ray's on-premises provider runs the cluster on machines the file names. Corral launches its
# own machines, so such a file would run elsewhere than it says: it is refused instead
# (Cluster.problems gives the error with this text).
ON_PREM_KEYS = ("head_ip", "worker_ips")
ON_PREM_REFUSAL = (
    "Corral launches the cluster's machines itself and cannot use existing ones; remove "
    "head_ip and worker_ips (with provider type local the nodes run on Corral's local cloud)"
)
_NO_DETECT = (
    "Corral adds no NVIDIA runtime or --shm-size of its own (as with true): put them in run_options"
)

RAY: Table = {
    "Cluster": {
        "cluster_name": honoured("the cluster's name", _C + "test_basic_seed_as_written"),
        "max_workers": honoured(
            "workers at most, all types",
            _DEC + "test_cap_grows_with_running_nodes_of_the_type_and_counts_its_pending_ones",
        ),
        "min_workers": honoured(
            "the deprecated global minimum",
            _DEC + "test_idle_nodes_go_after_the_timeout_but_never_below_min",
        ),
        "upscaling_speed": honoured(
            "launches at once, per running node of a type",
            _DEC + "test_cap_grows_with_running_nodes_of_the_type_and_counts_its_pending_ones",
        ),
        "idle_timeout_minutes": honoured(
            "an idle worker goes after this long",
            "tests/integration/test_ray_cluster.py::test_request_resources_launches_workers_that_stay_past_the_idle_timeout_until_cleared",
        ),
        "provider": honoured(
            "see provider.*", _ZONES + "test_a_gcp_files_one_zone_is_the_nodes_zone"
        ),
        "auth": noticed(_SSH),
        "docker": honoured(
            "see docker.*",
            _LAUNCH + "test_docker_runs_the_steps_in_the_container_and_no_docker_fails_loudly",
        ),
        "available_node_types": honoured("see available_node_types.*", _C + "test_node_types_seed"),
        "head_node_type": honoured(
            "the head's node type", _C + "test_head_node_type_must_name_a_node_type"
        ),
        "worker_default_node_type": noticed(
            "deprecated in Ray: workers of any type are launched for demand and min_workers"
        ),
        "head_node": honoured(
            "the older form: the head's node config",
            _RES + "test_a_legacy_file_becomes_two_node_types",
        ),
        "worker_nodes": honoured(
            "the older form: the workers' node config",
            _RES + "test_a_legacy_file_becomes_two_node_types",
        ),
        "file_mounts": honoured(
            "packed where `cluster up` runs and placed on every node",
            _LAUNCH + "test_file_mounts_arrive_checked_and_a_wrong_sha256_fails",
        ),
        "cluster_synced_files": noticed(
            "each path is copied from the same path where `corral cluster up` runs, to every "
            "node, once at launch (not from the head)"
        ),
        "file_mounts_sync_continuously": noticed("file mounts are copied once, when a node starts"),
        "rsync_exclude": noticed("file mounts are copied whole"),
        "rsync_filter": noticed("file mounts are copied whole"),
        "metadata": noticed("kept as written; Ray does not read it either"),
        "initialization_commands": honoured(
            "run first on every node, outside any container",
            _RES + "test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones",
        ),
        "setup_commands": honoured(
            "run on every node (a type's worker_setup_commands replace them)",
            _RES + "test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones",
        ),
        "head_setup_commands": honoured(
            "run on the head after setup_commands",
            _RES + "test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones",
        ),
        "worker_setup_commands": honoured(
            "run on workers after setup_commands",
            _RES + "test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones",
        ),
        "head_start_ray_commands": honoured(
            "start Ray on the head",
            _LAUNCH + "test_rays_autoscaling_config_is_dropped_from_the_heads_start_only",
        ),
        "worker_start_ray_commands": honoured(
            "start Ray on workers",
            _LAUNCH + "test_rays_autoscaling_config_is_dropped_from_the_heads_start_only",
        ),
        "no_restart": noticed(
            "set by `ray up --no-restart`, not by files: each node starts Ray once"
        ),
        "initial_workers": noticed("deprecated in Ray: min_workers and demand decide"),
        "autoscaling_mode": noticed("deprecated in Ray: upscaling_speed decides"),
        "target_utilization_fraction": noticed("deprecated in Ray: upscaling_speed decides"),
    },
    "ClusterProvider": {
        "type": honoured(
            "the cloud (aws, gcp, kubernetes, local)",
            _ZONES + "test_a_gcp_files_one_zone_is_the_nodes_zone",
        ),
        "region": honoured(
            "nodes launch in this region",
            _ZONES + "test_the_aws_examples_zone_list_is_tried_in_its_order_and_nowhere_else",
        ),
        "availability_zone": honoured(
            "nodes launch in these zones, in order",
            _ZONES + "test_the_aws_examples_zone_list_is_tried_in_its_order_and_nowhere_else",
        ),
        "namespace": honoured(
            "the Kubernetes namespace of the pods",
            "tests/integration/test_kubernetes_ray_cluster.py::test_a_ray_kubernetes_file_runs_head_and_worker_pods_the_autoscaler_adds_and_removes",
        ),
        "cache_stopped_nodes": honoured(
            "on AWS and GCP an idle worker is stopped and started again for new demand "
            "(noticed on clouds that cannot stop: terminated there)",
            "tests/integration/test_cluster_stopped_nodes.py::"
            "test_aws_an_idle_worker_is_stopped_started_again_and_terminated_by_down",
        ),
        "project_id": noticed("the GCP project is Corral's own setting (CORRAL_GCP_PROJECT)"),
        "location": noticed(_AZURE),
        "resource_group": noticed(_AZURE),
        "subscription_id": noticed(_AZURE),
        "msi_identity_id": noticed(_AZURE),
        "msi_identity_principal_id": noticed(_AZURE),
        "tags": noticed("the machines get Corral's own tags"),
        "subnet_id": noticed("the machines get the cloud's default subnet"),
        "security_group": noticed("the machines get Corral's own security group"),
        "gcp_credentials": noticed("Corral's own cloud credentials are used"),
        "cloudwatch": noticed("no CloudWatch agent or dashboard is set up"),
        "module": noticed("no external node provider is loaded: the type's cloud is used"),
        # Ray's on-premises cluster (machines the file names): Corral cannot use them.
        "head_ip": refused(ON_PREM_REFUSAL),
        "worker_ips": refused(ON_PREM_REFUSAL),
        "use_internal_ips": noticed("nodes reach each other at the addresses Corral records"),
        "disable_node_updaters": noticed("every node runs its launcher steps"),
        "disable_launch_config_check": noticed(
            "a node type's changed launch config is not compared"
        ),
        "autoscaler_service_account": noticed(
            "not created: the kubernetes cloud says so at `cluster up`", by_model=True
        ),
        "autoscaler_role": noticed(
            "not created: the kubernetes cloud says so at `cluster up`", by_model=True
        ),
        "autoscaler_role_binding": noticed(
            "not created: the kubernetes cloud says so at `cluster up`", by_model=True
        ),
        "services": noticed(
            "not created: the kubernetes cloud says so at `cluster up`", by_model=True
        ),
    },
    "Auth": {
        key: noticed(_SSH)
        for key in ("ssh_user", "ssh_private_key", "ssh_public_key", "ssh_proxy_command")
    },
    "Docker": {
        "image": honoured(
            "every node's commands run in this container",
            _LAUNCH + "test_docker_runs_the_steps_in_the_container_and_no_docker_fails_loudly",
        ),
        "container_name": honoured(
            "the container's name", _RES + "test_per_type_docker_keys_override_the_top_level_ones"
        ),
        "pull_before_run": honoured(
            "docker pull first", _RES + "test_per_type_docker_keys_override_the_top_level_ones"
        ),
        "run_options": honoured(
            "docker run options", _RES + "test_per_type_docker_keys_override_the_top_level_ones"
        ),
        "head_image": honoured(
            "the head's image", _HONOURED + "test_ray_head_image_and_head_run_options_are_the_heads"
        ),
        "head_run_options": honoured(
            "the head's run options, after run_options",
            _HONOURED + "test_ray_head_image_and_head_run_options_are_the_heads",
        ),
        "worker_image": honoured(
            "the workers' image", _RES + "test_per_type_docker_keys_override_the_top_level_ones"
        ),
        "worker_run_options": honoured(
            "the workers' run options",
            _RES + "test_per_type_docker_keys_override_the_top_level_ones",
        ),
        "disable_automatic_runtime_detection": noticed(_NO_DETECT),
        "disable_shm_size_detection": noticed(_NO_DETECT),
        "use_podman": noticed("docker runs the container (podman is not used)"),
    },
    "NodeType": {
        "node_config": honoured(
            "the cloud's launch config, passed through", _C + "test_node_types_seed"
        ),
        "resources": honoured(
            "what the node offers Ray's demand",
            _RES + "test_keys_the_file_writes_win_over_the_catalog",
        ),
        "labels": honoured(
            "the node's labels",
            "tests/integration/test_kubernetes_ray_cluster.py::test_a_ray_kubernetes_file_runs_head_and_worker_pods_the_autoscaler_adds_and_removes",
        ),
        "min_workers": honoured(
            "kept up at least", _DEC + "test_idle_nodes_go_after_the_timeout_but_never_below_min"
        ),
        "max_workers": honoured(
            "launched at most",
            _DEC + "test_cap_grows_with_running_nodes_of_the_type_and_counts_its_pending_ones",
        ),
        "idle_timeout_s": honoured(
            "this type's idle timeout", _DEC + "test_a_type_idle_timeout_overrides_the_cluster_one"
        ),
        "initialization_commands": honoured(
            "replace the global list for this type",
            _RES + "test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones",
        ),
        "worker_setup_commands": honoured(
            "replace the global setup_commands and worker_setup_commands for this type",
            _RES + "test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones",
        ),
        "docker": honoured(
            "see available_node_types.*.docker.*",
            _RES + "test_per_type_docker_keys_override_the_top_level_ones",
        ),
        "worker_image": honoured(
            "the older spelling of docker.worker_image", _C + "test_docker_per_type_seed_keys"
        ),
        "pull_before_run": honoured(
            "the older spelling of docker.pull_before_run", _C + "test_docker_per_type_seed_keys"
        ),
        "worker_run_options": honoured(
            "the older spelling of docker.worker_run_options", _C + "test_docker_per_type_seed_keys"
        ),
    },
    "NodeTypeDocker": {
        "worker_image": honoured(
            "this type's image", _RES + "test_per_type_docker_keys_override_the_top_level_ones"
        ),
        "pull_before_run": honoured(
            "this type's pull", _RES + "test_per_type_docker_keys_override_the_top_level_ones"
        ),
        "worker_run_options": honoured(
            "this type's run options",
            _RES + "test_per_type_docker_keys_override_the_top_level_ones",
        ),
    },
}
