"""Launch requests, their attempts and their instances, as stored (JSON) and shown.

Times are seconds since the epoch, always passed in (``now``): nothing here reads the clock.
State changes go through ``move()``, which checks the lifecycle's table and appends a
:class:`Transition` to the record's history; never assign ``state`` directly (the store
refuses a write whose state changed without a matching history entry).

Records allow unknown fields and keep them: during a rolling upgrade an older worker that
reads and rewrites a record must not drop a field a newer one added.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.shared.lifecycle import (
    INSTANCE_TRANSITIONS,
    REQUEST_TRANSITIONS,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_REQUEST_STATES,
    InstanceState,
    RequestState,
    check_move,
)
from corral.shared.placement import Placement, PlacementFields
from corral.shared.planner import Candidate
from corral.shared.ports import endpoints, parse_ports
from corral.shared.routing import DeterminedRoute, Direct, MachinePoolRoute, Route

# How an attempt ended: "ok", one of the provider outcomes (corral.shared.errors), or
# "blocked" (skipped: its scope was blocked by an earlier failure).
AttemptOutcome = Literal[
    "ok",
    "capacity",
    "quota",
    "throttled",
    "auth",
    "invalid",
    "timeout",
    "unregistered",  # the cloud started its machines; their agents never registered
    "error",
    "blocked",
]


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class Transition(_Record):
    """One state change of a record: from where, to where, when and why."""

    from_state: str | None  # None for the first entry (the record was created)
    to_state: str
    at: float  # seconds since the epoch
    reason: str  # for a person reading `corral status`: "user cancelled", "capacity in us-east-1a"


class Attempt(PlacementFields, _Record):
    """One try of one candidate of the chain: a type and market in one zone (its place)."""

    attempt_id: str  # unique; the provider's idempotency key for this launch
    outcome: AttemptOutcome | None = None  # None while the attempt runs
    error: str | None = None  # the provider's message (with its code) when it failed
    started_at: float
    ended_at: float | None = None  # None while the attempt runs

    def finish(self, outcome: AttemptOutcome, now: float, error: str | None = None) -> None:
        """Record how the attempt ended."""
        self.outcome = outcome
        self.error = error
        self.ended_at = now

    def to_public(self) -> dict[str, Any]:
        """The attempt as the CLI and API show it."""
        return {**self.place.fields(), "outcome": self.outcome, "error": self.error}


class ChainStep(PlacementFields, _Record):
    """One candidate of a request's failover chain as stored: the planner's
    :class:`~corral.shared.planner.Candidate` in the JSON form ``corral plan --json`` prints."""

    accelerators: dict[str, int] = Field(default_factory=dict)  # name -> count per node
    vcpus: float = 0.0
    memory_gib: float = 0.0
    price_usd_per_hour: float = 0.0  # per node
    num_nodes: int = 1
    cost_usd_per_hour: float = 0.0  # the whole request

    @classmethod
    def of(cls, candidate: Candidate) -> ChainStep:
        return cls.model_validate(candidate.to_dict())

    def where(self) -> str:
        """``aws us-east-1/us-east-1a``, for events and errors."""
        return self.place.where()


class Waiting(_Record):
    """A WAITING request's wait (:mod:`corral.shared.waiting`): what it tried, what blocks
    it, when it walks its chain again, and when it gives up. Kept after it moves on (the last
    wait), so `corral why` can tell how long it waited."""

    since: float  # when it started looking for capacity (max_wait counts from here)
    retries: int = 0  # walks of the chain made again so far
    retry_at: float | None = None  # when its chain is walked again
    deadline: float | None = None  # when it fails if no capacity came (None: never)
    because: str = ""  # backoff | block_expiry | deadline: what set retry_at
    reason: str = ""  # the decision, for a person


class ServedReplica(_Record):
    """A ready replica of a replicated service, as its load balancer reaches it."""

    replica: int  # SkyServe's replica id (1: the service's own request)
    request_id: str
    url: str  # http://address:port
    accelerator: str | None = None  # instance_aware_least_load's key


class Serving(_Record):
    """A replicated service's replicas as beat's reconcile last saw them (runtime/serving.py
    writes it on the service's request; the API's load balancer reads ``ready``)."""

    replicas: list[int] = Field(default_factory=lambda: [1])  # live replica ids, 1 included
    next_id: int = 2  # the id the next new replica gets (ids are never reused)
    ready: list[ServedReplica] = Field(default_factory=list)
    failing: dict[str, float] = Field(default_factory=dict)  # replica id -> probe failing since
    # Replicas being retired (their request cancelled): replica id -> when the cancel was sent.
    retiring: dict[str, float] = Field(default_factory=dict)
    target: int = 1  # the count kept
    at: float = 0.0  # when it was observed
    # QPS autoscaling (shared/serve/autoscale.py): the rate seen, and since when the count it
    # wants has been above (below) the target.
    qps: float = 0.0
    above_since: float | None = None
    below_since: float | None = None


def _is_empty(value: Any) -> bool:
    return not value


class LaunchRequest(_Record):
    """A user's request for compute: its task, its plan, and what happened to it."""

    id: str
    task: dict[str, Any]  # the task file as validated, in JSON form
    state: RequestState = RequestState.PENDING
    version: int = 0  # bumped by the store on every write; compare-and-set checks it
    created_at: float
    updated_at: float  # time of the last move (or of the last change a writer recorded)
    history: list[Transition] = Field(default_factory=list)  # every move, oldest first
    attempts: list[Attempt] = Field(default_factory=list)  # every launch tried, oldest first
    instance_ids: list[str] = Field(default_factory=list)  # every Instance it had, in order
    chain: list[ChainStep] = Field(default_factory=list)  # the planned candidates, in order
    next_step: int = 0  # index in `chain` of the next candidate to try
    relaunches: int = 0  # how many times a RUNNING request went back to PROVISIONING
    walks: int = 0  # how many times a WAITING request walked its chain again (all waits)
    restarts: int = 0  # of those, how many restarted a failed job (job_recovery)
    restarts_on_errors: int = 0  # of those, how many count against max_restarts_on_errors
    # Relaunches after lost machines since the last one that had stayed up relaunch_reset_s
    # (what relaunch_limit bounds: corral.shared.recovery.relaunch_after_loss).
    lost_in_a_row: int = 0
    # Pool work: its last runs (placements) whose end was told, newest last. A pass that read
    # its pool before one was told finds it here and moves nothing (it is told once).
    runs_ended: list[str] = Field(default_factory=list, exclude_if=_is_empty)

    @property
    def generation(self) -> str:
        """The launch generation its attempt ids carry: a relaunch and a walk of the chain
        again after a wait each start a new one (``2``, then ``2w1``), so no attempt id is
        reused. (Letters and digits only: ids become GCP names and labels.)"""
        return f"{self.relaunches}" if self.walks == 0 else f"{self.relaunches}w{self.walks}"

    @property
    def recoveries(self) -> int:
        """Trips back after a lost or reclaimed machine (``relaunch_limit`` bounds those in a
        row: ``lost_in_a_row``)."""
        return self.relaunches - self.restarts

    error: str | None = None  # why it FAILED, in one line
    waiting: Waiting | None = None  # its chain exhausted: the wait for capacity (the last one)
    exit_code: int | None = None  # a job's `run` exit code once it ended
    labels: dict[str, str] = Field(default_factory=dict)  # the user's, for filtering
    priority: int = 0  # higher is scheduled first and preempted last
    # Where it goes, decided once at submit (corral.shared.routing): its own machines down the
    # chain, a machine pool, or a Determined resource pool. Later steps match on it.
    route: Route = Field(default_factory=Direct)
    # Who submitted it ("admin": the first admin's token) and for which project (None: no
    # project named by an admin, the schedule queue's door, or stored before users existed);
    # members and viewers see only their projects' requests.
    user: str | None = None
    project: str | None = None
    gpus: int = 0  # GPUs it holds at once (corral.shared.quotas.gpus_asked), set at submit
    # The project quota that refused it at admission (QuotaRefusal.to_dict()), if one did.
    quota_refusal: dict[str, Any] | None = None
    # When `corral autostop` last set or cancelled its autostop: idle time counts from then.
    autostop_set_at: float | None = None
    # A service with replicas (service.replicas): its replicas as last observed.
    serving: Serving | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_route(cls, data: Any) -> Any:
        """Records written before routes were stored kept ``pool`` / ``master`` and
        ``resource_pool`` fields instead: read them as the route they meant."""
        if not isinstance(data, dict) or "route" in data:
            return data
        if not any(k in data for k in ("pool", "master", "resource_pool")):
            return data
        data = dict(data)
        pool, master = data.pop("pool", None), data.pop("master", None)
        resource_pool = data.pop("resource_pool", None)
        if pool is not None:
            data["route"] = MachinePoolRoute(pool=pool)
        elif master is not None:
            data["route"] = DeterminedRoute(master=master, resource_pool=resource_pool or "")
        return data

    @classmethod
    def new(
        cls, id: str, task: dict[str, Any], now: float, reason: str = "submitted", **fields: Any
    ) -> LaunchRequest:
        """A PENDING request created at ``now``, its history starting with that creation."""
        return cls(
            id=id,
            task=task,
            state=RequestState.PENDING,
            created_at=now,
            updated_at=now,
            history=[
                Transition(
                    from_state=None, to_state=RequestState.PENDING.value, at=now, reason=reason
                )
            ],
            **fields,
        )

    @property
    def is_terminal(self) -> bool:
        """Whether the request has ended (no move leads out of its state)."""
        return self.state in TERMINAL_REQUEST_STATES

    def move(self, to: RequestState, now: float, reason: str) -> bool:
        """Move to ``to`` if the lifecycle allows it, recording when and why.

        Returns True if the state changed, False if the request was already in ``to`` (a
        no-op: nothing recorded), so ``store.update_request(id, lambda r: r.move(...))``
        writes only real moves. Raises ``IllegalTransition`` for a move the table refuses.
        """
        if not check_move(REQUEST_TRANSITIONS, self.id, self.state, to, "request"):
            return False
        self.history.append(
            Transition(from_state=self.state.value, to_state=to.value, at=now, reason=reason)
        )
        self.state = to
        self.updated_at = now
        return True

    def to_public(self, instances: Sequence[Instance] = ()) -> dict[str, Any]:
        """The request as the CLI and API show it, with the given instances (its own)."""
        return {
            "id": self.id,
            "name": self.task.get("name"),
            "state": self.state.value,
            "user": self.user,
            "project": self.project,
            "exit_code": self.exit_code,
            "error": self.error,
            "waiting": None if self.waiting is None else self.waiting.model_dump(),
            "attempts": [a.to_public() for a in self.attempts],
            "instances": [i.to_public() for i in instances],
            "endpoints": self.endpoints(instances),
        }

    def endpoints(self, instances: Sequence[Instance]) -> list[str]:
        """``address:port`` for each of the task's ports on its running head node."""
        resources = self.task.get("resources")
        ports = resources.get("ports") if isinstance(resources, dict) else None
        if not ports:
            return []
        head = next(
            (i for i in instances if i.state is InstanceState.RUNNING and i.node_index == 0), None
        )
        return endpoints(head.address if head else None, parse_ports(ports))


