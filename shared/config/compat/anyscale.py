"""An Anyscale machine pool and compute config: each key's class.

Keys are as the file writes them; see :mod:`corral.shared.config.compat` for the classes.
"""

from __future__ import annotations

from .entry import Table, honoured, noticed

_MP = "tests/unit/test_config_machine_pool.py::"
_CC = "tests/unit/test_config_compute_config.py::"
_SCHED = "tests/unit/test_machine_pool_scheduler.py::"
_POOLS = "tests/integration/test_machine_pools.py::"
_HONOURED = "tests/unit/test_compat_honoured.py::"
_SIZE = (
    "the task's num_nodes is the machine count, drawn from the groups in rank order "
    "(group bounds are not enforced)"
)
_WHERE = "the machine pool's launch templates decide where machines launch"

ANYSCALE: Table = {
    "MachinePool": {
        "kind": honoured(
            "ANYSCALE_MANAGED launches machines; CUSTOMER_MANAGED registers them",
            _MP + "test_cross_field_problems",
        ),
        "machine_types": honoured(
            "see machine_types[].*",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
    },
    "MachineType": {
        "machine_type": honoured(
            "the name compute configs draw",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "launch_templates": honoured(
            "interchangeable ways to launch it",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "recycle_policy": honoured(
            "see recycle_policy.*",
            _POOLS + "test_idle_machines_are_reaped_past_their_limit_reserved_last",
        ),
        "partitions": honoured(
            "shares with their own rules",
            _SCHED + "test_first_matching_rule_wins_and_quota_is_per_rule",
        ),
    },
    "LaunchTemplate": {
        "instance_type": honoured("the cloud's instance type", _MP + "test_aws_seed_as_written"),
        "market_type": honoured(
            "on demand or spot",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "advanced_instance_config": honoured(
            "passed to the cloud's launch call (reservations too)",
            _MP + "test_gcp_seed_keeps_the_reservation_blob_untouched",
        ),
        "zones": honoured(
            "launches keep to these zones", _MP + "test_rules_recycle_policy_and_zones"
        ),
    },
    "RecyclePolicy": {
        "max_idle_duration": honoured(
            "an idle machine goes after this long",
            _POOLS + "test_idle_machines_are_reaped_past_their_limit_reserved_last",
        ),
        "max_workloads": noticed(
            "a machine is kept for any number of workloads until idle too long"
        ),
        "rotation_interval": noticed("a machine is kept however old it is, until idle too long"),
    },
    "Partition": {
        "name": honoured("the partition's name", _MP + "test_cross_field_problems"),
        "size": honoured(
            "machines at most",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "rules": honoured(
            "who may use it, first match wins",
            _SCHED + "test_first_matching_rule_wins_and_quota_is_per_rule",
        ),
    },
    "Rule": {
        "selector": honoured("labels a workload must have", _MP + "test_selector_semantics"),
        "priority": honoured(
            "higher wins; 0 shuts out",
            _POOLS + "test_a_higher_priority_workload_preempts_the_newest_lowest_which_requeues",
        ),
        "quota": honoured(
            "machines at most under this rule",
            _SCHED + "test_first_matching_rule_wins_and_quota_is_per_rule",
        ),
    },
    "ComputeConfig": {
        "cloud": noticed("the machine pool (or the task's resources) decides the cloud"),
        "cloud_resource": noticed(_WHERE),
        "region": noticed(_WHERE),
        "zones": noticed(_WHERE),
        "enable_cross_zone_scaling": noticed(_WHERE),
        "head_node": honoured(
            "launched beside the pool's workers",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "worker_nodes": honoured(
            "the groups drawn from a machine pool",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "auto_select_worker_config": noticed("workers come from the listed groups only"),
        "min_resources": noticed(_SIZE),
        "max_resources": noticed(_SIZE),
        "advanced_instance_config": honoured(
            "merged over the launch template's for this workload's machines",
            "tests/integration/test_aws_provider.py::test_advanced_instance_config_is_passed_through_under_corrals_choices",
        ),
        "flags": honoured(
            "see flags.*",
            _POOLS + "test_replacement_moves_a_fallen_back_workload_to_the_reservation",
        ),
        "idle_termination_minutes": noticed("the workload ends when its run ends"),
        "maximum_uptime_minutes": noticed("the workload's machines are kept however long it runs"),
    },
    # Head and worker groups share these (their base class).
    "_Node": {
        "instance_type": honoured(
            "an instance type, or a machine pool's machine type",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
        "resources": noticed("the machine's own resources (its catalog row) are used"),
        "labels": noticed("the workload's labels are the task's labels"),
        "advanced_instance_config": honoured(
            "merged over the launch template's for this workload's machines",
            "tests/integration/test_aws_provider.py::test_advanced_instance_config_is_passed_through_under_corrals_choices",
        ),
        "flags": honoured("see cloud_deployment", _CC + "test_seeds_as_written"),
        "cloud_deployment": honoured(
            "the machine pool the group draws from",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
    },
    "WorkerNodes": {
        "name": honoured(
            "the name group orders use", _CC + "test_group_order_must_name_worker_groups"
        ),
        "min_nodes": noticed(_SIZE),
        "max_nodes": noticed(_SIZE),
        "market_type": noticed("the machine pool's launch templates set the market"),
    },
    "NodeFlags": {
        "cloud_deployment": honoured(
            "the machine pool the group draws from",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
    },
    "CloudDeployment": {
        "machine_pool": honoured(
            "the machine pool's name",
            _POOLS + "test_the_seed_pool_fills_reserved_then_spot_then_on_demand",
        ),
    },
    "ComputeFlags": {
        "replacement_threshold": honoured(
            "a workload moves up the group order after this long",
            _POOLS + "test_replacement_moves_a_fallen_back_workload_to_the_reservation",
        ),
        "instance_ranking_strategy": honoured(
            "see ranker_config",
            _POOLS + "test_replacement_moves_a_fallen_back_workload_to_the_reservation",
        ),
    },
    "InstanceRanker": {
        "ranker_type": honoured("custom_group_order", _CC + "test_seeds_as_written"),
        "ranker_config": honoured(
            "see ranker_config.*",
            _POOLS + "test_replacement_moves_a_fallen_back_workload_to_the_reservation",
        ),
    },
    "RankerConfig": {
        "enable_replacement": honoured(
            "move back up the order when a better group frees",
            _POOLS + "test_replacement_moves_a_fallen_back_workload_to_the_reservation",
        ),
        "group_order": honoured(
            "groups most preferred first",
            _SCHED + "test_a_machine_type_named_twice_in_the_group_order_counts_once",
        ),
    },
}
