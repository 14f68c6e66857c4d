"""Runtime steps without Celery: the work a step publishes is recorded instead of sent, then
run by :class:`Driver` calling the same runtime functions the Celery tasks call."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.services.queues import dispatch
from corral.services.runtime import boots, failover, provisioning, termination
from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled import launching, passes
from corral.shared.failover import Within

from fakes.provider import FakeProvider

# A one-machine machine pool named "small" on the local cloud's cpu-2, and a workload for it.
SMALL_POOL = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "cpu-2"}],
            "partitions": [{"name": "shared", "size": 1}],
        }
    ],
}
SMALL_POOL_WORKLOAD = {
    "compute_config": {
        "worker_nodes": [
            {"instance_type": "cpu", "flags": {"cloud_deployment": {"machine_pool": "small"}}}
        ]
    },
    "run": "sleep 1",
}


@dataclass
class Published:
    name: str
    args: list[Any]
    queue: str
    countdown: float | None


@dataclass
class Driver:
    """The queues as a list; ``run`` plays them the way the workers would."""

    deps: Deps
    fake: FakeProvider
    queue: list[Published] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def send(
        self,
        name: str,
        args: Any = (),
        *,
        queue: str,
        countdown: float | None = None,
        settings: Any = None,
    ) -> str:
        self.queue.append(Published(name, list(args), queue, countdown))
        return uuid.uuid4().hex

    def names(self) -> list[str]:
        return [p.name for p in self.queue]

    def step(self) -> Any:
        """Run the oldest published task once; its result."""
        job = self.queue.pop(0)
        self.ran.append(job.name)
        return TASKS[job.name](self.deps, *job.args)

    def run(self, limit: int = 200, until: Callable[[], bool] | None = None) -> None:
        """Run published work until none is left (or ``until`` holds); a boot watch moves the
        fake's clock by its countdown first, as waiting for it would."""
        for _ in range(limit):
            if not self.queue or (until is not None and until()):
                return
            if self.queue[0].name == dispatch.WATCH_BOOTS and self.queue[0].countdown:
                self.fake.advance(self.queue[0].countdown)
            # A retry is published again by the Celery task, not here.
            with contextlib.suppress(provisioning.RetryLater):
                self.step()
        raise AssertionError(f"still publishing after {limit} steps: {self.names()[:10]}")

    def blocks_listed(self, told: dict[str, Any]) -> list[tuple[str, str]]:
        """The blocks a pooled `why` lists (those its reason names), as (kind, scope) in order;
        each still in force now, and told by scope only (what a refusal said may name another
        project's request)."""
        listed = told["blocked"]
        assert all(b["until"] > self.deps.now() and "reason" not in b for b in listed), told
        return sorted((b["kind"], b["scope"]) for b in listed)


TASKS: dict[str, Callable[..., Any]] = {
    dispatch.ADMIT: provisioning.admit,
    dispatch.ATTEMPT: provisioning.attempt,
    dispatch.RETRY_REGION: lambda d, r, a: failover.advance(d, r, a, Within.REGION),
    dispatch.RETRY_CLOUD: lambda d, r, a: failover.advance(d, r, a, Within.CLOUD),
    dispatch.NEXT_CLOUD: lambda d, r, a: failover.advance(d, r, a, Within.ANY),
    dispatch.WATCH_BOOTS: boots.watch,
    dispatch.TERMINATE: lambda d, r, i=None, why="user": termination.terminate(
        d, r, i, why, by_user=True
    ),
    dispatch.POOL_PASS: passes.run_pass,
    dispatch.POOL_SYNC: passes.sync,
    dispatch.POOL_MACHINE: launching.launch_machine,
}
