"""Gauges of Corral's state, computed from Redis each time Prometheus scrapes the API.

State lives in Redis and any number of processes change it, so a gauge kept in one process's
memory would be wrong as soon as a second process moved a request. Computing at scrape time
from the store is right by construction and costs one scrape's reads: index sizes for counts,
and the records of live work only (requests and instances not yet ended, pool ledgers), never
the ended history, which only grows.

Only the API serves these (every API replica the same values: aggregate them with ``max``);
workers serve their own event counters (:mod:`.events`).

A scrape's reads are kept for :data:`SCRAPE_REUSE_S` seconds and scrapes in that time (or
waiting for the one in progress) are answered from them: a read of every live request per
call costs the same whoever calls, so calls in a burst cost one read. Prometheus scrapes every
15-60 s; what it sees is at most that many seconds old.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.services.providers.registry import registered_clouds
from corral.services.queues import dispatch
from corral.services.queues.redis_conn import connect
from corral.services.runtime.deps import Deps
from corral.services.runtime.planning import catalog_for
from corral.services.runtime.pooled.registry import pool_view
from corral.services.settings import installed_catalog
from corral.shared.blocking import Block
from corral.shared.catalog import Catalog
from corral.shared.configio import ConfigError
from corral.shared.lifecycle import (
    INSTANCE_STATES,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_REQUEST_STATES,
    RequestState,
)

log = logging.getLogger("corral.metrics")

LIVE_REQUEST_STATES = tuple(s for s in RequestState if s not in TERMINAL_REQUEST_STATES)
# Every live instance is billed: a cloud bills from the accepted call until the machine is gone.
LIVE_INSTANCE_STATES = tuple(s for s in INSTANCE_STATES if s not in TERMINAL_INSTANCE_STATES)
BILLED_MACHINE_STATUSES = frozenset({"launching", "up", "retiring", "reaping"})

# (name, help, labels) of every gauge this collector yields, in the order it yields them.
GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("corral_store_up", "1 when Redis answered this scrape, 0 when it did not.", ()),
    ("corral_requests", "Launch requests in each state (every request ever kept).", ("state",)),
    (
        "corral_requests_live",
        "Launch requests not yet ended, by route (direct, machine_pool, determined) and state.",
        ("route", "state"),
    ),
    (
        "corral_instances",
        "Machines of Corral's own launches not yet ended (pool machines are "
        "corral_pool_machines), by cloud, market and state.",
        ("cloud", "market", "state"),
    ),
    (
        "corral_cost_usd_per_hour",
        "List price per hour of every machine launched and not yet gone (own instances, pool "
        "machines and agents whose type is known); reserved capacity at its on-demand price.",
        ("cloud", "market"),
    ),
    (
        "corral_blocked_scopes",
        "Scopes remembered as failing (skipped by every launch until they expire), by cloud, "
        "breadth (zone, shortfall, quota_family, region, instance_type, cloud) and the "
        "outcome that blocked them.",
        ("cloud", "scope", "outcome"),
    ),
    (
        "corral_queue_messages",
        "Messages waiting in each Celery queue (the Redis list a KEDA scaler reads).",
        ("queue", "role"),
    ),
    (
        "corral_queue_unacked_messages",
        "Messages delivered to a worker and not yet acknowledged (running, or held for a "
        "countdown).",
        (),
    ),
    (
        "corral_redis_used_memory_bytes",
        "Memory Redis uses (INFO memory's used_memory): Corral's state, queues and caches.",
        (),
    ),
    (
        "corral_redis_maxmemory_bytes",
        "Redis's memory limit (maxmemory; 0: none). At the limit, with Corral's noeviction "
        "policy, every write is refused: alert well before.",
        (),
    ),
    (
        "corral_beat_lag_seconds",
        "How long each beat entry has been past due (0 while beat keeps time).",
        ("entry",),
    ),
    (
        "corral_pool_partition_size_machines",
        "Machines a machine pool's partition may hold.",
        ("pool", "machine_type", "partition"),
    ),
    (
        "corral_pool_partition_held_machines",
        "Machines a machine pool's partition holds now (launching, up, on their way out).",
        ("pool", "machine_type", "partition"),
    ),
    (
        "corral_pool_machines",
        "Machines of machine pools and agents of Determined pools, by cloud, market and status.",
        ("pool", "cloud", "market", "status"),
    ),
    (
        "corral_pool_workloads",
        "Workloads (machine pools) and tasks (Determined pools) by phase.",
        ("pool", "phase"),
    ),
    (
        "corral_determined_slots",
        "Slots of a Determined resource pool's agents, and those held by tasks.",
        ("master", "resource_pool", "kind"),
    ),
)

PROBE_PATIENCE_S = 1.0
SCRAPE_REUSE_S = 5.0


class StateCollector(Collector):
    """A prometheus_client collector reading Corral's state through ``deps`` at scrape time."""

    def __init__(
        self,
        deps: Deps,
        reuse_s: float = SCRAPE_REUSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deps = deps
        self._probe: Any = None
        self._reuse_s = reuse_s
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: tuple[float, list[Metric]] | None = None  # (read at, the families read)

    def _store_answers(self) -> bool:
        """One PING with a short patience: a scrape (Prometheus gives it 10 s by default)
        says the store is down within seconds (a paused Redis too) rather than waiting out the
        clients' outage patience."""
        url = self.deps.settings.redis_url
        if not url:
            return False
        if self._probe is None:
            self._probe = connect(
                url,
                patience_s=PROBE_PATIENCE_S,
                socket_timeout_s=PROBE_PATIENCE_S,
            )
        try:
            return bool(self._probe.ping())
        except Exception:  # any failure to answer is "down", never a failed scrape
            return False

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, doc, labels=list(labels)) for name, doc, labels in GAUGES]

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # a scrape arriving during another waits for its reads
            kept = self._kept
            if kept is None or self._clock() - kept[0] >= self._reuse_s:
                kept = self._kept = (self._clock(), list(self._collect()))
        yield from kept[1]

    def _collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(name, doc, labels=list(labels)) for name, doc, labels in GAUGES
        }
        try:
            if not self._store_answers():
                raise ConnectionError("no answer to PING")
            self._read(families)
            families["corral_store_up"].add_metric([], 1)
        except Exception as exc:  # a scrape must answer, and say the store is unreadable
            log.warning("metrics: could not read the store: %s", type(exc).__name__)
            families = {"corral_store_up": families["corral_store_up"]}
            families["corral_store_up"].add_metric([], 0)
        yield from families.values()

    # -- the reads ------------------------------------------------------------------------
    def _read(self, f: dict[str, GaugeMetricFamily]) -> None:
        deps = self.deps
        now = deps.now()
        cost: dict[tuple[str, str], float] = defaultdict(float)
        catalog = _catalog(deps)
        for state in RequestState:
            f["corral_requests"].add_metric([state.value], deps.store.count_requests(state))
        live = Tally(
            (r.route.kind, r.state.value)
            for state in LIVE_REQUEST_STATES
            for r in deps.store.list_requests(state, limit=deps.store.count_requests(state))
        )
        _add(f["corral_requests_live"], live)
        instances: Tally[tuple[str, str, str]] = Tally()
        for inst in deps.store.list_instances(states=LIVE_INSTANCE_STATES):
            if inst.machine_type is not None:
                continue  # a pool assignment: the machine is counted from its pool's ledger
            instances[(inst.cloud, inst.market, inst.state.value)] += 1
            cost[(inst.cloud, inst.market)] += _price(
                catalog, inst.cloud, inst.instance_type, inst.region, inst.zone, inst.market
            )
        _add(f["corral_instances"], instances)
        _add(
            f["corral_blocked_scopes"],
            Tally(_block_labels(b.block, b.outcome) for b in deps.blocks.active(now)),
        )
        self._queues(f)
        memory = deps.redis.info("memory")
        f["corral_redis_used_memory_bytes"].add_metric([], float(memory.get("used_memory", 0)))
        f["corral_redis_maxmemory_bytes"].add_metric([], float(memory.get("maxmemory", 0)))
        self._beat(f, now)
        self._pools(f, cost, catalog)
        _add(f["corral_cost_usd_per_hour"], cost)

    def _queues(self, f: dict[str, GaugeMetricFamily]) -> None:
        pipe = self.deps.redis.pipeline(transaction=False)
        roles = dispatch.role_queues(registered_clouds())
        names = [(q, role) for role, queues in roles.items() for q in queues]
        for queue, _role in names:
            pipe.llen(queue)  # kombu's Redis transport keeps a queue as a list of that name
        pipe.hlen("unacked")  # and delivered, unacknowledged messages in this hash
        *lengths, unacked = pipe.execute()
        for (queue, role), length in zip(names, lengths, strict=True):
            f["corral_queue_messages"].add_metric([queue, role], int(length))
        f["corral_queue_unacked_messages"].add_metric([], int(unacked))

    def _beat(self, f: dict[str, GaugeMetricFamily], now: float) -> None:
        # celery-redbeat keeps every entry's next due time as its score in one sorted set; the
        # prefix is the one workers/app.py gives redbeat_key_prefix.
        prefix = f"{self.deps.settings.prefix}:redbeat:"
        entries: list[tuple[Any, float]] = self.deps.redis.zrange(  # type: ignore[assignment]
            f"{prefix}:schedule", 0, -1, withscores=True
        )
        for member, due in entries:
            key = member.decode() if isinstance(member, bytes) else str(member)
            if due >= 0:  # redbeat scores an entry that never runs again below zero
                f["corral_beat_lag_seconds"].add_metric(
                    [key.removeprefix(prefix)], max(0.0, now - float(due))
                )

    def _pools(
        self, f: dict[str, GaugeMetricFamily], cost: dict[tuple[str, str], float], catalog: Catalog
    ) -> None:
        deps = self.deps
        machines: Tally[tuple[str, str, str, str]] = Tally()
        for name in deps.pools.names():
            view = pool_view(deps, name)
            for mt in view.get("machine_types") or ():
                for p in mt["partitions"]:
                    labels = [name, mt["machine_type"], p["name"]]
                    f["corral_pool_partition_size_machines"].add_metric(labels, p["size"])
                    f["corral_pool_partition_held_machines"].add_metric(labels, p["held"])
            phases = Tally(w["phase"] for w in view["workloads"])
            _add(f["corral_pool_workloads"], Tally({(name, k): v for k, v in phases.items()}))
            ledger: Any = (
                deps.ledgers.get(name)
                if view["kind"] == "machine_pool"
                else deps.det_ledgers.get(name)
            )
            found = ledger.machines if view["kind"] == "machine_pool" else ledger.agents
            found = (found or {}) if ledger is not None else {}
            markets = {mt["machine_type"]: mt["market"] for mt in view.get("machine_types") or ()}
            # Where each machine that came up is: its row of the machine table.
            rows = deps.machines.get_many(k for k, m in found.items() if m.status != "launching")
            for key, m in found.items():
                row = rows.get(key) if m.status != "launching" else None
                planned = markets.get(getattr(m, "machine_type", ""), "unknown")
                cloud = (row.cloud if row else None) or view["cloud"]
                market = (row.market if row else None) or planned
                machines[(name, cloud, market, str(m.status))] += 1
                if row and row.instance_type and str(m.status) in BILLED_MACHINE_STATUSES:
                    cost[(cloud, market)] += _price(
                        catalog, cloud, row.instance_type, row.region, row.zone, market
                    )
            if view["kind"] == "master_config" and ledger is not None:
                _slots(f["corral_determined_slots"], name, ledger)
        _add(f["corral_pool_machines"], machines)


