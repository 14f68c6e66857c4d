"""The API's response bodies, typed so that /openapi.json documents them.

They mirror ``to_public()`` of the records in ``corral.shared.records``: the same field names,
so the CLI's ``--json`` and the API return the same documents.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.shared.placement import PlacementFields


class AttemptView(PlacementFields):
    """One launch tried: a type and market in one zone, and how it ended."""

    outcome: str | None = Field(None, description="ok, capacity, quota, ...; null while running")
    error: str | None = Field(None, description="the provider's message when the attempt failed")


class InstanceView(PlacementFields):
    """One machine of a request."""

    id: str
    provider_id: str | None = None
    pid: int | None = Field(None, description="local cloud only: the agent's process id")
    address: str | None = Field(
        None, description="where the machine is reached: a public IP, else a private one"
    )
    machine_type: str | None = Field(
        None, description="the machine pool's machine type it runs on; None off pools"
    )
    state: str
    exit_code: int | None = Field(None, description="a job node's run exit code, once it ended")
    price_usd_per_hour: float | None = Field(
        None, description="what its machine costs, as planned; null when not known"
    )


class RunView(PlacementFields):
    """One launch of the request's machines that came up: the first, each relaunch after a
    lost or reclaimed machine, each restart of a failed job (``job_recovery``)."""

    attempt_id: str
    nodes: int
    started_at: float = Field(description="when the cloud accepted the launch (seconds)")
    ended_at: float | None = Field(None, description="when its last machine ended")
    outcome: str = Field(description="booting, running, exited N, lost or terminated")
    cost_usd: float | None = Field(None, description="its machines' cost; null if unknown")


class ReplicaView(BaseModel):
    """One replica of a replicated service."""

    replica: int = Field(description="SkyServe's replica id (1: the service's own request)")
    request_id: str
    ready: bool = Field(description="in the load balancer's rotation")
    url: str | None = None


class RequestView(BaseModel):
    """A launch request with its attempts (oldest first) and its instances."""

    # A newer store may add fields to the public view; pass them through rather than drop them.
    model_config = ConfigDict(extra="allow")

    id: str
    name: str | None = None  # the task's name, when it has one
    state: str
    user: str | None = Field(
        None,
        description="who submitted it (admin: the first admin's token; null: through the "
        "schedule queue, or before users existed)",
    )
    project: str | None = Field(None, description="the project it belongs to")
    exit_code: int | None = None  # a finished job's: the first non-zero of its nodes, else 0
    error: str | None = None  # why it failed, when it did
    waiting: dict[str, Any] | None = Field(
        None,
        description="its chain exhausted, the wait for capacity (the last one): since, "
        "retries, retry_at, deadline (seconds since the epoch), because, reason",
    )
    attempts: list[AttemptView]
    instances: list[InstanceView]
    # The one-request view adds the history of its runs and what they cost together.
    relaunches: int | None = Field(None, description="relaunches after lost machines")
    restarts: int | None = Field(None, description="restarts of its failed job (job_recovery)")
    runs: list[RunView] | None = None
    cost_usd: float | None = Field(None, description="every run's cost, summed; null if unknown")
    endpoints: list[str] = Field(
        default_factory=list,
        description="address:port (or address:first-last) of each of the task's ports on its "
        "running head node",
    )
    ready: bool | None = Field(
        None,
        description="a service with a readiness probe (service.readiness_probe): true once its "
        "head node's agent saw the probe pass; null without a probe",
    )
    # A service with replicas (service.replicas): its load balancer and its replicas.
    service_endpoint: str | None = Field(
        None,
        description="a replicated service's endpoint: the API's load balancer over its "
        "ready replicas",
    )
    replicas_target: int | None = Field(None, description="the replicas a service keeps")
    qps: float | None = Field(
        None, description="the requests per second its load balancer relayed (last minute)"
    )
    replicas: list[ReplicaView] | None = None


class RequestList(BaseModel):
    requests: list[RequestView]


class InstanceRow(InstanceView):
    """An instance in a listing across requests, so it names its request."""

    request_id: str


class InstanceList(BaseModel):
    instances: list[InstanceRow]


class EventView(BaseModel):
    seq: int = Field(description="1, 2, 3, ... within the request; pass the last as ?after=")
    at: float = Field(description="seconds since the epoch")
    text: str


class EventPage(BaseModel):
    """The progress lines after ``?after=`` and the request's state now (one poll of --wait)."""

    request_id: str
    state: str
    events: list[EventView]


