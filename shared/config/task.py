"""A task file: SkyPilot's task YAML, plus Determined's pool fields and Corral's own.

SkyPilot defines most of it (``name``, ``num_nodes``, ``setup``, ``run``, ``envs``, ``resources``
with ``accelerators``, ``ordered`` and ``any_of`` candidates, ...). Determined adds
``resources.resource_pool``, ``resources.slots``, ``resources.priority`` (1-99, lower wins,
default 42) and ``resources.max_slots`` (the most slots the experiment's tasks may hold at
once, a positive integer; no limit when unset). Corral adds a top-level ``priority`` (an
integer, higher wins, default 0: the one direction Corral uses everywhere), ``labels``, and
for later use ``workload_type``, ``compute_config`` and ``scheduling``.

A file that sets only Determined's ``resources.priority`` gets Corral's priority converted from
it: ``corral = 42 - determined`` (det 42 -> 0, det 1 -> 41, det 99 -> -57).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

# Relative imports: `mypy shared` cannot follow `corral.*` through the editable install's finder.
from ..accelerators import AcceleratorRequest, parse_accelerators
from ..autostop import Autostop, parse_autostop
from ..bundles import Bundle, check_target, remote_source_problem
from ..clouds import KNOWN_CLOUDS  # the names a task may write (shared/clouds.py, the one list)
from ..images import DOCKER_PREFIX
from ..ports import parse_ports
from ..readiness import ReadinessProbe, parse_probe
from ..serve.spec import ServiceSpec, parse_service, service_notices
from . import DurationS, one_of
from .base import StrictModel
from .compute_config import ComputeConfig

# Determined's priority scale: 1 (most urgent) .. 99, 42 when unset.
DETERMINED_DEFAULT_PRIORITY = 42
DETERMINED_MIN_PRIORITY = 1
DETERMINED_MAX_PRIORITY = 99

_CLOUD_ALIASES = {"k8s": "kubernetes", "google": "gcp", "amazon": "aws"}

# ``4``, ``4.5``, ``4+``; memory may add a unit (``32GB``, ``512MB``), GiB when absent.
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?b?)?\s*(\+)?\s*$", re.IGNORECASE)
_GIB_PER_UNIT = {"k": 2.0**-20, "m": 2.0**-10, "g": 1.0, "t": 2.0**10, "p": 2.0**20}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables the node agent reads from its work's envs and acts on (a readiness probe, a
# cluster's GCS address, a node's rank): Corral's own, never a task's.
RESERVED_ENV_PREFIX = "CORRAL_"


def _cloud(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, str):
        name = _CLOUD_ALIASES.get(value.strip().lower(), value.strip().lower())
        if name in KNOWN_CLOUDS:
            return name
    raise ValueError(f"expected a cloud name, one of {', '.join(KNOWN_CLOUDS)}; got {value!r}")


CloudName = Annotated[str | None, BeforeValidator(_cloud)]


def _amount(value: object, what: str, units: bool) -> tuple[float, bool]:
    """``(number, at_least)`` from ``4``, ``"4"``, ``"4+"`` (and ``"32GB"`` when units)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {what} like 4 or '4+', got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected {what} >= 0, got {value!r}")
        return float(value), False
    match = _AMOUNT.match(value) if isinstance(value, str) else None
    if match is None or (match.group(2) and not units):
        raise ValueError(f"expected {what} like 4 or '4+', got {value!r}")
    number = float(match.group(1))
    if match.group(2):
        number *= _GIB_PER_UNIT[match.group(2)[0].lower()]
    return number, bool(match.group(3))


def _check_cpus(value: object) -> object:
    if value is not None:
        _amount(value, "a CPU count", units=False)
    return value


def _check_memory(value: object) -> object:
    if value is not None:
        _amount(value, "a memory size in GiB", units=True)
    return value


Amount = str | int | float


