"""What a launch is, as the provider port and the state both speak of it: the spec of one
launch (:class:`LaunchSpec`), an instance as a cloud reports it (:class:`ProviderInstance`) and
a launch the boot watch waits for (:class:`Boot`). Plain records at the bottom of the layers, so
the state (which keeps boots) and the providers (which launch them) both stand on them and
neither imports the other. The port itself is ``corral.services.providers.base``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field

from corral.shared.errors import InvalidRequestError
from corral.shared.placement import Placement, PlacementFields
from corral.shared.records import Instance

# Tags (AWS) / labels (GCP) / agent fields (local) that mark what Corral created.
TAG_MANAGED = "corral-managed"
TAG_REQUEST = "corral-request"
TAG_ATTEMPT = "corral-attempt"
TAG_NODE = "corral-node"  # index of the node inside the request, "0".."n-1"
TAG_POOL = "corral-pool"  # a machine pool's machine: the pool's name
TAG_MACHINE = "corral-machine"  # ... and its machine id in the pool's ledger

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(names: Iterable[str]) -> None:
    """Refuse environment variable names a boot script could not export."""
    bad = sorted(k for k in names if not _ENV_NAME.fullmatch(k))
    if bad:
        raise InvalidRequestError(f"not valid environment variable names: {', '.join(bad)}")


class LaunchSpec(PlacementFields):
    """One attempt: ``count`` instances of one type and market in one zone (its place)."""

    market: str = "on_demand"  # on_demand | spot | reserved
    request_id: str
    attempt_id: str
    count: int = 1
    reservation_id: str | None = None
    accelerators: dict[str, int] = Field(default_factory=dict)  # e.g. GCP N1 guest GPUs
    advanced_instance_config: dict[str, object] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    # What the node runs (the local cloud's agent runs it; real clouds get it as user data).
    setup: str | None = None
    run: str | None = None
    envs: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    # The machine image the task names for this region (resources.image_id); None: the
    # provider's documented default (a GPU image when accelerators are asked for).
    image_id: str | None = None
    # TCP port ranges to open to the world (resources.ports), (first, last) each.
    ports: list[tuple[int, int]] = Field(default_factory=list)
    # The task's files for the node: {"bundle": Bundle as JSON} and/or {"git": {url, ref}}
    # (workdir and file_mounts; shared/bundles.py). The agent puts them in place first.
    files: dict[str, Any] = Field(default_factory=dict)

    @property
    def place(self) -> Placement:
        """Where it launches, its reservation among it."""
        return Placement(
            self.cloud, self.region, self.zone, self.instance_type, self.market, self.reservation_id
        )


class ProviderInstance(PlacementFields):
    """An instance as the provider reports it: its id and where it is."""

    market: str = "on_demand"
    provider_id: str
    state: str  # pending | running | terminating | terminated | lost
    pid: int | None = None  # local cloud only
    address: str | None = None  # where it is reached: a public IP, else a private one
    tags: dict[str, str] = Field(default_factory=dict)
    exit_code: int | None = None  # the task's run exit code once it ended (its agent's report)
    # The machine is about to go: the cloud's warning as its agent relayed it (an EC2 spot
    # interruption notice, a Compute Engine preemption). Recovery starts on it.
    notice: str | None = None
    # Lost only because its agent stopped reporting while the control plane listened: the
    # control plane's inference, not the cloud's word, so it blocks no scope (reconcile).
    silent: bool = False
    # The cloud started (booted) the machine, whatever its agent said: one still pending then
    # has an agent that never registered, a fault of the machine, not of its zone or region.
    started: bool = False


class Boot(BaseModel):
    """One launch the cloud accepted, waited for by the boot watch, not by a worker."""

    kind: Literal["attempt", "pool_machine"]  # whose launch: a request's attempt, a pool's
    spec: LaunchSpec  # what was launched (its attempt id, cloud, zone, count, tags)
    deadline: float  # seconds since the epoch: not all up by then, the attempt timed out
    step: int = -1  # an attempt's position in its request's chain
    pool: str | None = None  # a pool machine's pool ...
    machine_id: str | None = None  # ... and its id in the pool's ledger
    # An attempt's instance rows as its own launch created them (REQUESTED, version 0): the
    # watch starts its compare-and-set from these instead of reading them again (a Redis
    # command less per machine; a row changed since fails the compare-and-set, then is read).
    rows: list[Instance] = Field(default_factory=list)

    @property
    def key(self) -> str:
        return self.spec.attempt_id
