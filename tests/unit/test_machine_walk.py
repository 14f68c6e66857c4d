"""A pooled machine's zone walk (corral.shared.machine_walk): its places, the blocks it passes
over (for their type and market only; a shortfall's ceiling only above it; a quota family in
its region), what a refusal blocks for the rest of the walk and for everyone, and its account."""

from __future__ import annotations

from collections.abc import Sequence

from corral.shared.config.machine_pool import LaunchTemplate
from corral.shared.errors import CapacityError, QuotaError, ThrottledError
from corral.shared.failover_plan import Attempt, Fail
from corral.shared.machine_walk import MachineWalk, launch_blocked, lay_out, machine_places
from corral.shared.placement import Block
from corral.shared.reservations import reservation_of

# Two regions of a cloud: east (two zones), west (one); every type offered everywhere.
ZONES = [("east-a", "east"), ("east-b", "east"), ("west-a", "west")]
RESERVATIONS = {"r-1": ("east-b", "east")}
GPUS = {"p4d.24xlarge": "A100", "a2-highgpu-1g": "A100"}
FAR = 10_000.0  # every block here ends long after the walk


def zones_of(template: LaunchTemplate) -> list[tuple[str, str]]:
    reservation = reservation_of(template.advanced_instance_config)
    return [RESERVATIONS[reservation]] if reservation else list(ZONES)


def template(itype: str = "cpu-2", market: str = "ON_DEMAND", **more: object) -> LaunchTemplate:
    return LaunchTemplate.model_validate({"instance_type": itype, "market_type": market, **more})


def walk(templates: Sequence[LaunchTemplate], *blocks: Block, **kw: object) -> MachineWalk:
    return MachineWalk.of(
        "aws", templates, zones_of, [(b, FAR) for b in blocks], accelerator_of=GPUS.get, **kw
    )  # type: ignore[arg-type]


def tries(w: MachineWalk, refuse: dict[str, Exception] | None = None) -> list[str]:
    """Walk to the end or to the first place that takes it (zones tried, in order); a zone in
    ``refuse`` refuses with its error."""
    refuse = refuse or {}
    out = []
    while isinstance(step := w.next(), Attempt):
        at = w.places[step.index]
        out.append(at.zone)
        if at.zone not in refuse:
            return out
        w.failed(step.index, refuse[at.zone])  # type: ignore[arg-type]
    return out


def capacity(zone: str, itype: str = "cpu-2", market: str = "on_demand", **kw: object) -> Block:
    region = dict(ZONES)[zone]
    return Block("aws", region, zone, itype, market, **kw)  # type: ignore[arg-type]


def test_places_are_each_template_in_order_in_its_zones_a_reserved_one_in_its_reservation() -> None:
    reserved = template(
        advanced_instance_config={"CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": "r-1"}}},
    )  # fmt: skip
    places = machine_places(
        "aws", [reserved, template("cpu-2", "SPOT", zones=["west-a"]), template()], zones_of
    )
    assert [(p.zone, p.market, p.launch_market, p.template) for p in places] == [
        ("east-b", "reserved", "on_demand", 0),  # blocks read it as reserved; bought on-demand
        ("west-a", "spot", "spot", 1),  # its own zones only
        ("east-a", "on_demand", "on_demand", 2),
        ("east-b", "on_demand", "on_demand", 2),
        ("west-a", "on_demand", "on_demand", 2),
    ]
    assert places[0].reservation == "r-1"


def test_a_capacity_block_hides_its_zone_for_its_type_and_market_only() -> None:
    """Translated from Karpenter's pkg/cache/suite_test.go, "should mark offerings as
    unavailable when calling MarkUnavailable": an offering marked unavailable (type, zone,
    capacity type) is that offering alone; the same type in another zone, or in the other
    market, and another type in that zone stay available."""
    block = capacity("east-a")  # cpu-2 on-demand sold out in east-a
    w = walk([template()], block)
    assert tries(w) == ["east-b"]  # no call in east-a
    assert w.passed_over == ((0, block),)
    assert tries(walk([template("cpu-2", "SPOT")], block)) == ["east-a"]  # the other market
    assert tries(walk([template("cpu-4")], block)) == ["east-a"]  # another type
    # Marking another zone's offering leaves the first marked, and nothing else.
    both = walk([template()], block, capacity("east-b"))
    assert tries(both) == ["west-a"]
    assert tries(walk([template("cpu-2", "SPOT")], block, capacity("east-b"))) == ["east-a"]


