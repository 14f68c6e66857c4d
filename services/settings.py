"""The one settings tree. Nothing else in Corral reads the environment.

Every value can be set as ``CORRAL_<NAME>`` (nested timers as ``CORRAL_TIMERS__<NAME>``), so
tests and deployments shorten or lengthen any timer without code changes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.shared.clouds import CATALOG_CLOUDS

if TYPE_CHECKING:
    from corral.shared.catalog import Catalog

PACKAGED_LOCAL_CLOUD = (
    Path(__file__).resolve().parent / "providers" / "local" / "example-cloud.yaml"
)


class Timers(BaseModel):
    """Every interval and threshold of the runtime, in seconds."""

    heartbeat_s: float = 1.0  # how often a local instance's agent reports in
    heartbeat_timeout_s: float = 10.0  # no heartbeat for this long: the instance is LOST
    reconcile_interval_s: float = 2.0  # beat: compare the store with what providers report
    attempt_deadline_s: float = 60.0  # one provisioning attempt; past it the region is unhealthy
    # A started machine's agents must report again within this of `corral start`, or the
    # request is STOPPED again and its machines stopped; unset: attempt_deadline_s.
    start_deadline_s: float | None = Field(None, gt=0)
    throttle_backoff_s: float = 0.5  # first wait before retrying a throttled zone (doubles)
    throttle_retries: int = 3  # retries in place before a throttled zone counts as failed
    blocked_ttl_s: float = 180.0  # how long a sold-out scope is remembered
    relaunch_limit: int = 3  # relaunches in a row of a request whose instance was lost
    # A lost machine that had been up this long starts relaunch_limit's count over.
    relaunch_reset_s: float = Field(1800.0, ge=0)
    # A request whose chain is exhausted waits (retry until up), then walks it again after
    # wait_retry_initial_s, times wait_retry_multiplier per walk, at most wait_retry_cap_s,
    # each drawn within +-wait_retry_jitter (a fraction); sooner when a block expires.
    wait_retry_initial_s: float = Field(30.0, gt=0)
    wait_retry_multiplier: float = Field(1.6, ge=1)
    wait_retry_cap_s: float = Field(300.0, gt=0)
    wait_retry_jitter: float = Field(0.2, ge=0, lt=1)
    terminate_grace_s: float = 5.0  # SIGTERM, then SIGKILL after this
    # An attempt's claim in Redis: its holder renews it every third of this; a holder that died
    # frees it within this time, so a redelivered attempt goes on quickly.
    claim_ttl_s: float = 3.0
    # The Redis broker re-queues a task not acknowledged within this time: how fast a dead
    # worker's task runs again. A task still running when it passes is delivered a second time;
    # that copy finds the attempt claimed and waits, so nothing is launched twice.
    visibility_timeout_s: float = 30.0
    # How often a worker sweeps the broker for unacknowledged tasks of dead workers (kombu's
    # default of 10 s x throttle 10 makes recovery take about 100 s).
    unacked_restore_interval_s: float = 5.0
    # A standby beat (or the one `corral up` restarts) takes over at most this long after the
    # leader died: every periodic pass (pool rebalancing, reconcile) waits that long. The leader
    # renews its lock every tick, at most beat_max_loop_interval_s apart: 2.5 of them here (a
    # Redis pause longer than that loses the lock; beat takes it again, and a moment of two
    # beats both firing sends idempotent passes twice). Whole seconds (redbeat's lock).
    beat_lock_timeout_s: float = 5.0
    beat_max_loop_interval_s: float = 2.0
    supervise_interval_s: float = 1.0  # `corral up` checks its processes this often
    restart_backoff_s: float = 1.0  # `corral up` waits this long before restarting a process
    # A cluster node type whose launch failed for capacity or quota is not launched again for
    # this long, so the autoscaler uses the next best type (as long as the capacity-error memory).
    autoscale_cooldown_s: float = 180.0
    # Machine pools and the global scheduler.
    pool_rebalance_interval_s: float = 30.0  # beat: replacement, idle reaping, a fresh pass
    min_runtime_s: float = 60.0  # work that has run less than this is never preempted
    replacement_budget: int = 1  # workloads being moved to better machines at once, at most
    replacement_guard_s: float = 600.0  # a workload is not replaced twice within this
    pool_min_machines: int = 0  # idle reaping never leaves a pool with fewer machines
    pool_machine_launch_retry_s: float = 90.0  # a launch not heard of for this long is re-sent
    # A workload whose pool machine failed to launch waits pool_retry_initial_s, doubled per
    # failure, at most pool_retry_cap_s (+-20 % jitter) before it is placed again; the group
    # of the machine that failed is passed over pool_avoid_initial_s, doubled per failure of
    # that group, at most pool_avoid_cap_s, so it falls down its group order meanwhile.
    pool_retry_initial_s: float = Field(5.0, gt=0)
    pool_retry_cap_s: float = Field(120.0, gt=0)
    pool_avoid_initial_s: float = Field(60.0, gt=0)
    pool_avoid_cap_s: float = Field(1800.0, gt=0)
    # A boot watch looks at a cloud's machines on their way up this often (never more often
    # than the provider's own poll interval): one describe per cloud and region per look.
    boot_watch_interval_s: float = 0.5
    # The shortest time between two looks at AWS's, Google Cloud's or a Kubernetes cluster's
    # machines, hence the boot watch's floor there: EC2's DescribeInstances is rate-limited per
    # account, Compute Engine's list calls count against the project's quota (the local cloud
    # reads its own records in Redis every 0.05 s).
    cloud_poll_interval_s: float = Field(2.0, gt=0)
    # How often a cloud machine's node agent looks at its instance metadata for the cloud's
    # warning that it takes the machine back: AWS posts a spot interruption notice two minutes
    # ahead and suggests looking every 5 s; Compute Engine gives a preempted VM 30 s.
    node_notice_poll_s: float = Field(5.0, gt=0)
    # Redis outages (a restart, a Sentinel failover, a pause). A Redis call or a publish that
    # meets a dead connection is tried again, with backoff, for this long before it fails: a
    # restart or a failover shorter than this is ridden through by every process.
    redis_patience_s: float = 30.0
    # The control plane's pulse (beat and every look at the machines write it) missing for this
    # long counts as an outage (never more than half the heartbeat timeout): until the machines
    # have had a whole heartbeat timeout to report again, none is charged as lost or late.
    outage_gap_s: float = 5.0


class LaunchLimit(BaseModel):
    """What a cloud (or one of its regions) takes, enforced across every worker process.

    ``calls_per_s`` and ``burst``: a token bucket for launch calls (RunInstances,
    instances.insert, the local cloud's start). ``in_flight``: launches accepted and not yet up
    (or failed) at once. None: no limit of that kind."""

    calls_per_s: float | None = Field(default=None, gt=0)
    burst: int = Field(default=10, ge=1)
    in_flight: int | None = Field(default=None, ge=1)


# EC2 refills its RunInstances bucket at 2 calls/s (bursts to 1000 instances); Compute Engine
# allows about 20 insert operations/s per region. Keys: a cloud, or "cloud/region".
DEFAULT_LAUNCH_LIMITS = {
    "aws": LaunchLimit(calls_per_s=2.0, burst=50),
    "gcp": LaunchLimit(calls_per_s=10.0, burst=20),
}


class Settings(BaseSettings):
    """Corral's configuration: environment (CORRAL_*) over defaults."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_", env_nested_delimiter="__", extra="ignore", case_sensitive=False
    )

    home: Path = Field(default_factory=lambda: Path.home() / ".corral")
    redis_url: str | None = None  # None: `corral up` starts its own redis-server
    # The memory limit of the redis-server `corral up` starts (maxmemory; its policy is
    # noeviction: a full Redis refuses writes and never drops state). 0: no limit.
    redis_maxmemory_bytes: int = Field(1024**3, ge=0)
    prefix: str = "corral"  # every Redis key Corral writes starts with "<prefix>:"
    # A task's workdir and file mounts, packed by corral launch (gzip'd), at most this big.
    bundle_max_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=512 * 1024 * 1024)
    # Where bundles' bytes are kept (services/state/blobs.py): file:///FOLDER or
    # s3://BUCKET[/PREFIX]; None: the folder <home>/bundles. Redis keeps only their metadata.
    bundle_store: str | None = Field(None, pattern=r"^(file:///|s3://[^/]+)")
    # What one project's bundles may hold in the store (each counts at least 64 KiB); an
    # upload past it is refused (413).
    bundle_quota_bytes: int = Field(1024**3, ge=1024 * 1024)
    # A node refuses a bundle whose files come to more than this once unpacked.
    bundle_unpacked_max_bytes: int = Field(2 * 1024**3, ge=1024 * 1024)
    api_url: str | None = None  # None: read from <home>/api-url written by `corral up`
    api_token: SecretStr | None = None  # None: read from <home>/api-token (mode 0600)
    # Set: GET /metrics needs it as a bearer token (Prometheus's `authorization`); None: open.
    metrics_token: SecretStr | None = None
    api_host: str = "127.0.0.1"
    api_port: int = 0  # 0: a free port
    flower_port: int = 0
    flower_user: str = "corral"
    flower_password: SecretStr | None = None  # None: read from <home>/flower-password
    local_cloud_file: Path = PACKAGED_LOCAL_CLOUD
    # Clouds launches may use (each also needs its credentials from the SDK's usual chain).
    clouds: list[str] = Field(default_factory=lambda: ["local", *CATALOG_CLOUDS])
    aws_endpoint_url: str | None = None  # None: real AWS; tests point it at moto's server
    # `corral catalog update`'s price lists: None: the real AWS Pricing API and Cloud Billing
    # catalog; tests point them at local fakes.
    aws_pricing_endpoint_url: str | None = None
    gcp_billing_endpoint: str | None = None
    # Kubernetes (docs/kubernetes.md): the kubeconfig contexts Corral launches pods in (its
    # regions; none: the current context, or in-cluster inside a pod), their namespaces (its
    # zones), the kubeconfig file (None: KUBECONFIG or ~/.kube/config), and how long a launch
    # waits for the scheduler before an Unschedulable pod counts as no capacity.
    kubernetes_contexts: list[str] = Field(default_factory=list)
    kubernetes_namespaces: list[str] = Field(default_factory=lambda: ["default"])
    kubeconfig: str | None = None
    kubernetes_schedule_wait_s: float = Field(10.0, gt=0, le=600)
    # The image a launch naming none boots: an AMI id or an SSM parameter (ssm:/path). None:
    # Canonical's Ubuntu 22.04, and AWS's Deep Learning Base GPU AMI for GPU launches.
    aws_default_image_id: str | None = None
    aws_default_gpu_image_id: str | None = None  # None: aws_default_image_id, else the above
    gcp_project: str | None = None  # None: the project of the credentials
    gcp_api_endpoint: str | None = None  # None: the real Compute API
    gcp_anonymous: bool = False  # anonymous credentials: only for a fake Compute API in tests
    # The image a launch naming none boots (an image or family, as instances.insert takes it).
    # None: Debian 12's family, and a Deep Learning VM family for GPU machines.
    gcp_default_image: str | None = None
    gcp_default_gpu_image: str | None = None
    log_dir: Path | None = None  # None: <home>/logs
    # Where each local-cloud machine's folder (its HOME, and where its work starts without a
    # workdir) is made: outside <home>, so no task's environment names a path into it.
    # None: <temp dir>/corral-machines-<8 hex digits of the home's path>.
    local_machines_dir: Path | None = None
    # When Corral runs as root, local tasks run as unprivileged users of their own ("own-user":
    # the machines' work as one uid, each pool assignment as another), never as root, so they
    # cannot read <home> (the API token, the Redis password); "corral": as Corral's own user
    # (a host of one's own). Without root they always run as Corral's user (docs/security.md).
    local_tasks_run_as: Literal["own-user", "corral"] = "own-user"
    # The API's address as cloud machines reach it. Set: AWS and Google Cloud machines boot
    # the node agent (installed from ``node_agent_source``), which registers, heartbeats and
    # reports through it. None: they get a blind boot script (setup and run, no reports).
    node_api_url: str | None = None
    # Where a node's boot script installs the agent from: a pip requirement or wheel URL.
    # None: the wheel the API serves at <node_api_url>/v1/node/agent.whl.
    node_agent_source: str | None = None
    # The sha256 (hex) of a wheel given as node_agent_source, checked by the boot script before
    # it unpacks it; the served wheel's hash is known without it. None with a source: a warning.
    node_agent_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    node_secret: SecretStr | None = None  # signs node tokens; None: drawn once, kept in Redis
    node_heartbeat_s: float = 5.0  # how often a cloud node's agent reports
    worker_concurrency: int = 2
    api_max_body_bytes: int = 2 * 1024 * 1024  # a larger request body is refused (413)
    # Sessions (corral attach, port-forward) one user may have open at once; past it, 429.
    sessions_per_user: int = Field(default=8, ge=1)
    # The API server's guards against slow or many clients (services/api/server.py): a
    # request's headers must arrive within header_timeout_s of its first byte, its body
    # within body_timeout_s after; past max_concurrency connections and requests, 503.
    api_header_timeout_s: float = Field(default=10.0, gt=0)
    api_body_timeout_s: float = Field(default=30.0, gt=0)
    api_max_concurrency: int = Field(default=200, ge=1)
    api_keep_alive_s: int = Field(default=5, ge=1)
    # Finished requests, their events and keyed submissions are exported, then deleted, this
    # long after they finished (services/state/retention.py).
    retention_days: float = Field(default=30.0, gt=0)
    retention_export_dir: Path | None = None  # None: <home>/exports
    # Logs and metrics (services/observability). "json": one JSON object per line, with the
    # ids (request, task, pool...) of the work at hand.
    log_format: Literal["text", "json"] = "text"
    metrics_port: int | None = None  # a worker's /metrics port (`--metrics-port`); None: none
    metrics_host: str = "127.0.0.1"  # where a worker's /metrics listens (0.0.0.0 in a pod)
    metrics_dir: Path | None = None  # holds each worker's metric folder; None: the temp dir
    # Set by `corral run worker` for its Celery processes (prometheus_client's own variable).
    prometheus_multiproc_dir: Path | None = Field(
        default=None, validation_alias="PROMETHEUS_MULTIPROC_DIR"
    )
    # Dollar budgets the pool schedulers honour (see shared/budgets.py); None: no budgets.
    budgets_file: Path | None = None
    timers: Timers = Field(default_factory=Timers)
    # Launch limits by cloud or "cloud/region" (CORRAL_LAUNCH_LIMITS as JSON, e.g.
    # '{"aws/us-east-1": {"calls_per_s": 1, "in_flight": 20}}'); both levels apply.
    launch_limits: dict[str, LaunchLimit] = Field(
        default_factory=lambda: dict(DEFAULT_LAUNCH_LIMITS)
    )

    @property
    def logs(self) -> Path:
        return self.log_dir or self.home / "logs"

    def file(self, name: str) -> Path:
        return self.home / name

    @property
    def bundle_store_url(self) -> str:
        """The blob store bundles are kept in (the folder <home>/bundles by default)."""
        return self.bundle_store or (self.home / "bundles").absolute().as_uri()

    @property
    def local_machines(self) -> Path:
        return self.local_machines_dir or default_machines_dir(self.home)

    @property
    def catalog_dir(self) -> Path:
        """Where ``corral catalog update`` writes the catalog that overrides the shipped one."""
        return self.home / "catalog"


