"""What the API answers, as typed models.

They read the API's documents and keep what they do not know: every model allows fields it
does not declare (``model_extra``), so a newer API adding a field breaks no older client, and
``model_dump()`` gives back the whole document. States are strings (``ENDED_STATES`` lists the
final ones) for the same reason: a state added later is still a state. The API's own models
are ``corral.services.api.schemas``; a unit test checks that every field they declare is
declared here too.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.shared.placement import PlacementFields

# A request in one of these states will not change again; RUNNING or one of these is what
# `wait` waits for.
ENDED_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"})
RUNNING = "RUNNING"


class View(BaseModel):
    """A document of the API: unknown fields are kept, not dropped."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # built when first used

    def document(self) -> dict[str, Any]:
        """The document as the API sent it (JSON types; fields it left out stay out)."""
        return self.model_dump(mode="json", exclude_unset=True)


# ---- requests -------------------------------------------------------------------------------


class AttemptView(PlacementFields, View):
    """One launch tried: a type and market in one zone, and how it ended (None: running)."""

    outcome: str | None = None
    error: str | None = None


class InstanceView(PlacementFields, View):
    """One machine of a request."""

    id: str
    provider_id: str | None = None
    pid: int | None = None
    address: str | None = None  # where the machine is reached, once known
    machine_type: str | None = None
    state: str
    exit_code: int | None = None
    price_usd_per_hour: float | None = None  # its machine's price as planned, when known


class InstanceRow(InstanceView):
    """An instance in a listing across requests, so it names its request."""

    request_id: str


class RunView(PlacementFields, View):
    """One launch of a request's machines that came up: the first, a relaunch after a lost
    machine, a restart of a failed job."""

    attempt_id: str
    nodes: int
    started_at: float
    ended_at: float | None = None
    outcome: str  # booting, running, exited N, lost or terminated
    cost_usd: float | None = None


class RequestView(View):
    """A launch request with its attempts (oldest first) and its instances. One request's
    view (``status``) also has its runs and their summed cost, where the API keeps them."""

    id: str
    name: str | None = None
    state: str
    user: str | None = None
    project: str | None = None
    exit_code: int | None = None
    error: str | None = None
    waiting: dict[str, Any] | None = None  # the wait for capacity of a chain exhausted
    attempts: list[AttemptView] = Field(default_factory=list)
    instances: list[InstanceView] = Field(default_factory=list)
    relaunches: int | None = None
    restarts: int | None = None
    runs: list[RunView] | None = None
    cost_usd: float | None = None
    endpoints: list[str] = Field(default_factory=list)  # address:port of a running service
    ready: bool | None = None  # its readiness probe passed (None: no probe)
    # A service with replicas (service.replicas): its load balancer's URL and its replicas.
    service_endpoint: str | None = None
    replicas_target: int | None = None
    qps: float | None = None  # the requests per second its load balancer relayed
    replicas: list[dict[str, Any]] | None = None

    @property
    def ended(self) -> bool:
        """Whether the request is in a final state."""
        return self.state in ENDED_STATES


class CostReportView(View):
    """``GET /v1/costs``: each visible request's spend (dicts as the API sent them) and the
    totals by user, project and cloud."""

    requests: list[dict[str, Any]] = Field(default_factory=list)
    count: int = 0
    totals: dict[str, Any] = Field(default_factory=dict)
    at: float | None = None


class EventView(View):
    seq: int  # 1, 2, 3, ... within the request
    at: float  # seconds since the epoch
    text: str


class EventPage(View):
    """Progress lines after a cursor, and the request's state now."""

    request_id: str
    state: str
    events: list[EventView] = Field(default_factory=list)


class SubmissionView(View):
    """What a task submitted under an idempotency key became: ``accepted`` (``request`` is
    the request now) or ``refused`` (``refusal`` as the API's 422 detail)."""

    idempotency_key: str
    state: str
    request_id: str | None = None
    request: RequestView | None = None
    refusal: dict[str, Any] | None = None
    at: float
    received: int = 1


class Health(View):
    status: str
    detail: str | None = None


# ---- pools ----------------------------------------------------------------------------------


class PartitionView(View):
    name: str
    size: int
    held: int


class MachineTypeView(View):
    machine_type: str
    market: str
    partitions: list[PartitionView] = Field(default_factory=list)


class PoolView(View):
    """A registered pool: its file, cloud, machines and workloads (machine pools: its types;
    master configs: their pools' names). ``replaced`` and ``warnings`` are set by
    ``apply_pool`` only."""

    name: str
    kind: str
    file: str
    cloud: str
    applied_at: float
    machines: list[dict[str, Any]] = Field(default_factory=list)
    workloads: list[dict[str, Any]] = Field(default_factory=list)
    machine_types: list[MachineTypeView] | None = None
    resource_pools: list[str] | None = None
    replaced: bool | None = None
    warnings: list[str] = Field(default_factory=list)


class PoolDeleted(View):
    name: str
    deleted: bool
    machines_terminated: list[str] = Field(default_factory=list)


class WhyView(View):
    """Where a request runs, or why it waits, in the scheduler's words."""

    id: str
    state: str
    pool: str | None = None
    code: str
    reason: str
    budget: str | None = None  # the dollar budget holding it back, if one
    quota: dict[str, Any] | None = None  # the project quota that refused it, if one
    retry_at: float | None = None  # WAITING: when its chain is walked again
    deadline: float | None = None  # WAITING: when it gives up (max_wait)
    waiting_since: float | None = None
    retries: int | None = None


# ---- clusters -------------------------------------------------------------------------------


class ClusterSummary(View):
    """A cluster in one row (``cluster list``); ``nodes`` counts the live ones."""

    name: str
    state: str
    cloud: str | None = None
    file: str | None = None
    nodes: int
    by_type: dict[str, int] = Field(default_factory=dict)
    demand: dict[str, Any] | None = None
    created_at: float
    warnings: list[str] = Field(default_factory=list)  # what `cluster up` says (docker, ...)


class ClusterDown(ClusterSummary):
    """A cluster being taken down: the requests of the nodes being terminated."""

    terminating: list[str] = Field(default_factory=list)


class ClusterNodeView(View):
    id: str
    node_type: str
    kind: str | None = None
    state: str
    idle_s: float = 0.0
    used: dict[str, float] = Field(default_factory=dict)


class ClusterView(View):
    """One cluster (``cluster status``): its nodes now, standing demand, last decisions."""

    name: str
    state: str
    cloud: str | None = None
    file: str | None = None
    nodes: list[ClusterNodeView] = Field(default_factory=list)
    by_type: dict[str, int] = Field(default_factory=dict)
    demand: dict[str, Any] | None = None
    created_at: float
    cooldowns: dict[str, float] = Field(default_factory=dict)
    last_decision: dict[str, Any] | None = None
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    failed_nodes: list[dict[str, Any]] = Field(default_factory=list)  # launcher step, exit code
    ray: dict[str, Any] | None = None  # the head's Ray: GCS and dashboard addresses, Ray's nodes


# ---- users and projects ---------------------------------------------------------------------


class UserView(View):
    """A user: its role and projects (``token`` only in the answer that created it)."""

    name: str
    role: str
    projects: list[str] = Field(default_factory=list)
    created_at: float | None = None
    revoked_at: float | None = None
    token: str | None = None


class ProjectView(View):
    """A project, its quota (limits null: none) and what it uses now."""

    name: str
    quota: dict[str, Any] = Field(default_factory=dict)
    gpus_in_use: int = 0
    spent_usd: float = 0.0
    period_start: float | None = None
    created_at: float | None = None
