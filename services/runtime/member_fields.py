"""A member's launch parameters checked against the allowlist of the cloud they go to.

The rule is :func:`corral.shared.cloud_fields.member_refusals`; this module finds where a
routed task's launch parameters would be used: a pool workload's on its pool's cloud (a
machine pool's or a Determined master's), a direct request's on the cloud its resources pin
(provisioning applies them there only) or, unpinned, on every cloud its chain may try.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from corral.services.runtime.deps import Deps
from corral.shared.cloud_fields import member_refusals
from corral.shared.config.compute_config import ComputeConfig
from corral.shared.config.task import Task
from corral.shared.configio import PathKey
from corral.shared.records import ChainStep
from corral.shared.routing import DeterminedRoute, Direct, MachinePoolRoute

Routed = Direct | MachinePoolRoute | DeterminedRoute


def launch_parameters(task: Task) -> Iterator[tuple[PathKey, Mapping[str, Any]]]:
    """Every ``advanced_instance_config`` a task carries, with its path in the task."""
    if task.advanced_instance_config:
        yield ("advanced_instance_config",), task.advanced_instance_config
    compute = task.compute_config
    if not isinstance(compute, ComputeConfig):
        return
    at: PathKey = ("compute_config",)
    if compute.advanced_instance_config:
        yield (*at, "advanced_instance_config"), compute.advanced_instance_config
    if compute.head_node is not None and compute.head_node.advanced_instance_config:
        yield (
            (*at, "head_node", "advanced_instance_config"),
            compute.head_node.advanced_instance_config,
        )
    for index, group in enumerate(compute.worker_nodes):
        if group.advanced_instance_config:
            yield (
                (*at, "worker_nodes", index, "advanced_instance_config"),
                group.advanced_instance_config,
            )


def clouds_of(deps: Deps, task: Task, route: Routed, chain: Sequence[ChainStep]) -> list[str]:
    """The clouds a routed task's launch parameters may be used on."""
    if isinstance(route, MachinePoolRoute | DeterminedRoute):
        name = route.pool if isinstance(route, MachinePoolRoute) else route.master
        record = deps.pools.get(name)
        return [record.cloud] if record is not None else []
    if task.resources.cloud:
        return [task.resources.cloud]
    return list(dict.fromkeys(step.cloud for step in chain))


def refusals(
    deps: Deps, task: Task, route: Routed, chain: Sequence[ChainStep]
) -> list[tuple[PathKey, str]]:
    """Each launch parameter of a member's task that its cloud's allowlist refuses."""
    found: list[tuple[PathKey, str]] = []
    configs = list(launch_parameters(task))
    if not configs:
        return found
    for cloud in clouds_of(deps, task, route, chain):
        for at, config in configs:
            for problem in member_refusals(cloud, config, at):
                if problem not in found:
                    found.append(problem)
    return found
