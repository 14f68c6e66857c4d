"""Every lifecycle, each one transition table: a request's, and one machine's for every
machine Corral holds (a request's node, a machine pool's machine, a Determined pool's agent).

A table maps a state to the states it may move to, with the reason for each edge beside it.
Anything not in the table is refused with :class:`IllegalTransition`. Moving to the state a
record is already in is not a transition: :func:`check_move` answers False (a no-op), so that
a retried task asking for the same move again changes nothing. Terminal states are the ones
with no way out. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar


class RequestState(StrEnum):
    """Where a launch request is. Values are what the CLI and API print."""

    PENDING = "PENDING"  # accepted, waiting to be scheduled
    PROVISIONING = "PROVISIONING"  # its failover chain is being tried
    WAITING = "WAITING"  # its chain is exhausted: it waits for capacity and walks it again
    RUNNING = "RUNNING"  # all its nodes are up
    SUCCEEDED = "SUCCEEDED"  # a job whose `run` exited 0
    FAILED = "FAILED"  # chain exhausted (fail fast, or max_wait passed), or `run` exited non-zero
    CANCELLED = "CANCELLED"  # the user cancelled it before it ran
    TERMINATED = "TERMINATED"  # the user terminated it while it ran
    PREEMPTED = "PREEMPTED"  # a scheduler took its machines for another request
    STOPPED = "STOPPED"  # its machines are stopped (disks kept, not billed for compute)
    STARTING = "STARTING"  # its stopped machines were started: waiting for their agents


REQUEST_TRANSITIONS: dict[RequestState, frozenset[RequestState]] = {
    RequestState.PENDING: frozenset(
        {
            RequestState.PROVISIONING,  # the scheduler placed it: start down its chain
            RequestState.FAILED,  # nothing in its chain can be tried (all blocked), fail fast
            RequestState.WAITING,  # nothing in its chain can be tried now: wait for capacity
            RequestState.CANCELLED,  # the user cancelled it while it waited
        }
    ),
    RequestState.PROVISIONING: frozenset(
        {
            RequestState.RUNNING,  # every node of the request reported up
            RequestState.FAILED,  # chain exhausted (fail fast, max_wait passed), or an error
            # no candidate can fix
            RequestState.WAITING,  # chain exhausted: wait for capacity (retry until up)
            RequestState.CANCELLED,  # the user cancelled it before it ran
            RequestState.PENDING,  # nothing free now, the task waits: requeued
        }
    ),
    RequestState.WAITING: frozenset(
        {
            RequestState.PROVISIONING,  # its retry is due: walk the whole chain again
            RequestState.FAILED,  # its max_wait passed before capacity came
            RequestState.CANCELLED,  # the user gave up on it while it waited
        }
    ),
    RequestState.RUNNING: frozenset(
        {
            RequestState.SUCCEEDED,  # a job's `run` exited 0
            RequestState.FAILED,  # a job's `run` exited non-zero, or relaunches are used up
            RequestState.TERMINATED,  # the user terminated it
            RequestState.PROVISIONING,  # a node was LOST or reclaimed: relaunch via chain
            RequestState.PREEMPTED,  # a scheduler took its machines for a higher-priority request
            RequestState.PENDING,  # its pool job failed and restarts (job_recovery): queued again
            RequestState.STOPPED,  # the user's stop, or autostop: the cloud stopped its machines
        }
    ),
    RequestState.STOPPED: frozenset(
        {
            RequestState.STARTING,  # the user's start: the cloud was asked to start its machines
            RequestState.TERMINATED,  # the user terminated it while it was stopped
        }
    ),
    RequestState.STARTING: frozenset(
        {
            RequestState.RUNNING,  # every node's agent reported again since the start
            RequestState.STOPPED,  # the cloud refused the start (no capacity), or the agents
            # did not report within the attempt deadline: stopped again
            RequestState.TERMINATED,  # the user terminated it while it was starting
        }
    ),
    RequestState.PREEMPTED: frozenset(
        {
            RequestState.PENDING,  # queued again, to be placed when machines free up
            RequestState.PROVISIONING,  # placed again at once
            RequestState.CANCELLED,  # the user gave up on it while it waited to be placed again
            RequestState.TERMINATED,  # the user terminated it (it had run, so this is not a cancel)
        }
    ),
    # Terminal: a finished request is never reopened; a new attempt is a new request.
    RequestState.SUCCEEDED: frozenset(),
    RequestState.FAILED: frozenset(),
    RequestState.CANCELLED: frozenset(),
    RequestState.TERMINATED: frozenset(),
}


class MachineState(StrEnum):
    """Where one machine Corral holds is, whatever asked for it: a node of a request (its
    :class:`~corral.shared.records.Instance`), a machine pool's machine or a Determined pool's
    agent (their ledgers' entries, which name these states with the pools' own words:
    :data:`POOL_WORDS`). Values are what the CLI and API print for a request's instances."""

    REQUESTED = "REQUESTED"  # the cloud was asked for it
    RUNNING = "RUNNING"  # the cloud (or the local agent) reports it up
    RETIRING = "RETIRING"  # a pool's machine whose replacement is up: it goes once its
    # workload runs there (only a pool's machines pass through it)
    TERMINATING = "TERMINATING"  # we asked the cloud to stop it
    TERMINATED = "TERMINATED"  # it is gone and no longer billed
    FAILED = "FAILED"  # it never came up, and nothing of it exists
    LOST = "LOST"  # we lost track of it: it may still exist (and bill) until cleaned up
    STOPPED = "STOPPED"  # the cloud stopped it (corral stop, autostop): its disk is kept


