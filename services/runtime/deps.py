"""What a runtime step needs, built once per process from the settings."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import redis

from corral.services.providers.base import Provider
from corral.services.providers.registry import ProviderUnavailable, build_provider
from corral.services.queues.redis_conn import connect
from corral.services.settings import Settings, get_settings
from corral.services.state.blobs import open_blobs
from corral.services.state.blocks import BlockStore
from corral.services.state.boots import BootBook
from corral.services.state.bundles import BundleStore
from corral.services.state.docstore import DocStore
from corral.services.state.limits import LaunchLimits
from corral.services.state.machines import MachineTable
from corral.services.state.nodes import NodeBook
from corral.services.state.outage import OutageBook, outage_book
from corral.services.state.pool_store import PoolRecord, det_ledgers, pool_ledgers, pool_records
from corral.services.state.store import Store, WriteListener
from corral.services.state.users import AccessBook
from corral.shared.scheduling.det_ledger import DetLedger
from corral.shared.scheduling.ledger import PoolLedger


@dataclass
class Deps:
    settings: Settings
    clock: Callable[[], float] = time.time
    _providers: dict[str, Provider] = field(default_factory=dict)
    # Told of each store write that won (the event metrics): wired by the process that builds
    # the Deps (the API, a worker), since the runtime sits below observability.
    store_listeners: tuple[WriteListener, ...] = ()

    @cached_property
    def redis(self) -> redis.Redis:
        if not self.settings.redis_url:
            raise RuntimeError("CORRAL_REDIS_URL is not set")
        return connect(self.settings.redis_url, patience_s=self.settings.timers.redis_patience_s)

    @cached_property
    def outage(self) -> OutageBook:
        return outage_book(self.redis, self.settings)

    @cached_property
    def store(self) -> Store:
        return Store(self.redis, prefix=self.settings.prefix, listeners=self.store_listeners)

    @cached_property
    def machines(self) -> MachineTable:
        """The machine table's rows (a pool's machines; any row read)."""
        return MachineTable(self.redis, prefix=self.settings.prefix)

    @cached_property
    def blocks(self) -> BlockStore:
        return BlockStore(self.redis, prefix=self.settings.prefix)

    @cached_property
    def boots(self) -> BootBook:
        return BootBook(self.redis, prefix=self.settings.prefix)

    @cached_property
    def nodes(self) -> NodeBook:
        return NodeBook.for_settings(self.redis, self.settings)

    @cached_property
    def bundles(self) -> BundleStore:
        """Task bundles: metadata here in Redis, bytes in the configured blob store."""
        blobs = open_blobs(
            self.settings.bundle_store_url, endpoint_url=self.settings.aws_endpoint_url
        )
        return BundleStore(
            self.redis, self.settings.prefix, blobs, self.settings.bundle_quota_bytes
        )

    @cached_property
    def access(self) -> AccessBook:
        return AccessBook(self.redis, self.settings.prefix)

    @cached_property
    def limits(self) -> LaunchLimits:
        return LaunchLimits(self.redis, self.settings.launch_limits, prefix=self.settings.prefix)

    @cached_property
    def pools(self) -> DocStore[PoolRecord]:
        return pool_records(self.redis, self.settings.prefix)

    @cached_property
    def ledgers(self) -> DocStore[PoolLedger]:
        return pool_ledgers(self.redis, self.settings.prefix)

    @cached_property
    def det_ledgers(self) -> DocStore[DetLedger]:
        return det_ledgers(self.redis, self.settings.prefix)

    @cached_property
    def local_cloud(self) -> Any:
        from corral.shared.config.localcloud import load_local_cloud

        return load_local_cloud(self.settings.local_cloud_file)

    def provider(self, cloud: str) -> Provider:
        """The provider for ``cloud``, built on first use (SDKs load lazily)."""
        if cloud not in self._providers:
            self._providers[cloud] = build_provider(cloud, self.settings, lambda: self.local_cloud)
        return self._providers[cloud]

    def launchable_clouds(self) -> tuple[str, ...]:
        """Clouds with a provider here and credentials for it."""
        clouds = []
        for cloud in self.settings.clouds:
            try:
                if self.provider(cloud).has_credentials():
                    clouds.append(cloud)
            except ProviderUnavailable:
                continue
        return tuple(clouds)

    def now(self) -> float:
        return self.clock()


def new_id(kind: str) -> str:
    """A short unique id such as ``r-3f9a1c2b7d``."""
    return f"{kind}-{secrets.token_hex(5)}"


_DEPS: Deps | None = None
_DEPS_LOCK = threading.Lock()
_STORE_LISTENERS: list[WriteListener] = []


def wire_store_listener(listener: WriteListener) -> None:
    """Have this process's :func:`deps` store tell ``listener`` of its writes (a worker wires
    the event metrics when its app is built, before the first task)."""
    with _DEPS_LOCK:
        _STORE_LISTENERS.append(listener)
        if _DEPS is not None and "store" in _DEPS.__dict__:
            _DEPS.store.listeners = (*_DEPS.store.listeners, listener)
        if _DEPS is not None:
            _DEPS.store_listeners = (*_DEPS.store_listeners, listener)


def deps() -> Deps:
    """This process's dependencies (a worker builds them once, whichever thread asks first)."""
    global _DEPS
    with _DEPS_LOCK:
        if _DEPS is None:
            _DEPS = Deps(get_settings(), store_listeners=tuple(_STORE_LISTENERS))
        return _DEPS