def default_machines_dir(home: Path) -> Path:
    """Local machines' folders for the installation at ``home``, outside it (in the temp dir,
    which every user can pass through)."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"corral-machines-{digest}"


def aws_credentials_hint() -> bool:
    """A quick look, without loading boto3, at whether AWS's usual credential chain has
    something to find (environment variables or the SDK's credential files). Launches ask the
    SDK itself; `corral plan` uses this (through the providers' registry) to mark clouds that a
    launch would leave out."""
    home = Path.home()
    keys = (
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    )
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials",
        os.environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config",
    )
    return any(os.environ.get(k) for k in keys) or any(Path(f).is_file() for f in files)


def gcp_credentials_hint() -> bool:
    """The same look for Google Cloud: an explicit key file, or gcloud's default credentials."""
    adc = Path.home() / ".config" / "gcloud" / "application_default_credentials.json"
    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    return bool(explicit and Path(explicit).is_file()) or adc.is_file()


def kubernetes_credentials_hint() -> bool:
    """A kubeconfig file where Corral (CORRAL_KUBECONFIG) or the client looks for one, or a
    service account in a pod."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    named = os.environ.get("CORRAL_KUBECONFIG") or os.environ.get("KUBECONFIG")
    paths = (named or str(Path.home() / ".kube" / "config")).split(":")
    return any(p and Path(p).is_file() for p in paths)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests change the environment between cases)."""
    get_settings.cache_clear()


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment for a process Corral starts: ours plus the settings that matter."""
    env = dict(os.environ)
    env["CORRAL_HOME"] = str(settings.home)
    env["CORRAL_PREFIX"] = settings.prefix
    env["CORRAL_LOCAL_CLOUD_FILE"] = str(settings.local_cloud_file)
    if settings.redis_url:
        env["CORRAL_REDIS_URL"] = settings.redis_url
    if settings.aws_endpoint_url:
        env["CORRAL_AWS_ENDPOINT_URL"] = settings.aws_endpoint_url
    if settings.gcp_api_endpoint:
        env["CORRAL_GCP_API_ENDPOINT"] = settings.gcp_api_endpoint
    env.update(extra)
    return env


def installed_catalog(settings: Settings | None = None) -> Catalog:
    """The catalog this installation plans on: the shipped price lists, with each cloud's list
    that ``corral catalog update`` wrote under <home>/catalog in its place."""
    from corral.shared.catalog import load_catalog

    folder = (settings or get_settings()).catalog_dir
    return load_catalog(folder if folder.is_dir() else None)