def test_a_shortfalls_ceiling_blocks_only_asks_above_it() -> None:
    """ "east-a has 1 of 1 free, asked for 2" blocks asks of more than one machine: a pooled
    launch is one machine, so it still tries east-a; a ceiling of none free blocks it."""
    assert tries(walk([template()], capacity("east-a", above=1))) == ["east-a"]
    assert tries(walk([template()], capacity("east-a"))) == ["east-b"]


def test_a_refusal_blocks_its_scope_for_the_rest_of_the_walk() -> None:
    # A quota error naming no family: the machine's own (its GPU's), in its region; the
    # other zone of the region is passed over without a call, west is tried.
    w = walk([template("p4d.24xlarge")])
    quota = QuotaError("over quota", code="VcpuLimitExceeded")
    assert tries(w, {"east-a": quota}) == ["east-a", "west-a"]
    family_block = w.blocks[-1]
    assert family_block == Block("aws", region="east", quota_family="on_demand:p")
    assert [(i, b) for i, b in w.passed_over] == [(1, family_block)]
    # A CPU type of another quota class (Standard) is not in that family: it launches in east.
    assert tries(walk([template("m5.large")], family_block)) == ["east-a"]
    # A capacity refusal: its zone's type and market, which the next machine skips.
    w = walk([template()])
    assert tries(w, {"east-a": CapacityError("sold out", code="X")}) == ["east-a", "east-b"]
    assert w.blocks == [capacity("east-a")]
    # A throttled call blocks nothing (the cloud said: not now, not: not here).
    w = walk([template()])
    assert tries(w, {"east-a": ThrottledError("slow down", code="T")}) == ["east-a", "east-b"]
    assert w.blocks == []


def test_gpu_quota_families_read_the_accelerator_only_when_a_block_needs_it() -> None:
    looked: list[str] = []

    def accelerator_of(itype: str) -> str | None:
        looked.append(itype)
        return GPUS.get(itype)

    w = MachineWalk.of(
        "gcp", [template("a2-highgpu-1g")], zones_of, [], accelerator_of=accelerator_of
    )
    assert isinstance(w.next(), Attempt) and looked == []  # no block: nothing to read
    gpu_quota = Block("gcp", region="east", quota_family="NVIDIA_A100_GPUS")
    w = MachineWalk.of(
        "gcp",
        [template("a2-highgpu-1g")],
        zones_of,
        [(gpu_quota, FAR)],
        accelerator_of=accelerator_of,
    )
    assert tries(w) == ["west-a"] and looked  # read, and the GPU's quota hides east
    cpu_only = MachineWalk.of("gcp", [template("n1-standard-8")], zones_of, [(gpu_quota, FAR)],
                              accelerator_of=accelerator_of)  # fmt: skip
    assert tries(cpu_only) == ["east-a"]


def test_a_full_reservation_is_not_remembered() -> None:
    """The reservation is the pool's own (its fallback passes it over for a while); a
    capacity error there blocks nothing for others, and the template after it is tried."""
    reserved = template(
        advanced_instance_config={"CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": "r-1"}}},
    )  # fmt: skip
    w = walk([reserved, template()])
    full = CapacityError("reservation r-1 has 0 of 1 free", code="ReservationCapacityExceeded")
    assert tries(w, {"east-b": full}) == ["east-b", "east-a"]
    assert w.blocks == []
    # A block of on-demand capacity does not cover a reserved place (bought from the
    # reservation), though the cloud is asked for on-demand there.
    assert tries(walk([reserved], capacity("east-b"))) == ["east-b"]


def test_every_place_blocked_fails_without_a_call_and_says_why() -> None:
    east = Block("aws", region="east")
    w = walk([template(), template("cpu-4", zones=["nowhere"])], east, capacity("west-a"))
    decision = w.next()
    assert isinstance(decision, Fail)
    assert decision.verdict == "all 3 places failed or are blocked (0 tried)"
    assert w.account() == (
        "east-a: blocked: aws east: every instance type; "
        "west-a: blocked: aws west-a: cpu-2 (on_demand); no zone of aws offers cpu-4"
    )


