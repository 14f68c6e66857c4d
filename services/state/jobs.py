"""A request's job queue in Redis (``corral exec ID task.yaml``, ``queue``, ``cancel``).

The queue is one versioned document per request (``P:jobqueue:<request id>``, written by
compare-and-set: :mod:`corral.services.state.docstore`); the decisions are
:mod:`corral.shared.jobs`'. A job runs as one command per node, each an exec record
(:mod:`corral.services.state.execs`) queued on its node's job queue (``jobq:<node>``), which
the node's agent takes from only when it is free, the lowest job number first (a sorted set:
two submissions racing between their numbers and their pushes still run in number order).
What the agents report of those commands (started, exit code) becomes the job's state when
the queue is read (:meth:`JobBook.refresh`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from corral.services.state.docstore import DocStore
from corral.services.state.execs import ExecBook
from corral.shared import jobs
from corral.shared.execs import EXEC_TTL_S, exec_key, exec_queue_key, job_queue_key
from corral.shared.jobs import Job, JobQueue, NodeReport


@dataclass(frozen=True)
class NodeTarget:
    """One node a job runs on: its name for its queues, its instance."""

    node: str
    instance_id: str


@dataclass(frozen=True)
class JobSpec:
    """What an exec'd task runs (its ``run``, with its envs), on how many nodes."""

    name: str | None
    run: str
    envs: dict[str, str]
    num_nodes: int
    # Its own workdir (``corral exec ID task.yaml`` with a ``workdir``): the bundle's
    # description (shared/bundles.py: workdir only), the scope it is kept under (the
    # request's project) and the most it may unpack to. None: the launch's workdir.
    bundle: dict[str, Any] | None = None
    bundle_scope: str | None = None
    unpacked_max_bytes: int | None = None


def job_bundles_key(prefix: str, node: str) -> str:
    """The bundles of the jobs queued on ``node`` (sha256 -> scope): the only ones, beside
    its launch's, the node's token may fetch (``GET /v1/node/bundle?sha256=``)."""
    return f"{prefix}:jobbundles:{node}"


