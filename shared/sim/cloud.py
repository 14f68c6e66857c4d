"""The simulated cloud: capacity per zone, instance type and market over time, reservations,
outages, API errors, spot preemptions, and the bill.

A launch call either takes the instance (up ``boot_s`` later) or raises the provider error a
real cloud's answer becomes (:mod:`corral.shared.errors`), so failover reads it exactly as it
reads a real one; a cloud played as pods schedules them on its nodes and admits them by its
namespaces' quotas (:mod:`.pods`). Every draw (API errors, when a spot instance is reclaimed)
is a hash of the scenario's seed and the launch's own key: a run is the same every time, and a
policy's draws do not depend on what another policy did.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import CapacityError, LaunchTimeoutError, ProviderError, QuotaError, ThrottledError
from ..placement import MARKETS, Placement
from ..quota_families import k8s_family, quota_families
from .pods import PodAsk, SimCluster
from .scenario import Capacity, OutageSpec, PodCloudSpec, ReservationSpec, Scenario


@dataclass(eq=False, slots=True)
class SimInstance:
    """One instance of the simulated cloud, billed from launch to end."""

    iid: str
    place: Placement
    gpus: int
    price_usd_per_hour: float
    launched_at: float
    up_at: float
    preempt_at: float | None  # when the cloud reclaims it (spot), if it runs that long
    owner: str | None = None  # the request it serves now (billed to it)
    billed_to_s: float = 0.0  # billed up to this time
    ended_at: float | None = None


def draw(seed: int, *key: object) -> float:
    """A number in [0, 1) from the seed and a key: the same every run."""
    text = "/".join(str(k) for k in (seed, *key)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") / 2.0**64


class _Steps:
    """A capacity as a step function of time."""

    def __init__(self, capacity: Capacity) -> None:
        if isinstance(capacity, int):
            self.times, self.counts = [0.0], [capacity]
        else:
            steps = sorted(capacity, key=lambda s: s.at)
            self.times = [0.0, *(s.at for s in steps)]
            self.counts = [0, *(s.count for s in steps)]

    def at(self, t: float) -> int:
        return self.counts[bisect.bisect_right(self.times, t) - 1]


@dataclass
class Cost:
    """Money by kind: instances billed, and reservations paid for whether used or not."""

    instances_usd: float = 0.0
    reservations_usd: float = 0.0
    by_owner: dict[str, float] = field(default_factory=dict)


class SimCloud:
    """Capacity, launches, ends and the bill of one policy's run over a scenario."""

    def __init__(self, scenario: Scenario, salt: str = "") -> None:
        self.scenario = scenario
        self.seed = scenario.seed
        self.salt = salt
        self.regions = {(c, z): r for c, z, r in scenario.places()}
        self.caps: dict[tuple[str, str, str, str], _Steps] = {}
        self.rates: dict[tuple[str, str, str], float] = {}
        self.spot_prices: dict[tuple[str, str, str], float] = {}
        # A pod cloud's clusters, by (cloud, context); its pods by instance id.
        self.clusters: dict[tuple[str, str], SimCluster] = {}
        self.pods: dict[str, SimCluster] = {}
        self.accelerators = {c: scenario.instance_types(c) for c in scenario.clouds}
        for cloud, zone, region in scenario.places():
            spec = scenario.clouds[cloud]
            if isinstance(spec, PodCloudSpec):
                if (cloud, region) not in self.clusters:
                    self.clusters[(cloud, region)] = SimCluster.of(spec.contexts[region])
                continue
            factor = spec.regions[region].price_factor
            for itype, t in spec.instance_types.items():
                slot = scenario.slot(cloud, region, zone, itype)
                if slot is None:
                    continue
                self.caps[(cloud, zone, itype, "on_demand")] = _Steps(slot.on_demand)
                self.caps[(cloud, zone, itype, "spot")] = _Steps(slot.spot)
                self.rates[(cloud, zone, itype)] = slot.spot_preemptions_per_hour
                spot = slot.spot_price_usd_per_hour or t.spot_price_usd_per_hour
                self.spot_prices[(cloud, zone, itype)] = (spot or t.price_usd_per_hour) * factor
        self.reservations: dict[str, ReservationSpec] = {r.id: r for r in scenario.reservations}
        self.in_use: dict[tuple[str, ...], int] = {}
        self.live: dict[str, SimInstance] = {}
        self.cost = Cost()
        self.calls = 0

    # ------------------------------------------------------------------ what is there
    def capacity(self, place: Placement, t: float) -> int:
        """Instances of this place's kind the cloud has at ``t`` (a reservation's count)."""
        if place.reservation is not None:
            res = self.reservations[place.reservation]
            live = res.from_s <= t < (res.to_s if res.to_s is not None else math.inf)
            return res.count if live else 0
        steps = self.caps.get((place.cloud, place.zone, place.instance_type, place.market))
        return steps.at(t) if steps else 0

    def free(self, place: Placement, t: float) -> int:
        """Instances one more launch could take now, outages aside (a pod cloud: the pods of
        this shape its nodes hold and its namespace's quota admits)."""
        cluster = self.clusters.get((place.cloud, place.region))
        if cluster is not None:
            return cluster.free(place.zone, PodAsk.of(place.instance_type, 0))
        return max(0, self.capacity(place, t) - self.in_use.get(_key(place), 0))

    def outage(self, place: Placement, t: float) -> OutageSpec | None:
        """The outage that covers this place at ``t``, if any."""
        for o in self.scenario.outages:
            if (
                o.cloud == place.cloud
                and o.from_s <= t < o.to_s
                and (o.zone is None or o.zone == place.zone)
                and (o.region is None or o.region == place.region)
            ):
                return o
        return None

    def change_times(self) -> list[float]:
        """When capacity steps or outages begin or end (spot may be reclaimed then)."""
        times = {t for s in self.caps.values() for t in s.times if t > 0}
        times |= {o.from_s for o in self.scenario.outages if o.lose_running}
        return sorted(times)

    def reservation_capacity(self, reservation: str, t: float) -> int:
        """Machines the reservation holds at ``t`` (0 outside its window; unknown: 0)."""
        if reservation not in self.reservations:
            return 0
        return self.capacity(Placement("", "", "", "", "reserved", reservation), t)

    def reservation_in_use(self, reservation: str) -> int:
        return self.in_use.get(("reservation", reservation), 0)

    def quota_out(self, place: Placement, t: float) -> str | None:
        """The quota family used up at ``t`` that a launch here counts against, if any."""
        if not self.scenario.quotas or place.reservation is not None:
            return None  # a reservation is bought already: no quota to meet
        accelerator = self.accelerators[place.cloud].get(place.instance_type, (None, 0))[0]
        families = quota_families(
            place.cloud, place.instance_type, place.market,
            accelerator.upper() if accelerator else None, place.zone,
        )  # fmt: skip
        for q in self.scenario.quotas:
            if (
                q.cloud == place.cloud
                and q.region == place.region
                and q.from_s <= t < (q.to_s if q.to_s is not None else math.inf)
                and q.family in families
            ):
                return q.family
        return None

    # ------------------------------------------------------------------ launching
    def launch_all(
        self, place: Placement, now: float, keys: list[str], gpus: int
    ) -> list[SimInstance]:
        """One call for every node of a request at ``place``, all or none (as the local
        cloud's): a zone with fewer free than asked refuses with how many were (``free``: the
        shortfall's ceiling), before any is taken. A pod cloud: one pod per node (:meth:`pods`)."""
        cluster = self.clusters.get((place.cloud, place.region))
        if cluster is not None:
            return self.pods_of(cluster, place, now, keys, gpus)
        free = self.free(place, now)
        if len(keys) > 1 and 0 < free < len(keys) and self.outage(place, now) is None:
            self.calls += 1
            what = "reservation" if place.reservation else place.market
            raise CapacityError(
                f"{place.zone} has {free} {place.instance_type} ({what}) free, asked for "
                f"{len(keys)}",
                code="InsufficientInstanceCapacity",
                free=free,
            )
        got: list[SimInstance] = []
        try:
            for key in keys:
                got.append(self.launch(place, now, key, gpus))
        except ProviderError:
            for inst in got:
                self.end(inst, now)
            raise
        return got

    def launch(self, place: Placement, now: float, key: str, gpus: int) -> SimInstance:
        """Launch one instance at ``place`` (``key`` names this call, for the draws), or raise
        the error the cloud answers with."""
        cluster = self.clusters.get((place.cloud, place.region))
        if cluster is not None:
            return self.pods_of(cluster, place, now, [key], gpus)[0]
        self.calls += 1
        spec = self.scenario.clouds[place.cloud]
        outage = self._answer(place, now, key)
        if outage is not None or self.free(place, now) <= 0:
            what = "reservation" if place.reservation else place.market
            raise CapacityError(
                f"no {place.instance_type} ({what}) in {place.zone}",
                code="InsufficientInstanceCapacity",
            )
        inst = SimInstance(
            iid=key,
            place=place,
            gpus=gpus,
            price_usd_per_hour=self.price(place),
            launched_at=now,
            up_at=now + spec.boot_s,
            preempt_at=self.preempt_time(place, now, key),
            billed_to_s=now,
        )
        self.in_use[_key(place)] = self.in_use.get(_key(place), 0) + 1
        self.live[inst.iid] = inst
        return inst

    def _answer(self, place: Placement, now: float, key: str) -> OutageSpec | None:
        """What every cloud's API may answer before capacity is looked at: a hung region, a
        throttle or an error drawn for this call, a quota used up. Returns the outage that
        covers the place (a sold-out one refuses later, as capacity)."""
        spec = self.scenario.clouds[place.cloud]
        outage = self.outage(place, now)
        if outage is not None and outage.error == "timeout":
            raise LaunchTimeoutError(f"no answer from {place.region}", code="Timeout")
        u = draw(self.seed, self.salt, "api", key)
        if u < spec.api.throttle_rate:
            raise ThrottledError("request limit exceeded", code="RequestLimitExceeded")
        if u < spec.api.throttle_rate + spec.api.error_rate:
            raise ProviderError("internal error", code="InternalError")
        family = self.quota_out(place, now)
        if family is not None:
            raise QuotaError(
                f"quota {family} used up in {place.region}", code="QuotaExceeded", family=family
            )
        return outage

    def pods_of(
        self, cluster: SimCluster, place: Placement, now: float, keys: list[str], gpus: int
    ) -> list[SimInstance]:
        """One pod per key in namespace ``place.zone`` of context ``place.region``, every one
        scheduled or none (the provider's launch): each pod created (one call each: the API's
        answers, then its namespace's ResourceQuota), then the scheduler binds them all, or the
        launch's pods are deleted and it fails as FailedScheduling for the shape there."""
        spec = self.scenario.clouds[place.cloud]
        assert isinstance(spec, PodCloudSpec)
        ask = PodAsk.of(place.instance_type, gpus)
        created: list[str] = []
        try:
            outage = None
            for key in keys:
                self.calls += 1
                outage = self._answer(place, now, key)
                refused = cluster.admit(key, place.zone, ask)
                if refused is not None:
                    raise QuotaError(
                        f"pods {key!r} is forbidden: exceeded quota in {place.zone}, requested: "
                        f"{refused}, limited: {refused}={cluster.hard[place.zone][refused]:g}",
                        code="ExceededQuota",
                        family=k8s_family(place.zone, refused),
                    )
                created.append(key)
            if outage is not None:  # its nodes cordoned for the window
                n = len(cluster.nodes)
                why = f"0/{n} nodes are available: {n} node(s) were unschedulable."
            elif spec.scheduler_s > spec.schedule_wait_s:
                why = f"not scheduled within {spec.schedule_wait_s:g} s"
            elif not all(cluster.bind(key) for key in created):
                why = "FailedScheduling: " + cluster.why_pending(ask)
            else:
                why = None
            if why is not None:
                raise CapacityError(
                    f"{place.region}/{place.zone}: {place.instance_type} cannot be scheduled: "
                    f"{why}",
                    code="FailedScheduling",
                )
        except ProviderError:
            for key in created:
                cluster.delete(key)
            raise
        got = []
        for key in created:
            inst = SimInstance(
                iid=key,
                place=place,
                gpus=gpus,
                price_usd_per_hour=0.0,
                launched_at=now,
                up_at=now + spec.boot_s,
                preempt_at=None,
                billed_to_s=now,
            )
            self.in_use[_key(place)] = self.in_use.get(_key(place), 0) + 1
            self.live[inst.iid] = inst
            self.pods[inst.iid] = cluster
            got.append(inst)
        return got

    def refused_after_s(self, place: Placement, error: ProviderError) -> float:
        """How long after the call its refusal is known: the call's time, or, for pods that
        cannot be scheduled, the scheduler's verdict (or the provider's wait for one)."""
        spec = self.scenario.clouds[place.cloud]
        if isinstance(spec, PodCloudSpec) and isinstance(error, CapacityError):
            return spec.refused_after_s()
        return spec.call_s

    def price(self, place: Placement) -> float:
        """USD per hour of one instance here (a reservation's own price: already paid)."""
        if place.reservation is not None:
            return self.reservations[place.reservation].price_usd_per_hour
        if place.market == "spot":
            return self.spot_prices[(place.cloud, place.zone, place.instance_type)]
        spec = self.scenario.clouds[place.cloud]
        if isinstance(spec, PodCloudSpec):
            return 0.0  # the cluster's nodes are paid for already
        factor = spec.regions[place.region].price_factor
        return spec.instance_types[place.instance_type].price_usd_per_hour * factor

    def preempt_time(self, place: Placement, now: float, key: str) -> float | None:
        """When a spot instance launched now with this key would be reclaimed (exponential at
        the zone's rate), or None."""
        if place.market != "spot" or place.reservation is not None:
            return None
        rate = self.rates.get((place.cloud, place.zone, place.instance_type), 0.0)
        if rate <= 0:
            return None
        u = draw(self.seed, self.salt, "preempt", key)
        return now - math.log(1.0 - u) * 3600.0 / rate

    # ------------------------------------------------------------------ billing and ends
    def bill(self, inst: SimInstance, now: float) -> float:
        """Bill ``inst`` up to ``now`` (to its owner); returns the amount."""
        if inst.ended_at is not None:
            return 0.0
        usd = inst.price_usd_per_hour * max(0.0, now - inst.billed_to_s) / 3600.0
        inst.billed_to_s = now
        if inst.place.reservation is None:
            self.cost.instances_usd += usd
        if inst.owner is not None:
            self.cost.by_owner[inst.owner] = self.cost.by_owner.get(inst.owner, 0.0) + usd
        return usd

    def hand_to(self, inst: SimInstance, owner: str | None, now: float) -> None:
        """The instance serves another request (or none) from ``now``."""
        self.bill(inst, now)
        inst.owner = owner

    def end(self, inst: SimInstance, now: float) -> None:
        """Terminate (or lose) an instance: billed to ``now``, its capacity freed."""
        if inst.ended_at is not None:
            return
        self.bill(inst, now)
        inst.ended_at = now
        self.in_use[_key(inst.place)] -= 1
        self.live.pop(inst.iid, None)
        cluster = self.pods.pop(inst.iid, None)
        if cluster is not None:
            cluster.delete(inst.iid)  # its node's room and its namespace's quota back

    def reclaim(self, now: float) -> list[SimInstance]:
        """Spot instances over their zone's capacity now, and instances in an outage that takes
        running machines: what the cloud takes back (newest first)."""
        out: list[SimInstance] = []
        over: dict[tuple[str, ...], int] = {}
        for inst in sorted(self.live.values(), key=lambda i: -i.launched_at):
            place = inst.place
            outage = self.outage(place, now)
            if outage is not None and outage.lose_running:
                out.append(inst)
                continue
            if place.market != "spot":
                continue
            k = _key(place)
            if k not in over:
                over[k] = self.in_use.get(k, 0) - self.capacity(place, now)
            if over[k] > 0:
                over[k] -= 1
                out.append(inst)
        return out

    def finish(self, end_s: float) -> Cost:
        """The bill at the end of the run: live instances billed, reservations paid."""
        for inst in list(self.live.values()):
            self.bill(inst, end_s)
        self.cost.reservations_usd = (
            sum(
                r.count * r.price_usd_per_hour * max(0.0, min(end_s, r.to_s or end_s) - r.from_s)
                for r in self.reservations.values()
            )
            / 3600.0
        )
        return self.cost

    def accrued_usd(self, now: float) -> float:
        """What the run has cost up to ``now`` (instances billed or running, reservations)."""
        live = sum(
            i.price_usd_per_hour * max(0.0, now - i.billed_to_s) / 3600.0
            for i in self.live.values()
            if i.place.reservation is None
        )
        paid = sum(
            r.count * r.price_usd_per_hour * max(0.0, min(now, r.to_s or now) - r.from_s)
            for r in self.reservations.values()
        )
        return self.cost.instances_usd + live + paid / 3600.0

    def by_market(self) -> dict[str, int]:
        """Live instances per market (reserved, spot, on_demand)."""
        out = dict.fromkeys(MARKETS, 0)
        for inst in self.live.values():
            out["reserved" if inst.place.reservation else inst.place.market] += 1
        return out

    def live_instances(self) -> Iterator[SimInstance]:
        return iter(self.live.values())


def _key(place: Placement) -> tuple[str, ...]:
    if place.reservation is not None:
        return ("reservation", place.reservation)
    return (place.cloud, place.zone, place.instance_type, place.market)