# A request's node is a machine: the machine lifecycle under the name its records always had.
InstanceState = MachineState

# The one machine lifecycle. A pool's machine leaves its ledger from where it is (a reaped one
# once the cloud has terminated it, one that failed to launch at once), so the pools use the
# moves among REQUESTED, RUNNING, RETIRING and TERMINATING only.
MACHINE_TRANSITIONS: dict[MachineState, frozenset[MachineState]] = {
    MachineState.REQUESTED: frozenset(
        {
            MachineState.RUNNING,  # the cloud or the local agent reports it up
            MachineState.FAILED,  # refused (capacity, quota, ...): nothing exists
            MachineState.LOST,  # launch outcome unknown (timeout): look for it
            MachineState.TERMINATING,  # its request was cancelled while it was coming up; a
            # pool's machine idle before it came up, or a head whose workload ended
            MachineState.TERMINATED,  # it ended before it was seen up (a job that exited at once)
            MachineState.RETIRING,  # a pool's warm machine took its workload over before it
            # came up
        }
    ),
    MachineState.RUNNING: frozenset(
        {
            MachineState.TERMINATING,  # asked to stop: the user terminated, or its job ended; a
            # pool's machine idle past its limit, or a head whose workload ended
            MachineState.LOST,  # its process is gone or its heartbeats stopped
            MachineState.TERMINATED,  # it ended by itself (exited, spot reclaim)
            MachineState.STOPPED,  # the cloud stopped it on Corral's word (stop, autostop)
            MachineState.RETIRING,  # a pool's machine whose replacement came up (better
            # capacity freed)
        }
    ),
    MachineState.RETIRING: frozenset(
        {
            MachineState.TERMINATING,  # a retiring head whose workload ended before the
            # hand-over
            MachineState.LOST,  # its cloud no longer runs it before the hand-over
        }
    ),
    MachineState.STOPPED: frozenset(
        {
            MachineState.RUNNING,  # started again, and its agent reported since
            MachineState.TERMINATING,  # terminated while stopped
            MachineState.TERMINATED,  # the cloud says it is gone
            MachineState.LOST,  # the cloud no longer knows it, nobody asked
        }
    ),
    MachineState.TERMINATING: frozenset(
        {
            MachineState.TERMINATED,  # the cloud confirms it is gone
            # Not LOST: a stop that has not been confirmed stays TERMINATING and is retried.
        }
    ),
    MachineState.LOST: frozenset(
        {
            MachineState.TERMINATING,  # found again (or still listed): stop what is left
            MachineState.TERMINATED,  # the cloud confirms nothing is left
            # Not RUNNING: its request has been relaunched elsewhere, so a lost instance that
            # shows up again is a duplicate to stop, not a node to adopt.
        }
    ),
    # Terminal.
    MachineState.TERMINATED: frozenset(),
    MachineState.FAILED: frozenset(),
}
INSTANCE_TRANSITIONS = MACHINE_TRANSITIONS  # the same table under its older name