class JobBook:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.r = client
        self.prefix = prefix
        self.docs: DocStore[JobQueue] = DocStore(
            client, prefix, "jobqueue", JobQueue.model_validate_json
        )
        self.execs = ExecBook(client, prefix)

    def get(self, request_id: str) -> JobQueue:
        return self.docs.get(request_id) or JobQueue(request_id=request_id)

    def submit(
        self,
        request_id: str,
        spec: JobSpec,
        nodes: list[NodeTarget],
        *,
        now: float,
        user: str | None,
        task_id: Any,
        first: int = 2,
    ) -> Job:
        """Queue a job on ``nodes`` (one command each, node 0 first): its number comes from
        the queue's compare-and-set, then each node's command goes on that node's job queue.
        ``task_id(number)``: SkyPilot's task id for it; ``first``: the first job's number (2
        behind a launch's run, which is job 1; 1 on a service's nodes)."""
        xids = [
            self.execs.create(request_id, n.instance_id, n.node, spec.run, now, push=False)
            for n in nodes
        ]
        self.docs.create(request_id, JobQueue(request_id=request_id, next_id=first))  # or kept
        draft = Job(id=0, name=spec.name, submitted_at=now, num_nodes=len(nodes), execs=xids,
                    user=user)  # fmt: skip
        written = self.docs.replace(request_id, lambda q: jobs.add(q, draft))
        assert written is not None  # created just above, never deleted
        job = next(j for j in written.jobs if j.execs == xids)
        pipe = self.r.pipeline(transaction=True)
        for xid, n in zip(xids, nodes, strict=True):
            item: dict[str, Any] = {
                "id": xid,
                "kind": "job",
                "job": job.id,
                "run": spec.run,
                "envs": spec.envs,
                "num_nodes": len(nodes),
                "task_id": task_id(job.id),
            }
            if spec.bundle is not None:
                item["bundle"] = spec.bundle
                item["bundle_scope"] = spec.bundle_scope
                item["unpacked_max_bytes"] = spec.unpacked_max_bytes
                key = job_bundles_key(self.prefix, n.node)
                pipe.hset(key, spec.bundle["sha256"], str(spec.bundle_scope))
                pipe.expire(key, EXEC_TTL_S)
            pipe.zadd(job_queue_key(self.prefix, n.node), {json.dumps(item): job.id})
            pipe.expire(job_queue_key(self.prefix, n.node), EXEC_TTL_S)
        pipe.execute()
        return job

    def bundle_scope(self, node: str, sha256: str) -> str | None:
        """The scope of a bundle a job queued on ``node`` names (None: no such job)."""
        raw = self.r.hget(job_bundles_key(self.prefix, node), sha256)
        return raw.decode() if isinstance(raw, bytes) else raw

    def _report(self, xid: str) -> NodeReport | None:
        raw = self.r.hmget(
            exec_key(self.prefix, xid), ["state", "started_at", "ended_at", "exit_code", "error"]
        )
        state, started, ended, code, error = (
            v.decode() if isinstance(v, bytes) else v for v in raw
        )
        if state is None:
            return None
        done = state == "done" and code is not None
        return NodeReport(
            started_at=float(started) if started else None,
            ended_at=float(ended) if ended else None,
            exit_code=int(code) if done and code is not None else None,
            error=error,
        )

    def refresh(self, request_id: str, now: float, request_state: str) -> JobQueue:
        """The queue with each job moved as its nodes reported (and, once the request no
        longer runs, every job not ended CANCELLED), written by compare-and-set."""
        running = request_state in ("RUNNING", "STARTING")

        def seen(queue: JobQueue) -> JobQueue | None:
            moved = []
            for job in queue.jobs:
                new = jobs.observe(job, [self._report(x) for x in job.execs], now)
                if not running:
                    new = jobs.request_ended(new, now, request_state)
                moved.append(new)
            if moved == queue.jobs:
                return None
            return queue.model_copy(update={"jobs": moved})

        if self.docs.get(request_id) is None:
            return JobQueue(request_id=request_id)
        return self.docs.replace(request_id, seen) or JobQueue(request_id=request_id)

    def cancel(
        self, request_id: str, numbers: Iterable[int], now: float, who: str | None,
        launch: Job | None, nodes: list[str],
    ) -> tuple[list[Job], list[tuple[int, str]]]:  # fmt: skip
        """Cancel jobs by number: each PENDING or RUNNING one becomes CANCELLED (one
        compare-and-set), its commands taken off their nodes' job queues and a kill sent to
        each node (a running one's process group ends). ``launch``: job 1 as it is now;
        ``nodes``: the request's running nodes (job 1's kill goes to each). Returns the jobs
        cancelled and, for the others, why not."""
        wanted = list(dict.fromkeys(numbers))
        done: list[Job] = []
        refused: list[tuple[int, str]] = []

        def cancelling(queue: JobQueue) -> JobQueue | None:
            done.clear()
            refused.clear()
            out = list(queue.jobs)
            first = queue.launch
            for number in wanted:
                if number == 1 and launch is not None:
                    try:
                        first = jobs.cancel(first or launch, now, who)
                        done.append(first)
                    except jobs.CancelRefused as exc:
                        refused.append((number, str(exc)))
                    continue
                at = next((i for i, j in enumerate(out) if j.id == number), None)
                if at is None:
                    refused.append((number, f"request {request_id} has no job {number}"))
                    continue
                try:
                    out[at] = jobs.cancel(out[at], now, who)
                    done.append(out[at])
                except jobs.CancelRefused as exc:
                    refused.append((number, str(exc)))
            if not done:
                return None
            return queue.model_copy(update={"jobs": out, "launch": first})

        self.docs.create(request_id, JobQueue(request_id=request_id))
        self.docs.replace(request_id, cancelling)
        for job in done:
            if job.id == 1:
                for node in nodes:
                    self._kill(node, {"job": 1})
            for xid in job.execs:
                self._unqueue(xid)
        return list(done), list(refused)

    def _unqueue(self, xid: str) -> None:
        """A cancelled job's command on one node: off that node's job queue if still waiting
        there, else a kill for its process group."""
        node = self.r.hget(exec_key(self.prefix, xid), "node")
        if node is None:
            return
        node = node.decode() if isinstance(node, bytes) else str(node)
        queue = job_queue_key(self.prefix, node)
        for raw in self.r.zrange(queue, 0, -1):
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            if json.loads(text).get("id") == xid:
                self.r.zrem(queue, text)
        self._kill(node, {"target": xid})

    def _kill(self, node: str, what: dict[str, Any]) -> None:
        item = {"id": "k-" + secrets.token_hex(8), "kind": "cancel", **what}
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(exec_queue_key(self.prefix, node), json.dumps(item))
        pipe.expire(exec_queue_key(self.prefix, node), EXEC_TTL_S)
        pipe.execute()
