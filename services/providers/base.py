"""The provider port: a handful of methods with stated guarantees.

Guarantees every provider keeps:
- ``launch`` is idempotent by ``LaunchSpec.attempt_id``: called again with the same attempt
  (a redelivered Celery task), it first looks for what it already created (by tag or label)
  and returns that instead of launching more.
- ``launch`` either returns ``count`` instances or raises a
  :class:`corral.shared.errors.ProviderError` after terminating whatever it got (no partial
  leak for multi-node launches).
- ``describe`` is eventually consistent; ids are unique and never reused.
- ``terminate`` is idempotent: terminating a terminated or unknown id is not an error.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from corral.services.agent import skypilot_env
from corral.shared.catalog.offering import Offering
from corral.shared.errors import InvalidRequestError
from corral.shared.launches import (  # the records the port speaks, re-exported here
    TAG_ATTEMPT,
    TAG_MACHINE,
    TAG_MANAGED,
    TAG_NODE,
    TAG_POOL,
    TAG_REQUEST,
    LaunchSpec,
    ProviderInstance,
    check_env_names,
)

__all__ = [
    "NO_FEATURES",
    "TAG_ATTEMPT",
    "TAG_MACHINE",
    "TAG_MANAGED",
    "TAG_NODE",
    "TAG_POOL",
    "TAG_REQUEST",
    "CatalogOfferings",
    "Features",
    "LaunchSpec",
    "NodeWork",
    "Provider",
    "ProviderInstance",
    "blind_boot_lines",
    "can_stop",
    "check_env_names",
    "checked_assignment",
    "node_work_of",
    "status_view",
    "zones_from",
]


@dataclass(frozen=True)
class Features:
    """What a provider can do beyond the port's methods, declared by the provider itself (its
    ``features``), never probed: the runtime reads these flags, and the methods a feature
    names exist where its flag is True. A new cloud declares what it has; the defaults are a
    cloud that has none of them."""

    # ``stop(ids, zone)`` and ``start(ids, zone)``, each raising a ``ProviderError``: machines
    # kept with their disks and started again. Without: ``corral stop`` is refused and
    # autostop tears down.
    stop: bool = False
    # ``launch`` ends by itself (timeouts of its own): the runtime calls it without a
    # watchdog thread, a hand-over that costs two scheduler waits on a loaded machine.
    bounded_launch: bool = False
    # ``describe_launches(attempt_ids, outage_end=)``: what ``describe`` reports of those
    # launches' machines only, the boot watch's look (not every machine the cloud ran).
    describe_launches: bool = False
    # Its machines' agents register through Corral's HTTP API: an outage of the API holds
    # their boots as an outage of Redis does.
    agents_through_api: bool = False
    # ``subnet_zone(region, subnet_id)``: the zone a subnet named in launch parameters is in
    # (None: no such subnet there), so a launch naming one goes to that zone only.
    subnet_zones: bool = False
    # Its machines share one host's network (the local cloud's are processes on this host):
    # two replicas of a service cannot listen on one port, so each gets its own.
    shared_network: bool = False


NO_FEATURES = Features()


@dataclass(frozen=True)
class CloudCheck:
    """What ``corral check`` says of one cloud: whether Corral can launch there, who it acts
    as (an ARN, a service account, a kubeconfig context), and what was found or what failed."""

    ready: bool
    identity: str | None
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"ready": self.ready, "identity": self.identity, "detail": self.detail}


def credentials_check(provider: Provider) -> CloudCheck:
    """The check of a cloud without one of its own: its provider's credentials look."""
    if provider.has_credentials():
        return CloudCheck(True, None, "credentials found")
    return CloudCheck(False, None, "no credentials found")