# git-clone(1)'s URLs with a scheme (ssh, git, http, https, file: a repository on the node
# itself) and the scp-like [user@]host:path; never a `<transport>::` remote helper (ext:: runs
# a command) and never an option (a leading '-': the node's git would read it as one).
_GIT_URL = re.compile(
    r"^(?:(?:https?|ssh|git|file)://[^\s-][^\s]*"
    r"|(?:[A-Za-z0-9][A-Za-z0-9._-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*:(?!//)[^\s:-][^\s]*)$"
)
# A branch, tag or commit: git's ref characters, not starting with '-'.
_GIT_REF = re.compile(r"^[A-Za-z0-9._/+@{}^~][A-Za-z0-9._/+@{}^~-]*$")
# A docker image reference (name[:tag][@digest], with a registry): not an option either.
_DOCKER_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


def _git_url(value: str) -> str:
    if len(value) > 2048 or not _GIT_URL.match(value):
        raise ValueError(
            "expected a git URL: https://, http://, ssh://, git:// or file://, or "
            "user@host:path (not a transport helper such as ext::, nor starting with '-'); "
            f"got {value!r}"
        )
    return value


def _git_ref(value: str | None) -> str | None:
    if value is not None and (len(value) > 255 or not _GIT_REF.match(value)):
        raise ValueError(
            "expected a branch, tag or commit (letters, digits and ._/+@{}^~-, "
            f"not starting with '-'); got {value!r}"
        )
    return value


def docker_image_problem(image_id: object) -> str | None:
    """Why an ``image_id`` naming a docker image (``docker:<image>``) cannot be used, or None."""
    values = image_id.values() if isinstance(image_id, dict) else [image_id]
    for value in values:
        if not isinstance(value, str) or not value.startswith(DOCKER_PREFIX):
            continue
        image = value[len(DOCKER_PREFIX) :].strip()
        if len(image) > 255 or not _DOCKER_IMAGE.match(image):
            return (
                "expected docker:<image> with an image reference (name[:tag][@digest], "
                f"letters, digits and ._/:@-, not starting with '-'); got {value!r}"
            )
    return None


class WorkdirRepo(StrictModel):
    """SkyPilot's git form of ``workdir``: a repository and an optional ref."""

    url: Annotated[str, AfterValidator(_git_url)]
    ref: Annotated[str | None, AfterValidator(_git_ref)] = None


RECOVERY_STRATEGIES = ("FAILOVER", "EAGER_NEXT_REGION")


