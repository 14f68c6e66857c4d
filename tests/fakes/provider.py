"""A provider for unit tests of the runtime steps: it records every call, plays the errors a
test queues for it, is idempotent by attempt id like the real ones, and boots its machines
after a set delay on a clock the test moves."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    Features,
    LaunchSpec,
    NodeWork,
    ProviderInstance,
)
from corral.shared.errors import ProviderError


@dataclass
class FakeProvider:
    name: str = "local"
    boot_delay_s: float = 0.0  # machines report "pending" this long after their launch
    # Zones whose machines the cloud starts (``started``) but whose agents never register:
    # they report "pending" for ever (a boot script that stopped early).
    mute_zones: set[str] = field(default_factory=set)
    now: float = 0.0  # the fake's clock: a test moves it (``advance``)
    poll_interval_s: float = 0.0
    calls: list[tuple[str, Any]] = field(default_factory=list)
    machines: dict[str, ProviderInstance] = field(default_factory=dict)
    _booted_at: dict[str, float] = field(default_factory=dict)
    _errors: list[tuple[str | None, ProviderError]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    # The local cloud file it stands in for (its offerings and zones); set by the test's Deps.
    local_cloud: Any = None
    logs: dict[str, bytes] = field(default_factory=dict)  # what a machine printed, by its id
    # The port's declared features: none (a test gives it some), and no agents to take work.
    features: Features = field(default_factory=Features)
    node_work: NodeWork | None = None

    # --- what a test does ----------------------------------------------------------------
    def fail_next(self, error: ProviderError, zone: str | None = None) -> None:
        """The next launch (in ``zone``, or anywhere) raises ``error``."""
        self._errors.append((zone, error))

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def lose(self, provider_id: str) -> None:
        """The machine dies behind Corral's back."""
        self.machines[provider_id] = self.machines[provider_id].model_copy(update={"state": "lost"})

    def exit(self, provider_id: str, code: int) -> None:
        """The machine's job ends with ``code`` (its agent's last report)."""
        update = {"state": "terminated", "exit_code": code}
        self.machines[provider_id] = self.machines[provider_id].model_copy(update=update)

    def start_stray(self, tags: dict[str, str]) -> str:
        """A machine tagged as Corral's that no record knows."""
        pid = f"fk-{next(self._ids)}"
        self.machines[pid] = ProviderInstance(
            provider_id=pid, cloud=self.name, region="r", zone="z", instance_type="cpu-2",
            state="running", tags={TAG_MANAGED: "true", **tags},
        )  # fmt: skip
        return pid

    def launched(self) -> list[LaunchSpec]:
        return [args for name, args in self.calls if name == "launch"]

    # --- the provider port -----------------------------------------------------------------
    def has_credentials(self) -> bool:
        return True

    def offerings(self) -> list[Any]:
        return self.local_cloud.offerings() if self.local_cloud is not None else []

    def zones_of(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        if self.local_cloud is None:
            return []
        pairs: list[tuple[str, str]] = self.local_cloud.placements(instance_type, reservation_id)
        return pairs

    def read_log(
        self, provider_id: str, attempt_id: str | None, node_index: int, tail_bytes: int
    ) -> bytes:
        return self.logs.get(provider_id, b"")[-tail_bytes:]

    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]:
        self.calls.append(("launch", spec))
        mine = [m for m in self.machines.values() if m.tags.get(TAG_ATTEMPT) == spec.attempt_id]
        if mine:
            return self._now(mine)  # a redelivered launch: what it already created
        for i, (zone, error) in enumerate(self._errors):
            if zone in (None, spec.zone):
                del self._errors[i]
                raise error
        out = []
        for node in range(spec.count):
            pid = f"fk-{next(self._ids)}"
            tags = {
                **spec.tags,
                TAG_MANAGED: "true",
                TAG_REQUEST: spec.request_id,
                TAG_ATTEMPT: spec.attempt_id,
                TAG_NODE: spec.tags.get(TAG_NODE, str(node)),
            }
            self.machines[pid] = ProviderInstance(
                provider_id=pid,
                cloud=self.name,
                region=spec.region,
                zone=spec.zone,
                instance_type=spec.instance_type,
                market=spec.market,
                state="pending",
                tags=tags,
            )
            self._booted_at[pid] = self.now + self.boot_delay_s
            out.append(self.machines[pid])
        return self._now(out)

    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]:
        self.calls.append(("describe", tags))
        wanted = tags or {}
        found = [
            m for m in self.machines.values() if all(m.tags.get(k) == v for k, v in wanted.items())
        ]
        return self._now(found)

    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None:
        self.calls.append(("terminate", list(provider_ids)))
        for pid in provider_ids:
            if pid in self.machines:
                self.machines[pid] = self.machines[pid].model_copy(update={"state": "terminated"})

    def _now(self, machines: list[ProviderInstance]) -> list[ProviderInstance]:
        """Machines as they are at the fake's clock: booted ones running."""
        out = []
        for m in machines:
            if m.state == "pending" and self.now >= self._booted_at.get(m.provider_id, 0.0):
                update: dict[str, Any] = {"started": True}
                if m.zone not in self.mute_zones:
                    update["state"] = "running"
                m = self.machines[m.provider_id] = m.model_copy(update=update)
            out.append(m)
        return out
