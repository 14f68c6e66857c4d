"""The jobs a launch's nodes run after its own run (``corral exec ID task.yaml``).

A job-mode request ends when its run ends, unless jobs were queued behind it: then its nodes
stay up, running them one at a time as their turn comes (:class:`~.execs.Execs` takes the
next one when the one before it ended), and the request ends when the last has ended. The
request's exit code stays its run's (job 1); each job's own is in ``corral queue``. A job
submitted after the last was taken, as the node ends, is cancelled by the control plane
(shared/jobs.py: its request ended before it ran). Standard library only.
"""

from __future__ import annotations

from typing import Any

from corral.services.agent.link import LinkError, say


def run_jobs(agent: Any) -> None:
    """Run the jobs queued behind the launch's run, until none is left or the agent is
    stopped: one look at the node's job queue now (no heartbeat of its own: a run with nothing
    queued behind it ends as soon as before, its last beat riding with its final report), then
    each beat ships the running job's output, reports its end and takes the next.
    ``agent``: the core's Agent (not named: core.py imports this module)."""
    if agent.stopping:
        return
    try:
        agent._execs.step(agent.link, agent._where, True)
    except LinkError as exc:  # Dismissed too: the node is ending, nothing more runs here
        say(f"could not look for jobs queued behind the run: {exc}")
        return
    while not agent.stopping and agent._execs.job is not None:
        agent._wait(None)