def _strategy(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().upper() in RECOVERY_STRATEGIES:
        return value.strip().upper()
    raise ValueError(f"expected one of {', '.join(RECOVERY_STRATEGIES)}; got {value!r}")


def _exit_codes(value: object) -> object:
    """``33`` or ``[33, 34]``: exit codes 0..255, as a list."""
    codes = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(codes, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes
    ):
        raise ValueError(f"expected an exit code 0..255 or a list of them, got {value!r}")
    return codes


class JobRecovery(StrictModel):
    """SkyPilot's ``resources.job_recovery`` (a managed job's recovery): ``strategy`` is where a
    recovered job goes (``EAGER_NEXT_REGION``, the default: other regions first;
    ``FAILOVER``: its own region first); a failed run restarts up to ``max_restarts_on_errors``
    times, and always when it exits with one of ``recover_on_exit_codes``. The string form
    (``job_recovery: FAILOVER``) names the strategy only."""

    strategy: Annotated[str | None, BeforeValidator(_strategy)] = None
    max_restarts_on_errors: int = Field(0, ge=0)
    recover_on_exit_codes: Annotated[list[int], BeforeValidator(_exit_codes)] = Field(
        default_factory=list
    )

    @model_validator(mode="before")
    @classmethod
    def _strategy_only(cls, data: Any) -> Any:
        return {"strategy": data} if isinstance(data, str) else data


def _no_recovery(value: object) -> object:
    """SkyPilot's ``job_recovery: none`` (or ``strategy: none``): no ``job_recovery`` at all,
    as SkyPilot's ``sky/resources.py`` reads it (a strategy of ``none`` sets the resources'
    job_recovery to None, the rest of the section with it). So a failed run is not restarted,
    and a lost machine is relaunched as without the section: within ``relaunch_limit``."""
    strategy = value.get("strategy") if isinstance(value, dict) else value
    if isinstance(strategy, str) and strategy.strip().lower() == "none":
        return None
    return value


def _positive_int(value: object) -> object:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError(
        "expected a positive integer: the most slots the experiment's tasks may hold at once "
        f"(leave it out for no limit); got {value!r}"
    )


class Resources(StrictModel):
    """One node's requirements, or (with ``ordered``/``any_of``) a set of candidates."""

    # Where.
    cloud: CloudName = None
    infra: str | None = None  # SkyPilot's newer "cloud/region/zone" spelling
    region: str | None = None
    zone: str | None = None
    # What.
    instance_type: str | None = None
    accelerators: str | dict[str, Any] | list[Any] | None = None  # as written; see request
    accelerator_args: dict[str, Any] | None = None
    cpus: Annotated[Amount | None, BeforeValidator(_check_cpus)] = None
    memory: Annotated[Amount | None, BeforeValidator(_check_memory)] = None
    use_spot: bool | None = None
    # A managed job's recovery (SkyPilot): restarts on errors and listed exit codes.
    job_recovery: Annotated[JobRecovery | None, BeforeValidator(_no_recovery)] = None
    # The older name of job_recovery: read as job_recovery (never held here).
    spot_recovery: str | dict[str, Any] | None = None
    disk_size: int | str | None = None
    disk_tier: Annotated[
        str | None, BeforeValidator(one_of(("low", "medium", "high", "ultra", "best")))
    ] = None
    network_tier: Annotated[str | None, BeforeValidator(one_of(("standard", "best")))] = None
    local_disk: str | None = None
    max_hourly_cost: float | None = Field(None, gt=0)
    ports: int | str | list[int | str] | None = None
    labels: dict[str, str] | None = None
    image_id: str | dict[str, str] | None = None
    autostop: bool | int | float | str | dict[str, Any] | None = None
    priority_class: str | None = None
    volumes: list[dict[str, Any]] | None = None
    ephemeral_storage: int | str | None = None
    # Candidates: each item is a Resources that overrides the fields above.
    ordered: list[Resources] | None = None
    any_of: list[Resources] | None = None
    # Determined.
    resource_pool: str | None = None
    slots: int | None = Field(None, ge=0)
    priority: int | None = None  # Determined's: 1..99, lower wins
    # Determined's: the most slots the experiment (the task's group) may hold at once.
    max_slots: Annotated[int | None, BeforeValidator(_positive_int)] = None

    @model_validator(mode="before")
    @classmethod
    def _spot_recovery_is_job_recovery(cls, data: Any) -> Any:
        """SkyPilot reads the deprecated ``spot_recovery`` as ``job_recovery`` (its
        ``Resources.from_yaml_config``; its schema lets a file write one of the two)."""
        if not isinstance(data, dict) or data.get("spot_recovery") is None:
            return data
        if data.get("job_recovery") is not None:
            raise ValueError("give either job_recovery or its older name spot_recovery, not both")
        rest = {k: v for k, v in data.items() if k != "spot_recovery"}
        return {**rest, "job_recovery": data["spot_recovery"]}

    @field_validator("image_id")
    @classmethod
    def _image(cls, value: object) -> object:
        problem = docker_image_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("ports")
    @classmethod
    def _ports_parse(cls, value: Any) -> Any:
        parse_ports(value)  # raises ValueError with the expected forms
        return value

    @field_validator("autostop")
    @classmethod
    def _autostop_parse(cls, value: Any) -> Any:
        parse_autostop(value)  # raises ValueError with the expected forms
        return value

    def autostop_policy(self) -> Autostop | None:
        """``autostop`` parsed (None: off)."""
        return parse_autostop(self.autostop)

    @field_validator("accelerators")
    @classmethod
    def _accelerators_parse(cls, value: Any) -> Any:
        parse_accelerators(value)  # raises ValueError with the expected forms
        return value

    @field_validator("priority")
    @classmethod
    def _determined_priority(cls, value: int | None) -> int | None:
        if value is not None and not DETERMINED_MIN_PRIORITY <= value <= DETERMINED_MAX_PRIORITY:
            raise ValueError(
                "expected Determined's priority, an integer from 1 (most urgent) to 99 "
                f"(least); Corral's own top-level priority is higher-wins. Got {value}"
            )
        return value

    @field_validator("max_slots")
    @classmethod
    def _max_slots_holds_the_task(cls, value: int | None, info: ValidationInfo) -> int | None:
        slots = info.data.get("slots")
        if value is not None and slots is not None and slots > value:
            raise ValueError(
                f"expected a positive integer no smaller than slots ({slots}): a task asking "
                f"more than max_slots could never start; got {value}"
            )
        return value

    @field_validator("ordered", "any_of")
    @classmethod
    def _flat_candidates(cls, value: list[Resources] | None) -> list[Resources] | None:
        if value is not None and not value:
            raise ValueError("expected at least one candidate")
        for item in value or ():
            if item.ordered is not None or item.any_of is not None:
                raise ValueError("a candidate cannot hold its own ordered/any_of list")
        return value

    @model_validator(mode="after")
    def _where(self) -> Resources:
        if self.ordered is not None and self.any_of is not None:
            raise ValueError("give either ordered or any_of, not both")
        if self.infra is not None:
            parts = split_infra(self.infra)
            written = (self.cloud, self.region, self.zone)
            # Idempotent on purpose: pydantic may run this twice on a self-referencing model.
            if written != (None, None, None) and written != parts:
                raise ValueError("give either infra or cloud/region/zone, not both")
            self.cloud, self.region, self.zone = parts
        return self

    def accelerator_request(self) -> AcceleratorRequest | None:
        """The accelerators these resources ask for, parsed (None when unset)."""
        return parse_accelerators(self.accelerators)

    def min_cpus(self) -> float | None:
        """The least vCPU count acceptable (``4`` and ``"4+"`` both mean at least 4)."""
        return None if self.cpus is None else _amount(self.cpus, "cpus", units=False)[0]

    def min_memory_gib(self) -> float | None:
        """The least memory acceptable, in GiB (``"16"`` and ``"16+"`` both mean >= 16)."""
        return None if self.memory is None else _amount(self.memory, "memory", units=True)[0]

    def candidates(self) -> list[Resources]:
        """The candidate resources, each with the fields set here filled in underneath.

        Without ``ordered``/``any_of`` that is just ``[self]``. A field a candidate sets wins
        over the same field set at this level, as in SkyPilot.
        """
        items = self.ordered if self.ordered is not None else self.any_of
        if not items:
            return [self]
        base = self.model_dump(exclude={"ordered", "any_of", "infra"}, exclude_unset=True)
        out = []
        for item in items:
            # exclude_none: a part a candidate's infra leaves open must not blank the base's.
            own = item.model_dump(exclude={"infra"}, exclude_unset=True, exclude_none=True)
            merged = {**base, **own}
            out.append(Resources.model_validate(merged))
        return out


def split_infra(infra: str) -> tuple[str | None, str | None, str | None]:
    """``aws/us-east-1/us-east-1a`` -> its parts; ``*`` is any; ``k8s/ctx`` is a context."""
    head, _, rest = infra.strip().partition("/")
    if head.lower() in {"k8s", "kubernetes"}:
        return "kubernetes", rest or None, None
    parts = [head, *rest.split("/")] if rest else [head]
    if len(parts) > 3:
        raise ValueError(
            f"expected infra like aws, aws/us-east-1 or aws/us-east-1/us-east-1a, got {infra!r}"
        )
    parts += [""] * (3 - len(parts))
    cloud, region, zone = (None if p in {"", "*"} else p for p in parts)
    return (str(_cloud(cloud)) if cloud else None), region, zone


class Scheduling(StrictModel):
    """Corral's scheduling wishes (read now, acted on by a later issue)."""

    preemptible: bool | None = None
    on_full: Annotated[str | None, BeforeValidator(one_of(("fallback", "preempt")))] = None
    fallback_pools: list[str] = Field(default_factory=list)


def _env_value(value: object) -> object:
    """Env values as text: YAML reads ``PORT: 8080`` as a number and ``X:`` as null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


EnvValue = Annotated[str, BeforeValidator(_env_value)]


class Task(StrictModel):
    """A unit of work: SkyPilot's task YAML plus Determined's and Corral's fields."""

    name: str | None = None
    workdir: str | WorkdirRepo | None = None
    num_nodes: int = Field(1, ge=1)  # all nodes, the head included
    resources: Resources = Field(default_factory=Resources)
    setup: str | None = None
    run: str | None = None
    envs: dict[str, EnvValue] = Field(default_factory=dict)
    # Corral's own.
    priority: int = 0  # higher wins; converted from resources.priority when only that is set
    labels: dict[str, str] = Field(default_factory=dict)
    workload_type: Annotated[
        Literal["job", "service", "workspace"] | None,
        BeforeValidator(one_of(("job", "service", "workspace"))),
    ] = None
    compute_config: ComputeConfig | str | None = None  # inline, or a file path
    # Corral's own: the provider's launch parameters, passed through as written (an AWS
    # RunInstances mapping, a GCP instance body); used on the cloud the task pins.
    advanced_instance_config: dict[str, Any] | None = None
    scheduling: Scheduling | None = None
    # An exhausted failover chain: wait for capacity and walk it again (SkyPilot's
    # --retry-until-up, Corral's default), or fail at once (false: `corral launch --fail-fast`);
    # give up once max_wait has passed since the request started looking (none: never).
    retry_until_up: bool = True
    max_wait: DurationS | None = Field(None, gt=0)
    # Local folders and files copied to the nodes (a remote path -> a local one); corral
    # launch packs them with the workdir into ``bundle``.
    file_mounts: dict[str, Any] | None = None
    bundle: Bundle | None = None  # written by corral launch: what it uploaded and where it goes
    # SkyPilot's secrets: environment variables whose values are never shown (a name with no
    # value, or a list of names, is given at launch: `corral launch --secret NAME`).
    secrets: dict[str, EnvValue | None] | list[str] | None = None
    # SkyPilot fields noticed (compat.skypilot), and the service section.
    file_mounts_mapping: dict[str, Any] | None = None
    managed_secrets: list[Any] | None = None
    volumes: dict[str, Any] | None = None
    volume_mounts: list[dict[str, Any]] | None = None
    service: dict[str, Any] | None = None
    pool: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    event_callback: str | None = None
    inputs: dict[str, float] | None = None
    outputs: dict[str, float] | None = None
    api_server_access: bool | None = None

    @field_validator("file_mounts")
    @classmethod
    def _mount_targets(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        placed: dict[str, Any] = {}
        for target, source in value.items():
            where = check_target(target)  # a relative target: under ~/sky_workdir
            problem = remote_source_problem(source)
            if problem:
                raise ValueError(f"{target}: {problem}")
            if where in placed:
                raise ValueError(f"{target}: the same place as another target ({where})")
            placed[where] = source
        return placed

    @field_validator("service")
    @classmethod
    def _service(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # SkyServe's section (docs/services.md): each field honoured, noticed or refused.
        parse_service(value)
        return value

    @model_validator(mode="after")
    def _service_port(self) -> Task:
        spec = self.service_spec()
        if spec is None:
            return self
        ports = parse_ports(self.resources.ports)
        if spec.port is not None and not any(lo <= spec.port <= hi for lo, hi in ports):
            # service.ports is the replicas' port: opened as resources.ports would be.
            self.resources.ports = [*(f"{lo}-{hi}" for lo, hi in ports), spec.port]
        return self

    def service_spec(self) -> ServiceSpec | None:
        """``service:`` as Corral acts on it (None without one)."""
        return parse_service(self.service)

    def service_port(self) -> int | None:
        """The port a service's replicas serve on: ``service.ports``, else the first of
        ``resources.ports`` (None without ports)."""
        spec = self.service_spec()
        if spec is not None and spec.port is not None:
            return spec.port
        ports = parse_ports(self.resources.ports)
        return ports[0][0] if ports else None

    def readiness_probe(self) -> ReadinessProbe | None:
        """``service.readiness_probe`` parsed (None without one)."""
        return parse_probe((self.service or {}).get("readiness_probe"))

    def done_otherwise(self) -> list[tuple[tuple[str | int, ...], str]]:
        """``service:`` fields Corral accepts and acts on otherwise (shared/serve/spec.py)."""
        return [(("service", *path), text) for path, text in service_notices(self.service)]

    def autostop(self) -> Autostop | None:
        """``resources.autostop`` parsed (None: the machine never stops for idleness)."""
        return self.resources.autostop_policy()

    @field_validator("envs")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_NAME.match(key):
                raise ValueError(f"expected environment variable names like MY_VAR, got {key!r}")
        return value

    @field_validator("secrets")
    @classmethod
    def _secret_names(
        cls, value: dict[str, str | None] | list[str] | None
    ) -> dict[str, str | None] | list[str] | None:
        for key in value or ():
            if not _ENV_NAME.match(key):
                raise ValueError(f"expected environment variable names like MY_KEY, got {key!r}")
        return value

    def unset_secrets(self) -> list[str]:
        """The secrets named without a value (to be given at launch)."""
        if isinstance(self.secrets, list):
            return list(self.secrets)
        return [k for k, v in (self.secrets or {}).items() if v is None]

    def run_envs(self) -> dict[str, str]:
        """What the machine's setup and run see: ``envs``, then ``secrets`` over them (as in
        SkyPilot, a secret wins over an env of the same name)."""
        envs = {k: str(v) for k, v in self.envs.items()}
        if isinstance(self.secrets, dict):
            envs.update({k: v for k, v in self.secrets.items() if v is not None})
        return envs

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Cross-field mistakes, each with its path: envs or secrets naming Corral's own
        variables (``CORRAL_*``, which the node agent reads and acts on), a replicated service
        without a port. Corral's own tasks (a
        cluster's nodes) are built without this check; a submitted task is refused."""
        found: list[tuple[tuple[str | int, ...], str]] = [
            (
                (field, name),
                f"{name!r}: variables starting with {RESERVED_ENV_PREFIX} are Corral's own "
                "(the node agent acts on them); rename it",
            )
            for field, names in (("envs", list(self.envs)), ("secrets", list(self.secrets or ())))
            for name in names
            if name.upper().startswith(RESERVED_ENV_PREFIX)
        ]
        spec = self.service_spec()
        if spec is not None and spec.replicated and self.service_port() is None:
            found.append(
                (
                    ("service",),
                    "replicas / replica_policy need a port for the load balancer to reach the "
                    "replicas: set service.ports or resources.ports",
                )
            )
        return found

    @model_validator(mode="after")
    def _convert_priority(self) -> Task:
        if "priority" not in self.model_fields_set and self.resources.priority is not None:
            self.priority = determined_to_corral_priority(self.resources.priority)
        return self

    def recovery(self) -> JobRecovery | None:
        """The task's ``job_recovery``: on its resources, else on the first candidate that
        sets one."""
        if self.resources.job_recovery is not None:
            return self.resources.job_recovery
        return next((c.job_recovery for c in self.resources.candidates() if c.job_recovery), None)

    def slots(self) -> int:
        """Slots the task asks for: ``resources.slots``, else the accelerator count of the
        first option (of the first candidate that names accelerators), else 1."""
        if self.resources.slots is not None:
            return self.resources.slots
        for candidate in self.resources.candidates():
            request = candidate.accelerator_request()
            if request is not None:
                return request.options[0].count
        return 1


def determined_to_corral_priority(determined: int) -> int:
    """Determined's 1..99 (lower wins, 42 default) -> Corral's (higher wins, 0 default)."""
    return DETERMINED_DEFAULT_PRIORITY - determined