class Provider(Protocol):
    """What every cloud implements. Errors are ``corral.shared.errors.ProviderError``s.

    Besides launching, a provider owns what Corral knows of its cloud, so nothing outside
    ``providers/`` names a cloud: its offerings (``offerings``: from a shipped catalog, or
    listed live, so a cloud without a price list plans too), where an instance type can go
    (``zones_of``: the zones offering it, a reservation's own zone), whether its credentials
    are there (``has_credentials``; ``registry.Cloud.credentials_hint`` before
    its SDK loads), its machines' output (``read_log``) and what their agents go by
    (``agent_name``). What it can do beyond these it declares (``features``), and its
    machines' agents, when they run one, are its ``node_work``."""

    name: str
    # How often a caller may poll ``describe`` while waiting for instances to come up.
    poll_interval_s: float

    @property
    def features(self) -> Features:
        """What it can do beyond these methods (a class attribute or one set at init)."""
        ...

    @property
    def node_work(self) -> NodeWork | None:
        """Its machines' agents, which take assignments; None when they run no agent."""
        ...

    def offerings(self) -> Sequence[Offering]:
        """Every (instance type, zone) the cloud sells, with its prices."""
        ...

    def zones_of(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        """(zone, region) pairs where ``instance_type`` can be launched, best first; with a
        reservation the cloud knows, only the reservation's zone."""
        ...

    def read_log(
        self, provider_id: str, attempt_id: str | None, node_index: int, tail_bytes: int
    ) -> bytes:
        """The last ``tail_bytes`` of what the machine's run printed (empty: nothing yet)."""
        ...

    def read_log_since(
        self, provider_id: str, attempt_id: str | None, node_index: int, offset: int
    ) -> tuple[int, bytes]:
        """What the machine's run printed from byte ``offset`` on: (where the bytes start, at
        ``offset`` or later when that part is no longer kept; the bytes). A follower's read."""
        ...

    def read_assignment_log(self, provider_id: str, aid: str, tail_bytes: int) -> bytes:
        """The last ``tail_bytes`` of what assignment ``aid`` printed on a pooled machine: its
        own log stream, apart from the machine's and every other assignment's."""
        ...

    def read_assignment_log_since(
        self, provider_id: str, aid: str, offset: int
    ) -> tuple[int, bytes]:
        """What assignment ``aid`` printed from byte ``offset`` on (a follower's read)."""
        ...

    def agent_name(self, provider_id: str, attempt_id: str | None, node_index: int) -> str:
        """The name the machine's agent takes its commands and sessions under (``corral exec``,
        ``attach``): node ``node_index`` of the attempt that launched it."""
        ...

    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]: ...

    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]: ...

    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None: ...

    def has_credentials(self) -> bool: ...


