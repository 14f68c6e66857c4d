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

import re
from collections.abc import Iterable
from typing import Protocol

from pydantic import BaseModel, Field

from corral.shared.errors import InvalidRequestError

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


class LaunchSpec(BaseModel):
    """One attempt: ``count`` instances of one type and market in one zone."""

    request_id: str
    attempt_id: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str = "on_demand"  # on_demand | spot | reserved
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


class ProviderInstance(BaseModel):
    """An instance as the provider reports it."""

    provider_id: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str = "on_demand"
    state: str  # pending | running | terminating | terminated | lost
    pid: int | None = None  # local cloud only
    tags: dict[str, str] = Field(default_factory=dict)
    exit_code: int | None = None  # local cloud: the task's run exit code once it ended
    # Lost only because its agent stopped reporting while the control plane listened: the
    # control plane's inference, not the cloud's word, so it blocks no scope (reconcile).
    silent: bool = False


class Provider(Protocol):
    """What every cloud implements. Errors are ``corral.shared.errors.ProviderError``s."""

    name: str
    # How often a caller may poll ``describe`` while waiting for instances to come up.
    poll_interval_s: float

    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]: ...

    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]: ...

    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None: ...

    def has_credentials(self) -> bool: ...
