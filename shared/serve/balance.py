"""Which ready replica a request to a service goes to: SkyServe's load-balancing policies.

The names and meanings are SkyPilot's (``sky/serve/load_balancing_policies.py``):

- ``round_robin``: the ready replicas in turn, wrapping around; a new set of ready replicas
  starts the turn again (SkyPilot also shuffles the new set, so the first replica does not take
  the most load when the set keeps changing; Corral keeps the set's order, by replica id, so a
  test can name the order).
- ``least_load`` (the default): the replica with the fewest requests in flight through this
  balancer (the first such in the set's order on a tie).
- ``instance_aware_least_load``: the least in-flight requests *divided by the replica's QPS
  target* (``target_qps_per_replica`` as a mapping accelerator -> QPS), so a replica on a
  faster accelerator takes more.

:func:`choose` is the decision, a function of the ready set, the turn and the loads;
:class:`Balancer` holds the turn and the in-flight counts of one process (the API's relay
keeps one per service). Pure: the standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .spec import DEFAULT_LB_POLICY, LB_POLICIES, ServiceSpec


@dataclass(frozen=True, slots=True)
class Backend:
    """One ready replica as the balancer sees it."""

    replica_id: int
    url: str  # http://address:port
    accelerator: str | None = None  # instance_aware_least_load's key


def policy_name(name: str | None) -> str:
    """The policy a service uses: its ``load_balancing_policy``, else SkyPilot's default;
    ValueError for a name SkyPilot does not have."""
    if name is None:
        return DEFAULT_LB_POLICY
    if name not in LB_POLICIES:
        raise ValueError(f"unknown load balancing policy {name!r}; expected one of {LB_POLICIES}")
    return name


def normalized_load(backend: Backend, loads: Mapping[str, int], spec: ServiceSpec) -> float:
    """instance_aware_least_load's measure: in-flight requests / the replica's QPS target."""
    return loads.get(backend.url, 0) / spec.qps_of(backend.accelerator)


def choose(
    policy: str,
    ready: Sequence[Backend],
    *,
    turn: int = 0,
    loads: Mapping[str, int] | None = None,
    spec: ServiceSpec | None = None,
) -> Backend | None:
    """The replica the next request goes to (None: no replica is ready)."""
    if not ready:
        return None
    loads = loads or {}
    if policy == "round_robin":
        return ready[turn % len(ready)]
    if policy == "instance_aware_least_load":
        weights = spec or ServiceSpec()
        return min(ready, key=lambda b: normalized_load(b, loads, weights))
    return min(ready, key=lambda b: loads.get(b.url, 0))


@dataclass
class Balancer:
    """One service's balancer state in one process: the ready set, the round-robin turn and
    the requests in flight per replica URL."""

    policy: str = DEFAULT_LB_POLICY
    spec: ServiceSpec = field(default_factory=ServiceSpec)
    ready: tuple[Backend, ...] = ()
    turn: int = 0
    loads: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set_ready(self, ready: Sequence[Backend]) -> None:
        """A new ready set: the same set keeps its turn; another starts the turn again, and
        replicas no longer ready lose their counts (new ones start at 0)."""
        with self._lock:
            if {b.url for b in ready} == {b.url for b in self.ready}:
                self.ready = tuple(ready)
                return
            self.ready = tuple(ready)
            self.turn = 0
            urls = {b.url for b in ready}
            self.loads = {u: n for u, n in self.loads.items() if u in urls}
            for b in ready:
                self.loads.setdefault(b.url, 0)

    def pick(self, skip: frozenset[str] = frozenset()) -> Backend | None:
        """The replica for the next request (``skip``: URLs that just failed to answer), its
        count raised until :meth:`done`; round robin moves its turn on."""
        with self._lock:
            ready = [b for b in self.ready if b.url not in skip]
            chosen = choose(self.policy, ready, turn=self.turn, loads=self.loads, spec=self.spec)
            if chosen is None:
                return None
            if self.policy == "round_robin":
                self.turn = (self.turn + 1) % max(1, len(ready))
            self.loads[chosen.url] = self.loads.get(chosen.url, 0) + 1
            return chosen

    def done(self, backend: Backend) -> None:
        """A request to ``backend`` has finished."""
        with self._lock:
            if backend.url in self.loads:
                self.loads[backend.url] = max(0, self.loads[backend.url] - 1)