class CatalogOfferings:
    """The port's offerings and zones for a cloud whose prices ship as a catalog CSV
    (``shared/catalog/data/<name>.csv``): a provider class inherits these."""

    name: str

    def offerings(self) -> Sequence[Offering]:
        from corral.services.settings import installed_catalog

        return tuple(o for o in installed_catalog().offerings if o.cloud == self.name)

    def zones_of(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        # A reservation's zone is the cloud's to enforce (it refuses a launch elsewhere), so
        # every zone offering the type is tried.
        from corral.services.settings import installed_catalog

        # Best first: the cheapest on demand, and the catalog's order among equal prices (a
        # catalog lists regions alphabetically: af-south-1 would come before us-east-1).
        offerings = sorted(
            installed_catalog().instance_type(self.name, instance_type),
            key=lambda o: o.price_usd_per_hour,
        )
        return [(o.zone, o.region) for o in offerings]


def zones_from(offerings: Iterable[Offering], instance_type: str) -> list[tuple[str, str]]:
    """(zone, region) pairs of the offerings of ``instance_type``, each once, in order."""
    pairs = [(o.zone, o.region) for o in offerings if o.instance_type == instance_type]
    return list(dict.fromkeys(pairs))


class NodeWork(Protocol):
    """Machines whose node agents take work and report what they do, by the cloud's id.

    A pooled machine (machine pool, Determined agent) is launched without a ``run`` and takes
    *assignments*: ``{id, setup, run, envs, workdir}``, several at once, each id run once. A
    cloud whose machines run no agent has no NodeWork (:func:`node_work_of` is None)."""

    def assign(self, provider_id: str, assignment: dict[str, Any]) -> None:
        """Hand the machine one more piece of work (its agent starts it on its next beat)."""

    def withdraw(self, provider_id: str, assignment_id: str | None = None) -> None:
        """Take one assignment back (None: all); the agent stops it. Idempotent."""

    def assignment_status(self, provider_id: str) -> dict[str, Any]:
        """``{"assigned": [ids], "running": {id: phase}, "activity", "results": {id: result}}``
        in one look."""

    def report(self, provider_id: str) -> dict[str, Any] | None:
        """The agent's last heartbeat (``activity``, ``queued`` demand, ...), None when it is
        silent."""

    def ended_work(self) -> list[str]:
        """The cloud's ids of the machines whose agents reported an assignment's end (its
        result) since the last call, each once: taken, so one caller sees each report
        (reconcile, which wakes the machine's pool at once)."""

    def hand_job_bundle(self, provider_id: str, scope: str, sha256: str) -> None:
        """A job queued on the machine (``corral exec ID task.yaml``) names a workdir bundle
        of its own, kept under ``scope``: make it readable to the machine's agent (a cloud
        machine fetches it from the API with its node token: nothing to do; the local cloud
        copies it beside the machine's folder)."""


def can_stop(provider: Provider) -> bool:
    """Whether the provider's machines can be stopped and started again (:attr:`Features.stop`).
    A cloud without it: ``corral stop`` is refused, autostop tears down."""
    return provider.features.stop


def node_work_of(provider: Provider) -> NodeWork | None:
    """The provider's machines' agents, if its machines run one (see :class:`NodeWork`)."""
    return provider.node_work


def checked_assignment(assignment: dict[str, Any]) -> dict[str, Any]:
    """An assignment as an agent takes it: ``{id, setup, run, envs, workdir}``, the id a
    non-empty string, the scripts strings or None, envs a mapping of exportable names."""
    aid = assignment.get("id")
    if not isinstance(aid, str) or not aid:
        raise InvalidRequestError("an assignment needs a non-empty string id")
    envs = assignment.get("envs") or {}
    if not isinstance(envs, dict):
        raise InvalidRequestError("an assignment's envs must be a mapping")
    check_env_names(envs)
    fields = {k: assignment.get(k) for k in ("setup", "run", "workdir")}
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"an assignment's {name} must be a string or null")
    return {"id": aid, **fields, "envs": {str(k): str(v) for k, v in envs.items()}}


def status_view(
    assigned: Iterable[str], beat: dict[str, Any] | None, results: dict[str, Any]
) -> dict[str, Any]:
    """:meth:`NodeWork.assignment_status` from what a machine's records hold: the ids assigned,
    the agent's last heartbeat (None when silent) and the results of assignments that ended."""
    running = beat.get("assignments") if beat else None
    return {
        "assigned": sorted(assigned),
        "running": dict(running) if isinstance(running, dict) else {},
        "activity": beat.get("activity") if beat else None,
        "results": results,
    }


def blind_boot_lines(spec: LaunchSpec, envs: dict[str, str], rank: str | None) -> list[str]:
    """The lines of a boot script that runs the task itself (no node agent), after its shell
    options: ``envs`` exported, SkyPilot's names of the node (``rank`` None: one script every
    node shares), then into the workdir, the setup and the run."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in envs.items()]
    lines += skypilot_env.boot_exports(rank, spec.count)
    if spec.workdir:
        lines += [f"mkdir -p {shlex.quote(spec.workdir)}", f"cd {shlex.quote(spec.workdir)}"]
    return lines + [part for part in (spec.setup, spec.run) if part]
