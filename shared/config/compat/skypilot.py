"""A SkyPilot task file (with Determined's and Corral's own fields): each key's class.

Keys are as the file writes them; see :mod:`corral.shared.config.compat` for the classes.
"""

from __future__ import annotations

from .entry import Table, honoured, noticed

_SERVE = "tests/integration/test_serve_replicas.py::"
_T = "tests/unit/test_config_task.py::"
_P = "tests/unit/test_planner.py::"
_CLIENT = "tests/integration/test_client.py::"
_REC = "tests/integration/test_job_recovery.py::"
_POOLS = "tests/integration/test_determined_pools.py::"
_VOLUMES = "no volume is created or attached; copy data with file_mounts or a workdir"

SKYPILOT: Table = {
    "Task": {
        "name": honoured(
            "the task's name in status, logs and events",
            _T + "test_corral_fields_and_later_issue_fields",
        ),
        "workdir": honoured(
            "packed (or cloned, for the git form) onto every node; setup and run start there",
            _CLIENT + "test_workdir_and_file_mounts_reach_the_node_and_run_starts_in_the_workdir",
        ),
        "num_nodes": honoured(
            "that many nodes, the head included", _P + "test_bare_resources_plan_one_node"
        ),
        "resources": honoured("see resources.*", _T + "test_candidate_fields_override_the_base"),
        "setup": honoured(
            "run on every node before run",
            "tests/integration/test_aws_provider.py::test_setup_and_run_become_user_data",
        ),
        "run": honoured(
            "run on every node",
            "tests/integration/test_aws_provider.py::test_setup_and_run_become_user_data",
        ),
        "envs": honoured(
            "set for setup and run",
            "tests/integration/test_aws_provider.py::test_setup_and_run_become_user_data",
        ),
        "secrets": honoured(
            "set for setup and run, never shown; a name without a value is given at launch",
            "tests/integration/test_cli_habits.py::test_skypilot_launch_flags_plan_and_launch_merged",
        ),
        "file_mounts": honoured(
            "local paths packed and placed on every node; bucket URLs copied by the node",
            _CLIENT + "test_s3_file_mounts_are_copied_by_the_node_with_its_own_credentials",
        ),
        "service": honoured(
            "see service.*",
            "tests/integration/test_lifecycle_local.py::test_a_service_is_ready_only_once_its_readiness_probe_passes",
        ),
        "service.readiness_probe": honoured(
            "the service is ready once the probe passes (both SkyPilot forms)",
            "tests/integration/test_lifecycle_local.py::test_a_service_is_ready_only_once_its_readiness_probe_passes",
        ),
        "service.replicas": honoured(
            "that many replicas, each its own request failing over on its own, behind the "
            "service endpoint's load balancer",
            _SERVE + "test_two_replicas_both_ready_and_the_endpoint_answers_from_both",
        ),
        "service.replica_policy": honoured(
            "min/max replicas and SkyServe's QPS autoscaler (its fallback fields noticed)",
            _SERVE + "test_queries_per_second_past_one_replicas_target_launch_a_second",
        ),
        "service.load_balancing_policy": honoured(
            "round_robin, least_load or instance_aware_least_load over the ready replicas",
            _SERVE + "test_two_replicas_both_ready_and_the_endpoint_answers_from_both",
        ),
        "service.ports": honoured(
            "the replicas' port, opened as resources.ports",
            "tests/unit/test_serve.py::test_a_replicated_service_needs_a_port_and_service_ports_opens_its_own",
        ),
        **{
            f"service.{key}": noticed(
                "see the notice: Corral's load balancer is the API's relay", by_model=True
            )
            for key in ("tls", "pool", "workers")
        },
        "file_mounts_mapping": noticed(
            "SkyPilot's own record of uploads: Corral uploads file_mounts itself"
        ),
        "managed_secrets": noticed(
            "no secret store is read: give values with `corral launch --secret NAME`"
        ),
        "volumes": noticed(_VOLUMES),
        "volume_mounts": noticed(_VOLUMES),
        "pool": noticed("no SkyPilot worker pool is made: the task gets machines of its own"),
        "config": noticed("SkyPilot's per-task config is not read: Corral's own settings apply"),
        "event_callback": noticed("no callback is run: follow `corral status` and the events API"),
        "inputs": noticed("SkyPilot's optimizer hint: Corral's planner ranks by price alone"),
        "outputs": noticed("SkyPilot's optimizer hint: Corral's planner ranks by price alone"),
        "api_server_access": noticed("the task is given no API credentials"),
        # Determined's and Corral's own.
        "priority": honoured(
            "Corral's priority, higher wins (converted from Determined's when only that is set)",
            _T + "test_corral_fields_and_later_issue_fields",
        ),
        "labels": honoured(
            "matched against machine-pool partition rules",
            "tests/unit/test_machine_pool_scheduler.py::test_first_matching_rule_wins_and_quota_is_per_rule",
        ),
        "workload_type": honoured(
            "job, service or workspace",
            "tests/integration/test_lifecycle_local.py::test_a_service_is_ready_only_once_its_readiness_probe_passes",
        ),
        "compute_config": honoured(
            "an Anyscale compute config, inline or a path (see the Anyscale table)",
            _T + "test_inline_compute_config_is_read_as_one",
        ),
        "advanced_instance_config": honoured(
            "passed to the cloud's launch call under Corral's own choices",
            "tests/integration/test_aws_provider.py::test_advanced_instance_config_is_passed_through_under_corrals_choices",
        ),
        "scheduling": honoured(
            "see scheduling.*",
            _POOLS + "test_priority_preemption_requeues_and_fallback_pools_take_overflow",
        ),
        "retry_until_up": honoured(
            "an exhausted failover chain waits and walks again (false: fail at once)",
            "tests/integration/test_wait_for_capacity.py::test_a_request_waits_for_capacity_then_runs",
        ),
        "max_wait": honoured(
            "the request fails once this long has passed waiting for capacity",
            "tests/integration/test_wait_for_capacity.py::test_a_passed_max_wait_fails_the_request_naming_the_deadline",
        ),
        "bundle": honoured(
            "written by `corral launch`: the uploaded workdir and mounts",
            _CLIENT + "test_workdir_and_file_mounts_reach_the_node_and_run_starts_in_the_workdir",
        ),
    },
    "WorkdirRepo": {
        "url": honoured("cloned on every node", _T + "test_git_workdir_urls_git_can_clone"),
        "ref": honoured("checked out after the clone", _T + "test_git_workdir"),
    },
    "Resources": {
        "cloud": honoured(
            "the clouds the plan may use", _T + "test_cloud_names_are_lower_cased_and_checked"
        ),
        "infra": honoured("cloud/region/zone in one", _T + "test_infra_fills_cloud_region_zone"),
        "region": honoured(
            "the plan keeps to it",
            "tests/integration/test_failover_local.py::test_pinned_region_never_leaves_it",
        ),
        "zone": honoured(
            "the plan keeps to it", _P + "test_a100_8_cheapest_cloud_first_then_all_its_regions"
        ),
        "instance_type": honoured(
            "the plan keeps to it", _P + "test_a100_8_cheapest_cloud_first_then_all_its_regions"
        ),
        "accelerators": honoured(
            "types and counts, any of a set or list", _T + "test_seed_accelerators_a100"
        ),
        "cpus": honoured("a minimum vCPU count", _P + "test_cpu_and_memory_narrow_gpu_types"),
        "memory": honoured("a minimum memory", _P + "test_cpu_and_memory_narrow_gpu_types"),
        "use_spot": honoured(
            "spot markets only", _P + "test_instance_type_block_keeps_other_markets"
        ),
        "job_recovery": honoured(
            "restarts on errors and listed exit codes; none: no recovery",
            _REC + "test_a_failing_job_restarts_up_to_its_limit_then_fails_with_every_run_shown",
        ),
        "ports": honoured(
            "opened on the machine and served at the endpoint",
            "tests/integration/test_aws_provider.py::test_ports_open_in_a_security_group_of_corrals_shared_by_launches_of_those_ports",
        ),
        "image_id": honoured(
            "the machine image (or docker:<image> container)",
            "tests/integration/test_aws_provider.py::test_a_tasks_image_id_reaches_run_instances_as_written",
        ),
        "autostop": honoured(
            "an idle machine stops (or goes) after the idle minutes",
            "tests/integration/test_lifecycle_local.py::test_an_idle_service_ends_after_its_idle_minutes_and_a_busy_one_stays",
        ),
        "ordered": honoured(
            "candidates tried in written order",
            _P + "test_ordered_candidates_in_written_order_azure_noticed",
        ),
        "any_of": honoured(
            "candidates tried cheapest first", _P + "test_any_of_candidates_cheapest_first"
        ),
        "accelerator_args": noticed(
            "no accelerator options (TPU runtime versions and the like) reach the cloud"
        ),
        "spot_recovery": honoured(
            "the older name of job_recovery, read as it",
            "tests/unit/test_compat_honoured.py::test_skypilot_spot_recovery_is_read_as_job_recovery",
        ),
        "disk_size": noticed("the machine gets its image's boot disk size"),
        "disk_tier": noticed("the machine gets the cloud's default disk type"),
        "network_tier": noticed("the machine gets the cloud's default network tier"),
        "local_disk": noticed("the plan does not look for local disks"),
        "max_hourly_cost": noticed("the plan ranks by price but sets no ceiling"),
        "labels": noticed("no cloud labels or Kubernetes pod labels are set from it"),
        "priority_class": noticed("pods get no priority class"),
        "volumes": noticed(_VOLUMES),
        "ephemeral_storage": noticed("pods request no ephemeral storage"),
        # Determined's.
        "resource_pool": honoured(
            "the Determined pool the task runs in",
            "tests/unit/runtime/test_runtime_pools.py::test_a_determined_pass_grows_an_agent_and_starts_the_task_on_it",
        ),
        "slots": honoured(
            "the slots the task holds in its pool",
            "tests/unit/runtime/test_runtime_pools.py::test_a_determined_pass_grows_an_agent_and_starts_the_task_on_it",
        ),
        "priority": honoured(
            "Determined's priority, 1 (most urgent) to 99",
            _POOLS + "test_priority_preemption_requeues_and_fallback_pools_take_overflow",
        ),
        "max_slots": honoured(
            "the experiment's tasks hold at most this many slots at once",
            "tests/unit/runtime/test_runtime_pools.py::test_a_determined_experiment_keeps_to_its_max_slots",
        ),
    },
    "JobRecovery": {
        "strategy": honoured(
            "where a recovered job goes first",
            "tests/unit/test_recovery.py::test_job_recovery_is_read_as_skypilot_writes_it",
        ),
        "max_restarts_on_errors": honoured(
            "a failed run restarts up to this many times",
            _REC + "test_a_failing_job_restarts_up_to_its_limit_then_fails_with_every_run_shown",
        ),
        "recover_on_exit_codes": honoured(
            "a run exiting with one of these always restarts",
            _REC + "test_a_listed_exit_code_always_restarts_and_the_job_then_succeeds",
        ),
    },
    "Scheduling": {
        "preemptible": honoured(
            "the task may be preempted by a more urgent one",
            _POOLS + "test_priority_preemption_requeues_and_fallback_pools_take_overflow",
        ),
        "on_full": honoured(
            "fallback or preempt when the pool is full",
            "tests/integration/test_machine_pools.py::test_a_higher_priority_workload_preempts_the_newest_lowest_which_requeues",
        ),
        "fallback_pools": honoured(
            "pools tried when the task's own is full",
            _POOLS + "test_priority_preemption_requeues_and_fallback_pools_take_overflow",
        ),
    },
    # Written by `corral launch`, not by users.
    "Bundle": {
        "sha256": honoured(
            "checked on the node before unpacking",
            "tests/unit/test_cluster_launcher.py::test_file_mounts_arrive_checked_and_a_wrong_sha256_fails",
        ),
        "size_bytes": honoured(
            "capped",
            "tests/integration/test_api_fuzz.py::test_a_bundle_over_its_cap_is_refused_and_one_under_the_api_limit_is_kept",
        ),
        "workdir": honoured(
            "whether the bundle holds the workdir",
            _CLIENT + "test_workdir_and_file_mounts_reach_the_node_and_run_starts_in_the_workdir",
        ),
        "mounts": honoured(
            "where each file mount goes",
            _CLIENT + "test_workdir_and_file_mounts_reach_the_node_and_run_starts_in_the_workdir",
        ),
    },
    "BundleMount": {
        "target": honoured(
            "the mount's place on the node",
            "tests/unit/test_way_in.py::test_a_relative_mount_target_is_under_the_workdir_as_skypilot_reads_it",
        ),
        "member": honoured(
            "the bundle member placed there",
            _CLIENT + "test_workdir_and_file_mounts_reach_the_node_and_run_starts_in_the_workdir",
        ),
        "is_dir": honoured(
            "a folder or a file",
            "tests/unit/test_way_in.py::test_a_relative_mount_target_is_under_the_workdir_as_skypilot_reads_it",
        ),
    },
}