def _slots(family: GaugeMetricFamily, master: str, ledger: Any) -> None:
    total: Tally[str] = Tally()
    used: Tally[str] = Tally()
    for agent in ledger.agents.values():
        total[agent.pool] += agent.slots
    for task_id, task in ledger.tasks.items():
        used[ledger.pool_of(task_id)] += sum(a.slots for a in task.allocations)
    for pool in sorted(set(total) | set(used)):
        family.add_metric([master, pool, "total"], total[pool])
        family.add_metric([master, pool, "used"], used[pool])


def _catalog(deps: Deps) -> Catalog:
    """The catalog with the local cloud's prices; without them when its file cannot be read
    (the API of a deployment without a local cloud still prices AWS and Google Cloud)."""
    try:
        return catalog_for(deps)
    except (OSError, ValueError, ConfigError) as exc:
        log.debug("metrics: local cloud prices left out: %s", exc)
        return installed_catalog()


def _price(
    catalog: Catalog,
    cloud: str,
    instance_type: str,
    region: str | None,
    zone: str | None,
    market: str,
) -> float:
    """The list price per hour of one machine: its zone's, else its region's, else any; spot
    at the spot price where one is listed; reserved (and anything else) at on demand. 0 for a
    type the catalog does not know."""
    offers = catalog.instance_type(cloud, instance_type)
    if not offers:
        return 0.0
    here = [o for o in offers if o.zone == zone] or [o for o in offers if o.region == region]
    offer = (here or list(offers))[0]
    if market == "spot" and offer.spot_price_usd_per_hour is not None:
        return offer.spot_price_usd_per_hour
    return offer.price_usd_per_hour


def _block_labels(block: Block, outcome: str) -> tuple[str, str, str]:
    if block.quota_family is not None:
        scope = "quota_family"  # one quota family in a region
    elif block.above is not None:
        scope = "shortfall"  # a zone's type, for asks over its ceiling
    elif block.zone is not None:
        scope = "zone"
    elif block.region is not None:
        scope = "region"
    elif block.instance_type is not None:
        scope = "instance_type"
    else:
        scope = "cloud"
    return (block.cloud, scope, outcome)


def _add(family: GaugeMetricFamily, tally: Mapping[Any, float]) -> None:
    for labels, value in sorted(tally.items()):
        family.add_metric(list(labels), value)