# The states a request's node can be in: every machine state but RETIRING. The instance
# indexes of the store, the metrics and the autoscaler's NODES file walk these.
INSTANCE_STATES: tuple[MachineState, ...] = tuple(
    s for s in MachineState if s is not MachineState.RETIRING
)


class MachineStatus(StrEnum):
    """A machine pool's words for the machine states its machines pass through (what
    `corral pools list` prints, and what its ledger stores): see :data:`POOL_WORDS`."""

    LAUNCHING = "launching"  # REQUESTED: the ledger wants it; the provisioning worker launches it
    UP = "up"  # RUNNING: it serves workloads, one after another
    RETIRING = "retiring"  # RETIRING: its replacement is up
    REAPING = "reaping"  # TERMINATING: idle past its limit (or a head whose workload ended)


class AgentStatus(StrEnum):
    """A Determined resource pool's words for the machine states its agents pass through."""

    LAUNCHING = "launching"  # REQUESTED: the pool grew for waiting tasks
    UP = "up"  # RUNNING: its slots take tasks
    REAPING = "reaping"  # TERMINATING: idle past max_idle_agent_period


# The machine state each word of the pools names (a machine pool's and a Determined pool's
# words are the same where they overlap).
POOL_WORDS: dict[str, MachineState] = {
    "launching": MachineState.REQUESTED,
    "up": MachineState.RUNNING,
    "retiring": MachineState.RETIRING,
    "reaping": MachineState.TERMINATING,
}

TERMINAL_REQUEST_STATES: frozenset[RequestState] = frozenset(
    {RequestState.SUCCEEDED, RequestState.FAILED, RequestState.CANCELLED, RequestState.TERMINATED}
)
TERMINAL_MACHINE_STATES: frozenset[MachineState] = frozenset(
    {MachineState.TERMINATED, MachineState.FAILED}
)
TERMINAL_INSTANCE_STATES = TERMINAL_MACHINE_STATES

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(ValueError):
    """A move the lifecycle's table does not allow. Names the record and both states."""

    def __init__(self, record_id: str, from_state: str, to_state: str, kind: str = "") -> None:
        self.record_id = record_id
        self.from_state = from_state
        self.to_state = to_state
        self.kind = kind  # "request", "instance", "machine" or "agent": who holds the record
        what = f"{kind} {record_id}" if kind else record_id
        super().__init__(f"{what}: illegal transition {from_state} -> {to_state}")


def is_transition(table: Mapping[S, frozenset[S]], from_state: S, to_state: S) -> bool:
    """Whether ``from_state -> to_state`` is an edge of ``table`` (a same-state move is not)."""
    return to_state in table[from_state]


def check_move(
    table: Mapping[S, frozenset[S]], record_id: str, from_state: S, to_state: S, kind: str = ""
) -> bool:
    """Decide one move: True if it is a transition to make, False if the record is already in
    ``to_state`` (a no-op: record nothing, write nothing). Raises :class:`IllegalTransition`
    for any other move."""
    if from_state == to_state:
        return False
    if not is_transition(table, from_state, to_state):
        raise IllegalTransition(record_id, from_state.value, to_state.value, kind)
    return True