def _is_none(value: Any) -> bool:
    return value is None


# Who holds a machine of the machine table: a request (its node; a Ray cluster's node is a
# node of its launch request), a machine pool, a master config's Determined pools.
OwnerKind = Literal["request", "pool", "det_pool"]


# A machine's billing ends at its first move into one of these (Instance.billed_until).
_BILLED_UNTIL = frozenset(
    {InstanceState.TERMINATED.value, InstanceState.FAILED.value, InstanceState.LOST.value}
)


class Instance(PlacementFields, _Record):
    """One row of the machine table: one machine Corral holds, keyed by Corral's id, with the
    cloud's id, its place, its one lifecycle state and its owner. A request's node (launched
    by one attempt) is owned by its request; a pool's machine or a Determined agent by its
    pool (``owner_kind``/``owner_id``; ``request_id`` empty), which points at it by id."""

    id: str  # Corral's id, stable across the cloud's
    request_id: str
    node_index: int  # 0..n-1 within its request (0 is the head of a multi-node request)
    provider_id: str | None = None  # the cloud's id; None until the cloud returns one
    attempt_id: str | None = None  # the attempt that launched it (its nodes share it)
    machine_type: str | None = None  # the pool machine type it serves, if any
    state: InstanceState = InstanceState.REQUESTED
    version: int = 0  # bumped by the store on every write; compare-and-set checks it
    pid: int | None = None  # local cloud only: the agent's process id
    address: str | None = None  # where it is reached (a public IP, else a private one)
    created_at: float
    updated_at: float
    last_heartbeat_at: float | None = None  # last sign of life from the node or its agent
    exit_code: int | None = None  # its `run` exit code once it ended
    price_usd_per_hour: float | None = None  # what its machine costs (None: not known)
    # Pool work: the placement it belongs to (its nodes' records share it; a run is one).
    placement: str | None = None
    history: list[Transition] = Field(default_factory=list)  # every move, oldest first
    # Its owner when not its request (records stored before owners were, and every request's
    # node, leave both out: owned by ``request_id``; a node's JSON is as it always was).
    owner_kind: OwnerKind | None = Field(default=None, exclude_if=_is_none)
    owner_id: str | None = Field(default=None, exclude_if=_is_none)

    @property
    def owner(self) -> tuple[str, str]:
        """(kind, id) of what holds the machine: ``("request", request_id)`` unless stored."""
        return (self.owner_kind or "request", self.owner_id or self.request_id)

    @classmethod
    def new(
        cls,
        id: str,
        request_id: str,
        node_index: int,
        now: float,
        reason: str = "requested",
        **fields: Any,
    ) -> Instance:
        """A REQUESTED instance created at ``now``; ``fields`` gives cloud, region, zone, ..."""
        return cls(
            id=id,
            request_id=request_id,
            node_index=node_index,
            state=InstanceState.REQUESTED,
            created_at=now,
            updated_at=now,
            history=[
                Transition(
                    from_state=None, to_state=InstanceState.REQUESTED.value, at=now, reason=reason
                )
            ],
            **fields,
        )

    @property
    def is_terminal(self) -> bool:
        """Whether the instance is gone for good (no move leads out of its state)."""
        return self.state in TERMINAL_INSTANCE_STATES

    def billed_until(self) -> float | None:
        """When the machine stopped being billed: its first move to TERMINATED, FAILED or LOST
        (a LOST machine is terminated as it is found lost, so its teardown after is not billed
        again), an ended one's last update without such a move, None while it is billed. The
        one rule for a project's quota (services/runtime/quotas.py) and a request's runs'
        cost (shared/recovery.py)."""
        ended = next((t.at for t in self.history if t.to_state in _BILLED_UNTIL), None)
        return self.updated_at if ended is None and self.is_terminal else ended

    def move(self, to: InstanceState, now: float, reason: str) -> bool:
        """Like :meth:`LaunchRequest.move`, with the instance lifecycle."""
        if not check_move(INSTANCE_TRANSITIONS, self.id, self.state, to, "instance"):
            return False
        self.history.append(
            Transition(from_state=self.state.value, to_state=to.value, at=now, reason=reason)
        )
        self.state = to
        self.updated_at = now
        return True

    def to_public(self) -> dict[str, Any]:
        """The instance as the CLI and API show it."""
        return {
            "id": self.id,
            "provider_id": self.provider_id,
            "pid": self.pid,
            "address": self.address,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "market": self.market,
            "machine_type": self.machine_type,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "price_usd_per_hour": self.price_usd_per_hour,
        }


