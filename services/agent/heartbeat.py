"""The node agent's registration and heartbeat: it waits for its launch's peers to report in
(``_learn_peers``), beats with what the machine is doing (its activity, assignments, demand,
idle time, usage, readiness), backs off while the link is down, records its child process
groups, and stops when the control plane dismisses the node. One concern of
:class:`~.core.Agent` (a mixin it composes). Standard library only, and the one backoff
formula (``corral.shared.backoff``, itself the standard library only: the agent's wheel
carries it)."""

from __future__ import annotations

import random
import time
from typing import Any

from corral.services.agent import skypilot_env
from corral.services.agent.agent_base import AgentBase
from corral.services.agent.link import Dismissed, FinalBeat, LinkError, say
from corral.services.agent.sandbox import read_demand
from corral.shared.backoff import backoff_s  # the one formula: stdlib only, shipped in the wheel


class HeartbeatMixin(AgentBase):
    """Registration and heartbeat: what the agent tells the control plane, and when."""

    def _learn_peers(self) -> bool:
        """A launch's node (``CORRAL_NODE_RANK`` of ``CORRAL_NUM_NODES``) waits, heartbeating,
        until every node of its launch has reported its address, then sets SkyPilot's
        ``SKYPILOT_NODE_RANK`` / ``SKYPILOT_NODE_IPS`` for setup and run (skypilot_env.py):
        nothing starts before the node can reach the others. False: stopped while waiting."""
        envs = self.work.envs
        try:
            rank, count = int(envs["CORRAL_NODE_RANK"]), int(envs["CORRAL_NUM_NODES"])
        except (KeyError, ValueError):
            return True  # not one node of a launch (a warm pool machine)
        if not 0 <= rank < count:
            return True  # one node launched again on its own: its peers are not this launch's
        if count > 1:  # (a node alone needs no one's word: no beat, no round trip of its own)
            self._beat(force=True)  # heard: the others count this node as reported in
        waiting = False
        while not self.stopping:
            try:
                ips = self.link.peers(count)
            except Dismissed as exc:
                self._dismiss(exc)
                break
            except LinkError as exc:
                ips = None
                if not waiting:
                    say(f"cannot ask for the other nodes' addresses yet: {exc}")
            if ips is not None:
                self.work.envs = {**envs, **skypilot_env.node_envs(rank, ips)}
                if waiting or count > 1:
                    say(f"node {rank} of {count}; the nodes' addresses: {' '.join(ips)}")
                return True
            if not waiting:
                say(f"waiting for the other {count - 1} node(s) to report their addresses")
            waiting = True
            self._wait(None)
        return False

    def _beat(self, force: bool = False, execs: bool = True) -> None:
        """Send a heartbeat when one is due (``force``: now) and, unless not ``execs``, take
        the commands queued for the node and report those running."""
        if not force and time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + self._beat_delay()
        try:
            b = self._beat_now()
            self.link.heartbeat(
                b.activity, b.now, b.ttl_s, b.queued, b.assignment, b.assignments, b.status
            )
            if self._link_down:
                say("the control plane is reachable again")
            self._link_down = False
            self._link_failures = 0
            if execs:
                free = self._run_exit is not None or self.activity == "idle"
                self._execs.step(self.link, self._where, free)
        except Dismissed as exc:
            self._dismiss(exc)
        except LinkError as exc:
            if not self._link_down:  # say it once, keep the task running
                say(f"heartbeat failed: {exc}")
            self._link_down = True
            self._link_failures += 1
            self._next_beat = time.monotonic() + self._beat_delay()

    def _beat_now(self) -> FinalBeat:
        """What a heartbeat sent now says."""
        running = {aid: job.phase for aid, job in sorted(self.jobs.items())}
        activity = self._activity()
        return FinalBeat(
            activity,
            time.time(),
            self.heartbeat_ttl_s,
            self._queued(),
            next(iter(running), None),
            running,
            self._status(activity),
        )

    def _beat_delay(self) -> float:
        """The next heartbeat's delay: the interval, or while the link is down a jittered
        backoff that never exceeds a third of the heartbeat TTL, so the agent is heard again
        well within a timeout once the control plane is back."""
        if not self._link_failures:
            return self.heartbeat_s
        cap = max(self.heartbeat_s, self.heartbeat_ttl_s / 3)
        backoff = backoff_s(self.heartbeat_s, min(self._link_failures - 1, 8), cap_s=cap)
        return float(backoff * random.uniform(0.5, 1.0))

    def _status(self, activity: str) -> dict[str, Any]:
        """What the heartbeat says besides the activity: how long the node has been idle
        (autostop counts from it; an exec running is not idle), how long the agent has been
        up, and whether the readiness probe passed (services with one)."""
        now = time.monotonic()
        if activity == "idle" and not self._execs.running:
            if self._idle_from is None:
                self._idle_from = now
        else:
            self._idle_from = None
        status: dict[str, Any] = {
            "idle_s": None if self._idle_from is None else round(now - self._idle_from, 3),
            "up_s": round(now - self._started, 3),
            **self._usage.read(),
        }
        if self.probe is not None:
            status["ready"] = self.probe.ready
        if self._run_exit is not None:  # job 1 has ended; the jobs queued behind it run
            status["run_exit"], status["run_ended_at"] = self._run_exit
        return status

    def _cancelled(self, activity: str) -> bool:
        """`corral cancel ID 1` stops the launch's run (not its setup)."""
        return activity == "running" and self._execs.run_cancelled

    def _dismiss(self, exc: Dismissed) -> None:
        if not self.stopping:
            say(f"the control plane ended this node ({exc}); stopping its work")
        self.stopping = True

    def _activity(self) -> str:
        """The setup/run path's phase; on an idle machine, what its assignments add up to:
        running if any is in setup or run, serving if all are services, else idle."""
        if self.activity != "idle":
            return self.activity
        phases = {job.phase for job in self.jobs.values()}
        if phases - {"serving"}:
            return "running"
        return "serving" if phases else "idle"

    def _queued(self) -> dict[str, Any] | None:
        """The demand the node's workload wrote to CORRAL_DEMAND_FILE (JSON), if any."""
        path = self.work.envs.get("CORRAL_DEMAND_FILE")
        return read_demand(path, say) if path else None

    def _set_child(self, pid: int) -> None:
        try:
            self.link.record_children(child_pid=pid)
        except LinkError as exc:
            say(f"could not record the child pid: {exc}")

    def _record_groups(self) -> None:
        """Every assignment's process group in the record, so terminate() can kill them if
        the agent cannot."""
        groups = sorted(job.child.pid for job in self.jobs.values() if job.child is not None)
        groups += self._kept
        try:
            self.link.record_children(groups=groups)
        except LinkError as exc:
            say(f"could not record the child pids: {exc}")