def test_the_account_lists_refusals_and_blocks_in_walk_order() -> None:
    w = walk([template()], capacity("east-b"))
    assert tries(w, {"east-a": CapacityError("east-a sold out", code="X"),
                     "west-a": CapacityError("west-a sold out", code="X")}) == [
        "east-a", "west-a"]  # fmt: skip
    assert isinstance(w.next(), Fail)
    assert w.account() == (
        "east-a: capacity: X: east-a sold out; east-b: blocked: aws east-b: cpu-2 (on_demand); "
        "west-a: capacity: X: west-a sold out"
    )


def test_a_launched_machines_place_reads_its_reservation_as_the_walk_does() -> None:
    from corral.shared.machine_walk import MachinePlace
    from corral.shared.placement import Placement

    bought = Placement("aws", "east", "east-b", "cpu-2", "on_demand")
    config = {"CapacityReservationSpecification": {
        "CapacityReservationTarget": {"CapacityReservationId": "r-1"}}}  # fmt: skip
    reserved = MachinePlace.launched(bought, config)
    assert (reserved.market, reserved.launch_market, reserved.reservation) == (
        "reserved", "on_demand", "r-1")  # fmt: skip
    plain = MachinePlace.launched(bought, {})
    assert (plain.market, plain.reservation) == ("on_demand", None)


def test_a_launch_order_is_blocked_only_when_every_place_is_and_until_the_first_block_ends() -> (
    None
):
    # What a pool pass reads before it books a new machine of a type (launch_blocked): a
    # type with one place left to try is not blocked; one with every place covered is, until
    # the earliest of those blocks ends (a pass looks again then); a type no zone offers is
    # left to its launch, which says so.
    order = [template("cpu-2", "SPOT"), template()]
    spot = [capacity(z, market="spot") for z in ("east-a", "east-b", "west-a")]
    on_demand = [capacity(z) for z in ("east-a", "east-b")]
    ends = {b: FAR + n for n, b in enumerate(spot + on_demand)}
    blocks = [(b, ends[b]) for b in spot + on_demand]
    assert launch_blocked("aws", order, zones_of, blocks, accelerator_of=GPUS.get) is None
    west = capacity("west-a")
    found = launch_blocked(
        "aws", order, zones_of, [*blocks, (west, FAR + 99)], accelerator_of=GPUS.get
    )
    assert found is not None
    assert found.until == FAR  # spot in east-a: the first to end
    assert found.why.startswith("no new machine: its 6 places blocked (aws east-a: cpu-2 (spot);")
    # A renewal (another launch refused there again) moves a block's end, not the text: the
    # reason every waiting workload carries stays the same answer (issue #46 item 4: a text
    # with the end in it made a new answer per waiting workload at each renewal).
    renewed = [(b, end + 300) for b, end in [*blocks, (west, FAR + 99)]]
    again = launch_blocked("aws", order, zones_of, renewed, accelerator_of=GPUS.get)
    assert again is not None and again.until == FAR + 300 and again.why == found.why
    # A quota family used up in both regions blocks on-demand GPUs everywhere at once.
    gpu = [template("p4d.24xlarge")]
    quota = [(Block("aws", region=r, quota_family="on_demand:p"), FAR) for r in ("east", "west")]
    assert launch_blocked("aws", gpu, zones_of, quota, accelerator_of=GPUS.get) is not None
    assert launch_blocked("aws", gpu, zones_of, quota[:1], accelerator_of=GPUS.get) is None
    # Nowhere offered: not "blocked" (its launch fails on its own, saying no zone offers it).
    assert launch_blocked("aws", order, lambda t: [], blocks, accelerator_of=GPUS.get) is None
    # The order laid out once (as a simulated pool keeps it) answers the same every time.
    laid = lay_out("aws", order, zones_of, GPUS.get)
    for given in (blocks, [*blocks, (west, FAR + 99)], renewed):
        assert launch_blocked(
            "aws", order, zones_of, given, accelerator_of=GPUS.get, laid=laid
        ) == launch_blocked("aws", order, zones_of, given, accelerator_of=GPUS.get)