class Health(BaseModel):
    status: str
    detail: str | None = None


class TaskBody(BaseModel):
    """What ``POST /v1/requests`` accepts as JSON: the task as a mapping, or as YAML/JSON text.

    A raw body with ``Content-Type: application/yaml`` (or ``text/yaml``) is also accepted.
    """

    model_config = ConfigDict(extra="forbid")

    task: dict[str, Any] | None = Field(None, description="the task file's content as a mapping")
    task_yaml: str | None = Field(None, description="the task file's text (YAML or JSON)")


class PoolBody(BaseModel):
    """What ``POST /v1/pools`` accepts: a machine pool or master config file as JSON."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the name compute configs use (flags...machine_pool)")
    kind: str = Field(description="machine_pool or master_config")
    file_name: str = Field("pool.yaml", description="the file's name, used in issues")
    spec: dict[str, Any] = Field(description="the file's content as a mapping")
    cloud: str | None = Field(
        None, description="where its machines launch; default: local when every type is local"
    )


class PartitionView(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    size: int
    held: int = Field(description="machines of the partition that exist now")


class MachineTypeView(BaseModel):
    model_config = ConfigDict(extra="allow")

    machine_type: str
    market: str
    partitions: list[PartitionView]


class PoolView(BaseModel):
    """A registered pool: its file, cloud, machines and workloads (machine pools: its types)."""

    model_config = ConfigDict(extra="allow")

    name: str
    kind: str
    file: str
    cloud: str
    applied_at: float
    machines: list[dict[str, Any]]
    workloads: list[dict[str, Any]]
    machine_types: list[MachineTypeView] | None = None
    resource_pools: list[str] | None = Field(None, description="a master config's pool names")


class PoolApplied(PoolView):
    replaced: bool = Field(description="whether a file of that name was registered before")
    warnings: list[str] = Field(
        default_factory=list,
        description="registered, but: a cloud its machines need cannot launch here (not "
        "turned on, no credentials), or its cloud was chosen over the one the file is written for",
    )


class PoolList(BaseModel):
    pools: list[PoolView]


class PoolDeleted(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    deleted: bool
    machines_terminated: list[str]


class WhyView(BaseModel):
    """The scheduler's word on a request: where it runs, or why it waits."""

    model_config = ConfigDict(extra="allow")

    id: str
    state: str
    pool: str | None = None
    code: str = Field(
        description=(
            "placed, queued, not_queued, or the reason's code; a request on its own machines"
            " (no pool): planning, provisioning, waiting, running, failed or its ended state"
        )
    )
    reason: str
    budget: str | None = Field(None, description="the dollar budget holding it back, if one")
    quota: dict[str, Any] | None = Field(
        None,
        description="the project quota that refused it at admission: project, quota (gpus or "
        "usd_per_period), limit, in_use, asked, reason",
    )
    retry_at: float | None = Field(
        None, description="a WAITING request: when it walks its chain again (seconds)"
    )
    deadline: float | None = Field(
        None, description="a waiting request's max_wait deadline (seconds); null: none"
    )
    waiting_since: float | None = Field(
        None, description="when it started looking for capacity (max_wait counts from here)"
    )
    retries: int | None = Field(None, description="walks of its chain made again so far")


class SubmissionView(BaseModel):
    """What a task submitted under an idempotency key became (``GET /v1/submissions/{key}``):
    accepted, with its request, or refused, with the refusal the API would have answered."""

    model_config = ConfigDict(extra="allow")

    idempotency_key: str
    state: str = Field(description="accepted or refused")
    request_id: str | None = None
    request: RequestView | None = Field(None, description="the request now, once accepted")
    refusal: dict[str, Any] | None = Field(
        None, description='{"error", "issues"} (invalid) or {"error", "reasons"} (impossible)'
    )
    at: float = Field(description="when the outcome was recorded, seconds since the epoch")
    received: int = Field(description="how many times the key was submitted, duplicates too")
