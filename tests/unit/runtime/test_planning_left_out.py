"""The clouds a task could have used but that launches here leave out (what admission and a
refused submit name), worked out for the clouds the task can use only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import catalog_for, clouds_left_out
from corral.shared.config.task import Task
from corral.shared.planner import plan

TASKS: dict[str, dict[str, Any]] = {
    "pinned to a launchable cloud": {"cloud": "local", "instance_type": "cpu-2"},
    "pinned to a left-out cloud": {"cloud": "aws", "cpus": 2},
    "any of a launchable and a left-out cloud": {
        "any_of": [{"cloud": "local", "instance_type": "cpu-2"}, {"cloud": "gcp", "cpus": 2}]
    },
    "any of two launchable alternatives": {
        "any_of": [{"cloud": "local", "instance_type": "cpu-2"}, {"cloud": "local", "cpus": 8}]
    },
    "no cloud named": {"cpus": 2},
}
EXPECTED = {
    "pinned to a launchable cloud": set(),
    "pinned to a left-out cloud": {"aws"},
    "any of a launchable and a left-out cloud": {"gcp"},
    "any of two launchable alternatives": set(),
    "no cloud named": {"aws", "gcp"},
}


def _every_cloud_asked(deps: Deps, task: Task) -> set[str]:
    """The naive answer: the planner asked about every cloud that cannot launch here."""
    catalog = catalog_for(deps)
    launchable = set(deps.launchable_clouds())
    return {
        c
        for c in catalog.clouds
        if c not in launchable and plan(task, catalog, clouds=(c,)).candidates
    }


@pytest.mark.parametrize("case", list(TASKS))
def test_the_clouds_left_out_are_those_the_task_could_use(
    make_deps: Callable[..., Deps], case: str
) -> None:
    deps = make_deps()
    task = Task.model_validate({"resources": TASKS[case], "run": "true"})
    left = clouds_left_out(deps, task)
    assert set(left) == EXPECTED[case] == _every_cloud_asked(deps, task)
    assert set(left.values()) <= {"not in CORRAL_CLOUDS"}  # only local is enabled here