class Assignment(_Record):
    """A request's record of its work on a pool's machine (a machine pool's machine, a
    Determined agent): it points at that machine's row of the machine table by id
    (``machine_id``) and keeps only what is the assignment's own: its node's rank, its id on
    the machine (``attempt_id``), the placement it is part of (a run), its own lifecycle
    (RUNNING while the work runs there, TERMINATED once released to the pool: the machine goes
    on) and exit code. The cloud's id, the place, the type and the price are the row's, read
    through it (:meth:`view`), never copied here."""

    id: str  # the request's instance id for it (its ``instance_ids`` lists it)
    request_id: str
    node_index: int
    machine_id: str  # Corral's id of the pool's machine: its row of the machine table
    attempt_id: str  # the assignment's id on the machine (what its agent runs)
    placement: str | None = None  # the run it is part of (its nodes' records share it)
    shown_type: str | None = Field(default=None, exclude_if=_is_none)  # a head node's word
    state: InstanceState = InstanceState.RUNNING
    version: int = 0
    created_at: float
    updated_at: float
    exit_code: int | None = None
    history: list[Transition] = Field(default_factory=list)

    def view(self, row: Instance | None) -> Instance:
        """The assignment as its request's instance, read through the machine's row: the
        row's cloud id, place (a part the cloud left out: its type is the pool's machine
        type), type and price, with the assignment's own state, history and exit code. A row
        no longer held (retention forgot it) leaves the place empty."""
        place = Placement("", "", "", "", "on_demand") if row is None else row.place
        if row is not None and not place.instance_type and row.machine_type:
            place = dataclasses.replace(place, instance_type=row.machine_type)
        row_type = None if row is None else row.machine_type
        shown = self.shown_type or row_type or place.instance_type or None
        return Instance(
            id=self.id, request_id=self.request_id, node_index=self.node_index,
            provider_id=None if row is None else row.provider_id, attempt_id=self.attempt_id,
            **place.fields(), machine_type=shown,
            state=self.state, version=self.version, created_at=self.created_at,
            updated_at=self.updated_at, exit_code=self.exit_code,
            price_usd_per_hour=None if row is None else row.price_usd_per_hour,
            placement=self.placement, history=list(self.history),
        )  # fmt: skip

    def follow(self, view: Instance) -> Assignment:
        """The assignment after a write of its view: the view's state, history, time, exit
        code and version (what a move of the work changes; the rest is the row's)."""
        return self.model_copy(
            update={
                "state": view.state, "history": list(view.history), "updated_at": view.updated_at,
                "exit_code": view.exit_code, "version": view.version,
            }
        )  # fmt: skip


class Event(BaseModel):
    """One line of a request's progress log (what `corral launch --wait` prints)."""

    seq: int  # 1, 2, 3, ... within the request; `events(after=seq)` returns the later ones
    at: float  # seconds since the epoch
    text: str


class Submission(BaseModel):
    """What became of a task submitted under an idempotency key (the API's ``Idempotency-Key``
    header, or the key ``corral.schedule.submit`` is sent with): the request it created, or
    the refusal of its document. A key names one submission: once a request was created under
    it, the same key creates nothing more. A refusal does not use a key up: the document fixed
    and sent again under the same key is accepted."""

    key: str
    request_id: str | None = None  # the request created under the key, once one was
    # The refusal as the API answers it (its 422 detail): {"error", "issues"} for an invalid
    # document, {"error", "reasons"} for one nothing could ever be planned for.
    refusal: dict[str, Any] | None = None
    at: float  # when the outcome was recorded (seconds since the epoch)
    received: int = 1  # how many times the key was submitted, duplicates included

    @property
    def accepted(self) -> bool:
        return self.request_id is not None
