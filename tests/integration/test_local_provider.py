"""The local provider against a real redis-server, with real agent processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral.services.providers.base import LaunchSpec, ProviderInstance
from corral.services.providers.local import launcher
from corral.services.providers.local.processes import pid_belongs_to
from corral.services.providers.local.provider import LocalProvider
from corral.shared.config.localcloud import parse_local_cloud
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)

from local_processes import local_provider, processes_of

pytestmark = pytest.mark.integration

CLOUD = parse_local_cloud(
    """
instance_types:
  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.1, spot_price_usd_per_hour: 0.03}
  - {name: cpu-4, vcpus: 4, memory_gib: 8, price_usd_per_hour: 0.2}
  - {name: gpu-a100-8, vcpus: 96, memory_gib: 1152, accelerators: {A100: 8},
     price_usd_per_hour: 32.77}
regions:
  - name: lab-east
    zones:
      - name: lab-east-a
        capacity: {cpu-2: 8, cpu-4: 4, gpu-a100-8: 0}
      - name: lab-east-b
        capacity: {cpu-2: 4, gpu-a100-8: 2}
        errors: {gpu-a100-8: quota}
      - name: lab-east-slow
        capacity: {cpu-2: 4}
        launch_delay_s: 0.3
      - name: lab-east-long-boot
        capacity: {cpu-2: 1}
        launch_delay_s: 60
      - name: lab-east-boot-1s
        capacity: {cpu-2: 2}
        launch_delay_s: 1
  - name: lab-faults
    zones:
      - name: faults-a
        capacity: {cpu-2: 4, gpu-a100-8: 4}
        errors: {cpu-2: {kind: throttle, times: 2}, gpu-a100-8: auth}
      - name: faults-b
        capacity: {cpu-2: 4, gpu-a100-8: 4}
        errors: {cpu-2: capacity, gpu-a100-8: throttle}
reservations:
  - {id: r-a100, zone: lab-east-a, instance_type: gpu-a100-8, count: 2}
  - {id: r-cpu-b, zone: lab-east-b, instance_type: cpu-2, count: 1}
aliases:
  p4d.24xlarge: gpu-a100-8
""",
    "test-cloud.yaml",
)


def spec(zone: str = "lab-east-a", instance_type: str = "cpu-2", **kw: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "request_id": "req-1",
        "attempt_id": f"att-{uuid.uuid4().hex[:8]}",
        "cloud": "local",
        "region": kw.pop("region", None) or CLOUD.region_of(zone),
        "zone": zone,
        "instance_type": instance_type,
    }
    fields.update(kw)
    return LaunchSpec(**fields)


def wait_for(predicate: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what or predicate}")


def state_of(provider: LocalProvider, instance_id: str) -> ProviderInstance:
    [inst] = [i for i in provider.describe() if i.provider_id == instance_id]
    return inst


@pytest.fixture
def provider(redis_url: str, tmp_path: Path) -> Iterator[LocalProvider]:
    """A provider with fast heartbeats; afterwards every process it started is gone."""
    with local_provider(CLOUD, redis_url, tmp_path / "logs") as p:
        yield p


def test_a_job_runs_heartbeats_and_records_its_exit_code(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec(run="sleep 1; echo out-$CORRAL_NODE_RANK; echo err >&2; exit 7"))
    # pending until its agent reports; a loaded machine may let that happen before launch returns
    assert inst.state in ("pending", "running") and inst.pid is not None
    os.kill(inst.pid, 0)  # a real process, alive
    assert provider.pid_belongs_to(inst.pid, inst.provider_id)
    wait_for(lambda: state_of(provider, inst.provider_id).state == "running", what="running")
    beat = json.loads(provider.state.r.get(provider.state.keys.heartbeat(inst.provider_id)))
    assert (beat["activity"], beat["vcpus"], beat["memory_gib"], beat["pid"]) == (
        "running", 2.0, 4.0, inst.pid,
    )  # fmt: skip
    done = wait_for(
        lambda: (i := state_of(provider, inst.provider_id)).state == "terminated" and i,
        what="the job to end",
    )
    assert done.exit_code == 7
    log = Path(provider.log_dir / f"{inst.provider_id}.log").read_text()
    assert "out-0\n" in log and "err\n" in log
    final = provider.state.record(inst.provider_id)
    assert final is not None
    assert (final.state, final.exit_code, final.end_reason) == ("terminated", 7, "completed")
    assert provider.state.r.scard(provider.state.keys.pool("lab-east-a", "cpu-2")) == 0
    wait_for(lambda: not Path(f"/proc/{inst.pid}").exists(), what="the agent to be reaped")


def test_describe_reads_an_ended_record_once_and_forgets_it_with_the_cloud(
    provider: LocalProvider,
) -> None:
    """An ended record never changes: a look reads what still lives, not every instance of
    the last day; an id the cloud forgot leaves the provider's memory too."""
    [job] = provider.launch(spec(run="exit 3"))
    [svc] = provider.launch(spec())  # a service: stays up
    wait_for(lambda: state_of(provider, job.provider_id).state == "terminated", what="the end")
    # The service's agent up first: a process still starting is read twice (its record again,
    # in case it just wrote it), which is the look's rule for the living, not what this counts.
    wait_for(lambda: state_of(provider, svc.provider_id).state == "running", what="the service")
    r = provider.state.r

    def calls(command: str) -> int:
        return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    def hgetalls() -> int:
        return calls("hgetall")

    before, hmgets = hgetalls(), calls("hmget")
    seen = {i.provider_id: i for i in provider.describe()}
    # The live service's record only, and in brief: its fields that change (the rest was
    # read by an earlier look and never changes).
    assert (hgetalls() - before, calls("hmget") - hmgets) == (0, 1)
    assert (seen[job.provider_id].state, seen[job.provider_id].exit_code) == ("terminated", 3)
    assert seen[svc.provider_id].state in ("pending", "running")
    # A fresh provider (another process) reads it, as any first look does: its record, and
    # no heartbeat (an ended record is reported as it is); the live one's with its beat.
    other = LocalProvider(
        CLOUD, provider.redis_url, prefix=provider.prefix, log_dir=provider.log_dir
    )
    assert r.exists(provider.state.keys.heartbeat(job.provider_id))  # the agent's last beat
    gets = int(r.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
    assert state_of(other, job.provider_id).exit_code == 3
    assert int(r.info("commandstats")["cmdstat_get"]["calls"]) - gets == 1  # the service's
    read = {i: (rec, beat) for i, rec, beat in other.state.records_and_heartbeats(
        [job.provider_id, svc.provider_id, "li-missing"])}  # fmt: skip
    assert read[job.provider_id][0] is not None and read[job.provider_id][1] is None
    assert read[svc.provider_id][1] is not None and read["li-missing"] == (None, None)
    provider.state.forget(job.provider_id)  # its record expired: the cloud forgot it
    assert job.provider_id not in {i.provider_id for i in provider.describe()}
    provider.terminate([svc.provider_id])


def test_a_service_stays_up_until_terminated(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec(setup="echo set up"))
    wait_for(lambda: state_of(provider, inst.provider_id).state == "running", what="running")
    time.sleep(0.5)  # several heartbeats: still there, idle
    assert state_of(provider, inst.provider_id).state == "running"
    beat = json.loads(provider.state.r.get(provider.state.keys.heartbeat(inst.provider_id)))
    assert beat["activity"] == "idle"
    assert processes_of(inst.provider_id) == [inst.pid]

    provider.terminate([inst.provider_id])
    assert not Path(f"/proc/{inst.pid}").exists()
    assert processes_of(inst.provider_id) == []
    final = state_of(provider, inst.provider_id)
    assert (final.state, final.exit_code) == ("terminated", None)
    assert provider.state.r.scard(provider.state.keys.pool("lab-east-a", "cpu-2")) == 0
    provider.terminate([inst.provider_id, "li-000000000000"])  # idempotent, unknown ids fine


def test_terminate_stops_the_task_and_what_it_left_in_the_background(
    provider: LocalProvider,
) -> None:
    [inst] = provider.launch(spec(run="sleep 60 & sleep 60 & wait"))
    wait_for(lambda: len(processes_of(inst.provider_id)) >= 4, what="agent, bash, 2 sleeps")
    provider.terminate([inst.provider_id])
    assert processes_of(inst.provider_id) == []
    assert state_of(provider, inst.provider_id).exit_code == 128 + signal.SIGTERM


def test_a_launch_beyond_capacity_is_a_capacity_error(provider: LocalProvider) -> None:
    for _ in range(4):
        provider.launch(spec("lab-east-b"))
    full = spec("lab-east-b")
    with pytest.raises(CapacityError) as info:
        provider.launch(full)
    assert info.value.scope == Scope.ZONE
    # The refused attempt is left unbound (its script binds it first and takes that back):
    # the same attempt launches once a slot is free.
    assert provider.state.attempt_value(full.attempt_id) is None
    with pytest.raises(CapacityError):
        provider.launch(spec("lab-east-a", "gpu-a100-8"))  # offered, but sold out
    assert len(provider.describe()) == 4
    provider.terminate([provider.describe()[0].provider_id])
    assert len(provider.launch(full)) == 1


def test_twenty_concurrent_launches_never_overcount(provider: LocalProvider) -> None:
    results: list[list[ProviderInstance] | ProviderError] = []
    lock = threading.Lock()
    start = threading.Barrier(20)

    def one() -> None:
        start.wait()
        try:
            got: list[ProviderInstance] | ProviderError = provider.launch(spec())
        except ProviderError as exc:
            got = exc
        with lock:
            results.append(got)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    launched = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if not isinstance(r, list)]
    assert (len(launched), len(refused)) == (8, 12)
    assert all(isinstance(r, CapacityError) for r in refused)
    assert provider.state.r.scard(provider.state.keys.pool("lab-east-a", "cpu-2")) == 8
    live = [i for i in provider.describe() if i.state in ("pending", "running")]
    assert len(live) == 8
    assert all(i.pid is not None and pid_belongs_to(i.pid, i.provider_id) for i in live)


def test_a_multi_node_launch_gets_all_its_nodes_or_none(provider: LocalProvider) -> None:
    first = provider.launch(
        spec("lab-east-b", count=3, run="echo rank=$CORRAL_NODE_RANK; sleep 30")
    )
    assert len({i.provider_id for i in first}) == 3
    assert sorted(i.tags["corral-node"] for i in first) == ["0", "1", "2"]
    pids_before = {i.pid for i in first}
    with pytest.raises(CapacityError):
        provider.launch(spec("lab-east-b", count=2))
    assert {i.pid for i in provider.describe()} == pids_before  # nothing half-launched
    [last] = provider.launch(spec("lab-east-b", count=1))
    assert last.provider_id not in {i.provider_id for i in first}


@pytest.mark.parametrize(
    ("zone", "instance_type", "error", "scope"),
    [
        ("lab-east-b", "gpu-a100-8", QuotaError, Scope.FAMILY),  # its quota family (#46)
        ("faults-a", "gpu-a100-8", AuthError, Scope.CLOUD),
        ("faults-b", "gpu-a100-8", ThrottledError, Scope.NONE),
        ("faults-b", "cpu-2", CapacityError, Scope.ZONE),
    ],
)
def test_injected_errors_raise_the_typed_error(
    provider: LocalProvider, zone: str, instance_type: str, error: type, scope: Scope
) -> None:
    for _ in range(2):  # without `times`, every launch fails
        with pytest.raises(error) as info:
            provider.launch(spec(zone, instance_type))
        assert info.value.scope == scope
        assert type(info.value) is error
    assert provider.describe() == []


def test_throttle_with_times_two_fails_twice_then_succeeds(provider: LocalProvider) -> None:
    retried = spec("faults-a", "cpu-2")  # the same attempt, retried as a Celery task would
    for _ in range(2):
        with pytest.raises(ThrottledError):
            provider.launch(retried)
    [inst] = provider.launch(retried)
    assert inst.tags["corral-attempt"] == retried.attempt_id
    assert [i.provider_id for i in provider.describe()] == [inst.provider_id]


def test_the_same_attempt_twice_launches_once(provider: LocalProvider) -> None:
    s = spec(count=2)
    first = provider.launch(s)
    again = provider.launch(s)
    assert [i.provider_id for i in again] == [i.provider_id for i in first]
    assert len(provider.describe()) == 2


_BEATS = {"first_heartbeat_at", "last_beat_at", "activity"}  # what a live agent's beats write


def test_an_id_taken_already_is_refused_and_the_launch_takes_nothing(
    provider: LocalProvider,
) -> None:
    # The reserve script sees a taken id by the SADD to the set of every instance (no EXISTS
    # per record): the ids it added before the taken one are taken out again.
    [old] = provider.launch(spec())
    state, keys = provider.state, provider.state.keys
    s = spec(count=2)
    pool = keys.pool(s.zone, s.instance_type)
    records = provider._new_records(s, pool, "on_demand", None)
    records[1].id = old.provider_id

    def held() -> tuple[object, ...]:
        # The old machine's record as a launch would write it: its agent's beats, which go on
        # meanwhile, left out.
        rec = state.record(old.provider_id)
        assert rec is not None
        fields = {k: v for k, v in vars(rec).items() if k not in _BEATS}
        return state.instance_ids(), state.r.scard(pool), fields

    before = held()
    assert state.reserve(pool, 8, s.attempt_id, records) == (-2, 0)
    after = held()
    assert after == before and records[0].id not in after[0]
    assert state.attempt_value(s.attempt_id) is None and state.record(records[0].id) is None


def test_the_high_water_mark_is_read_only_when_a_launch_may_pass_it(
    provider: LocalProvider,
) -> None:
    # The mark only grows: under what this process saw last, a launch neither reads nor
    # writes it (no HGET); past it, the script reads the stored mark and raises it.
    state, keys = provider.state, provider.state.keys
    pool = keys.pool("lab-east-a", "cpu-2")
    r = state.r

    def hgets() -> int:
        return int(r.info("commandstats").get("cmdstat_hget", {}).get("calls", 0))

    def reserve(count: int) -> list[str]:
        s = spec(count=count)
        records = provider._new_records(s, pool, "on_demand", None)
        assert state.reserve(pool, 8, s.attempt_id, records)[0] == 1
        return [rec.id for rec in records]

    first = reserve(3)
    assert state.high_water() == {pool: 3}
    for iid in first[:2]:  # two slots freed: 1 in use
        r.srem(pool, iid)
    before = hgets()
    reserve(2)  # 3 in use: not past the mark this process saw
    assert hgets() == before and state.high_water() == {pool: 3}
    before = hgets()
    reserve(1)  # 4 in use: past it, read and raised
    assert hgets() == before + 1 and state.high_water() == {pool: 4}
    # Another process, which saw no mark yet, reads the stored one and never lowers it.
    other = LocalProvider(
        CLOUD, provider.redis_url, prefix=provider.prefix, log_dir=provider.log_dir
    )
    s = spec()
    other.state.reserve(pool, 8, s.attempt_id, other._new_records(s, pool, "on_demand", None))
    assert state.high_water() == {pool: 5}
    r.srem(pool, *r.smembers(pool))
    s = spec()
    other.state.reserve(pool, 8, s.attempt_id, other._new_records(s, pool, "on_demand", None))
    assert state.high_water() == {pool: 5}


def test_the_same_attempt_from_racing_callers_launches_once(provider: LocalProvider) -> None:
    s = spec("lab-east-slow", count=2)  # a launch delay keeps the first caller busy
    results: list[list[str]] = []
    start = threading.Barrier(8)

    def one() -> None:
        start.wait()
        results.append(sorted(i.provider_id for i in provider.launch(s)))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 8 and len({tuple(r) for r in results}) == 1
    assert sorted(i.provider_id for i in provider.describe()) == results[0]
    assert provider.state.r.scard(provider.state.keys.pool("lab-east-slow", "cpu-2")) == 2


def test_terminate_never_signals_a_reused_pid(provider: LocalProvider) -> None:
    assert not provider.pid_belongs_to(os.getpid(), "li-000000000000")
    [inst] = provider.launch(spec(run="true"))
    wait_for(lambda: state_of(provider, inst.provider_id).state == "terminated", what="the end")
    assert inst.pid is not None
    wait_for(lambda: not provider.pid_belongs_to(inst.pid, inst.provider_id), what="its exit")
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        # The record now points at a pid the OS gave to someone else.
        provider.state.set_fields(inst.provider_id, pid=stranger.pid, child_pid=stranger.pid)
        assert not provider.pid_belongs_to(stranger.pid, inst.provider_id)
        provider.terminate([inst.provider_id])
        assert stranger.poll() is None  # still alive: not ours to kill
    finally:
        stranger.kill()
        stranger.wait()


def test_a_killed_agent_is_reported_lost_and_frees_its_slot(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec("lab-east-b"))
    wait_for(lambda: state_of(provider, inst.provider_id).state == "running", what="running")
    assert inst.pid is not None
    os.kill(inst.pid, signal.SIGKILL)
    wait_for(lambda: state_of(provider, inst.provider_id).state == "lost", what="lost")
    assert provider.state.r.scard(provider.state.keys.pool("lab-east-b", "cpu-2")) == 0
    final = provider.state.record(inst.provider_id)
    assert final is not None and (final.state, final.exit_code) == ("lost", None)
    assert final.end_reason == "process gone without a final record"


def test_reservations_run_apart_from_the_zones_capacity(provider: LocalProvider) -> None:
    reserved = spec("lab-east-a", "gpu-a100-8", market="reserved", reservation_id="r-a100")
    [a] = provider.launch(reserved)
    assert a.market == "reserved"
    aws_style = {
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": "r-a100"}
        }
    }
    [b] = provider.launch(spec("lab-east-a", "p4d.24xlarge", advanced_instance_config=aws_style))
    assert (b.market, b.instance_type) == ("reserved", "gpu-a100-8")
    with pytest.raises(CapacityError, match="reservation r-a100") as info:
        provider.launch(spec("lab-east-a", "gpu-a100-8", reservation_id="r-a100"))
    assert info.value.code == "ReservationCapacityExceeded"
    with pytest.raises(InvalidRequestError):
        provider.launch(spec("lab-east-a", "gpu-a100-8", market="reserved"))  # no id
    with pytest.raises(InvalidRequestError):
        provider.launch(spec("lab-east-a", "gpu-a100-8", reservation_id="r-cpu-b"))  # elsewhere
    provider.terminate([a.provider_id])
    [c] = provider.launch(reserved.model_copy(update={"attempt_id": "att-after"}))
    assert c.market == "reserved"


def test_requests_the_cloud_cannot_serve_are_invalid(provider: LocalProvider) -> None:
    with pytest.raises(InvalidRequestError) as info:
        provider.launch(spec("lab-east-b", "cpu-4"))  # the zone does not offer it
    assert info.value.scope == Scope.ZONE
    with pytest.raises(InvalidRequestError) as info:
        provider.launch(spec("lab-east-a", "cpu-4", market="spot"))  # no spot price
    assert info.value.scope == Scope.INSTANCE_TYPE
    with pytest.raises(InvalidRequestError):
        provider.launch(spec(region="lab-faults"))
    assert provider.describe() == []


def test_describe_filters_by_tags(provider: LocalProvider) -> None:
    [a] = provider.launch(spec(tags={"team": "vision"}))
    provider.launch(spec(tags={"team": "nlp"}))
    assert [i.provider_id for i in provider.describe({"team": "vision"})] == [a.provider_id]
    assert provider.describe({"corral-request": "req-1", "team": "none"}) == []
    assert len(provider.describe({"corral-managed": "true"})) == 2


def test_describe_launches_reports_those_launches_alone_as_describe_does(
    provider: LocalProvider,
) -> None:
    two = provider.launch(spec(count=2))
    other = provider.launch(spec())
    attempt = two[0].tags["corral-attempt"]
    narrow = provider.describe_launches([attempt, "att-never-launched"])
    assert sorted(i.provider_id for i in narrow) == sorted(i.provider_id for i in two)
    every = {i.provider_id: i for i in provider.describe()}
    assert other[0].provider_id in every
    for inst in narrow:  # the same report, narrowed (its state may move on between looks)
        same = every[inst.provider_id]
        assert (inst.zone, inst.pid, inst.tags) == (same.zone, same.pid, same.tags)
    assert provider.describe_launches([]) == []


def test_a_look_reads_each_launchs_bound_machines_once(
    provider: LocalProvider, redis_url: str
) -> None:
    # Which machines an attempt bound never changes once bound (only a launch that failed
    # gives its binding back, and a failed launch is not watched): the boot watch's looks
    # read the bindings of launches new to them only, not of every boot on every look.
    client = redis.Redis.from_url(redis_url)

    def mgets() -> int:
        return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))

    first = provider.launch(spec(count=2))
    attempt = first[0].tags["corral-attempt"]
    before = mgets()
    seen = provider.describe_launches([attempt])
    assert mgets() - before == 1
    assert sorted(i.provider_id for i in seen) == sorted(i.provider_id for i in first)
    second = provider.launch(spec())
    other = second[0].tags["corral-attempt"]
    before = mgets()
    again = provider.describe_launches([attempt, other, "att-not-bound-yet"])
    assert mgets() - before == 1  # the new launch's binding and the unbound attempt's look
    assert sorted(i.provider_id for i in again) == sorted(i.provider_id for i in first + second)
    before = mgets()
    provider.describe_launches([attempt, other])
    assert mgets() - before == 0


def test_describe_during_a_launch_never_calls_the_booting_node_lost(
    provider: LocalProvider,
) -> None:
    seen: set[str] = set()
    launched: list[ProviderInstance] = []
    launcher = threading.Thread(
        target=lambda: launched.extend(provider.launch(spec("lab-east-slow")))
    )
    launcher.start()
    while launcher.is_alive():
        seen.update(i.state for i in provider.describe())
    launcher.join()
    seen.update(i.state for i in provider.describe())
    assert "pending" in seen and "lost" not in seen
    wait_for(lambda: state_of(provider, launched[0].provider_id).state == "running", what="running")


def test_a_booting_machine_costs_the_host_nothing_until_its_boot_ends(
    provider: LocalProvider,
) -> None:
    # A booting machine should cost this host what a VM booting in a cloud costs: nothing. Its
    # agent used to be forked at the launch and sleep through the boot (a thousand launches
    # spent a third of their CPU on forks); the launcher now keeps the start until shortly
    # before the boot's end (at most 5 s: this boot is 60 s).
    assert provider._launcher is not None
    [inst] = provider.launch(spec("lab-east-long-boot"))
    assert inst.pid is None and state_of(provider, inst.provider_id).state == "pending"
    assert processes_of(inst.provider_id) == []
    assert inst.provider_id in launcher.ask(provider._launcher, {"kept": True})["kept"]
    started = time.monotonic()
    provider.terminate([inst.provider_id])
    took = time.monotonic() - started
    assert took < 2.0, f"a terminate during the boot took {took:.1f} s"
    assert state_of(provider, inst.provider_id).state == "terminated"
    # Its start is dropped: the machine never comes up.
    assert inst.provider_id not in launcher.ask(provider._launcher, {"kept": True})["kept"]


def test_an_agent_forked_ahead_of_its_boots_end_is_silent_until_then(
    provider: LocalProvider,
) -> None:
    # Boots that end together (a burst of launches) would queue a burst of forks behind their
    # end: the launcher forks each agent a little ahead (half this 1 s boot) and the agent
    # waits, unheard, for the boot's end.
    [inst] = provider.launch(spec("lab-east-boot-1s", run="sleep 30"))
    rec = provider.state.record(inst.provider_id)
    assert rec is not None and rec.start_at is not None
    boot_end = rec.created_at + 1.0
    assert processes_of(inst.provider_id) == []
    wait_for(lambda: processes_of(inst.provider_id) != [], 5, "the agent forked ahead")
    assert time.time() < boot_end, "the agent was forked only at its boot's end"
    waiting = provider.state.record(inst.provider_id)
    assert waiting is not None and waiting.pid is None and waiting.first_heartbeat_at is None
    assert state_of(provider, inst.provider_id).state == "pending"
    assert inst.provider_id in launcher.ask(provider._launcher or "", {"kept": True})["kept"]
    wait_for(lambda: state_of(provider, inst.provider_id).state == "running", what="running")
    up = provider.state.record(inst.provider_id)
    assert up is not None and up.first_heartbeat_at is not None
    assert up.first_heartbeat_at >= boot_end
    assert up.pid is not None and processes_of(inst.provider_id)[0] == up.pid
    assert inst.provider_id not in launcher.ask(provider._launcher or "", {"kept": True})["kept"]
    provider.terminate([inst.provider_id])


def test_a_terminate_kills_an_agent_that_waits_for_its_boots_end(
    provider: LocalProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    [inst] = provider.launch(spec("lab-east-boot-1s", run=f"touch {marker}; sleep 30"))
    wait_for(lambda: processes_of(inst.provider_id) != [], 5, "the agent forked ahead")
    provider.terminate([inst.provider_id])
    wait_for(lambda: processes_of(inst.provider_id) == [], 2, "the waiting agent killed")
    assert state_of(provider, inst.provider_id).state == "terminated"
    time.sleep(1.2)  # past the boot's end: nothing comes up
    rec = provider.state.record(inst.provider_id)
    assert rec is not None and rec.first_heartbeat_at is None and not marker.exists()
    assert processes_of(inst.provider_id) == []


def test_a_launcher_that_quits_kills_the_agents_that_wait(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec("lab-east-boot-1s"))
    wait_for(lambda: processes_of(inst.provider_id) != [], 5, "the agent forked ahead")
    launcher.stop(provider._launcher or "")
    wait_for(lambda: processes_of(inst.provider_id) == [], 2, "the waiting agent killed")
    time.sleep(1.2)
    rec = provider.state.record(inst.provider_id)
    assert rec is not None and rec.first_heartbeat_at is None  # a power cut: never up
    provider.terminate([inst.provider_id])


def test_an_agent_started_after_its_machine_was_terminated_does_not_run(
    provider: LocalProvider, tmp_path: Path
) -> None:
    """The launcher starts the agent at the boot's end; a terminate that came during the boot
    and could not reach the launcher (its cancel lost) still wins: the agent finds its machine
    terminating when it records its pid, and exits without running anything."""
    marker = tmp_path / "ran"
    [inst] = provider.launch(spec("lab-east-slow", run=f"touch {marker}; sleep 30"))
    assert inst.pid is None
    assert provider.state.set_state(inst.provider_id, "terminating") == 0  # no cancel sent
    log = Path(provider.state.record(inst.provider_id).log_path)  # type: ignore[union-attr]
    wait_for(lambda: "not starting" in log.read_text(), 10, "the agent's refusal")
    assert "the instance is terminating" in log.read_text()
    time.sleep(0.3)
    assert processes_of(inst.provider_id) == [] and not marker.exists()
    rec = provider.state.record(inst.provider_id)
    assert rec is not None and rec.pid == 0 and rec.first_heartbeat_at is None


def test_an_agent_started_at_its_boots_end_records_its_own_pid(provider: LocalProvider) -> None:
    [inst] = provider.launch(spec("lab-east-slow", run="sleep 30"))
    assert inst.pid is None
    wait_for(lambda: state_of(provider, inst.provider_id).state == "running", what="running")
    up = state_of(provider, inst.provider_id)
    assert up.pid is not None and processes_of(inst.provider_id)[0] == up.pid
    assert pid_belongs_to(up.pid, inst.provider_id)
    # A second agent for the same machine (a resumed launch that started one too) does not run.
    second = launcher.start_agent(
        provider._launcher or "",
        provider.python,
        {
            "argv": ["--instance-id", inst.provider_id, "--prefix", provider.prefix, "--own-pid"],
            "log": str(provider.log_dir / "second.log"),
            "env": {"CORRAL_REDIS_URL": provider.redis_url},
            "name": inst.provider_id,
        },
    )
    log = provider.log_dir / "second.log"
    wait_for(lambda: "not starting" in log.read_text(), 10, "the second agent's refusal")
    assert "the instance is already started" in log.read_text()
    assert second is not None and not pid_belongs_to(second, inst.provider_id)
    provider.terminate([inst.provider_id])


def test_an_agent_whose_heartbeats_stop_is_lost(redis_url: str, tmp_path: Path) -> None:
    quick = LocalProvider(
        CLOUD, redis_url, log_dir=tmp_path, heartbeat_s=0.1, heartbeat_timeout_s=0.6,
        terminate_grace_s=1.0,
    )  # fmt: skip
    [inst] = quick.launch(spec())
    try:
        wait_for(lambda: state_of(quick, inst.provider_id).state == "running", what="running")
        assert inst.pid is not None
        os.kill(inst.pid, signal.SIGSTOP)  # alive, but silent
        wait_for(lambda: state_of(quick, inst.provider_id).state == "lost", what="lost")
        assert quick.pid_belongs_to(inst.pid, inst.provider_id)
        os.kill(inst.pid, signal.SIGCONT)
    finally:
        quick.terminate([inst.provider_id])
    assert processes_of(inst.provider_id) == []
    assert state_of(quick, inst.provider_id).state == "terminated"


@pytest.mark.parametrize("through_launcher", [True, False])
def test_a_task_sees_no_secret_in_its_or_its_agents_environment(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, through_launcher: bool
) -> None:
    # Issue #27: a local task could read its parent's environment (CORRAL_REDIS_URL) and the
    # API token. Its own env, its agent's and the launcher's (/proc/<pid>/environ: what each
    # was started with) must hold neither.
    monkeypatch.setenv("CORRAL_API_TOKEN", "api-token-must-not-leak")
    monkeypatch.setenv("CORRAL_REDIS_URL", redis_url)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-key-must-not-leak")
    script = (
        "env; p=$PPID; for i in 1 2; do echo \"== $p\"; tr '\\0' '\\n' < /proc/$p/environ; "
        "p=$(awk '{print $4}' /proc/$p/stat); done"
    )
    with local_provider(CLOUD, redis_url, tmp_path / "logs") as p:
        if not through_launcher:
            p._launcher = None
        [inst] = p.launch(spec(run=script))
        done = wait_for(
            lambda: (i := state_of(p, inst.provider_id)).state == "terminated" and i,
            what="the task to end",
        )
        log = Path(p.log_dir / f"{inst.provider_id}.log").read_text()
    assert done.exit_code == 0, log
    assert log.count("== ") == 2, log  # the agent's and its parent's environments were read
    for secret in ("CORRAL_REDIS_URL", redis_url, "api-token-must-not-leak", "aws-key-must"):
        assert secret not in log, log


SHORT = parse_local_cloud(
    """
instance_types:
  - {name: gpu-a100-8, vcpus: 8, memory_gib: 16, accelerators: {A100: 8},
     price_usd_per_hour: 3.0, spot_price_usd_per_hour: 1.1}
regions:
  - name: lab-central
    zones:
      - name: lab-central-a
        capacity: {gpu-a100-8: 2}
        errors: {gpu-a100-8: {kind: capacity, market: spot}}
reservations:
  - {id: shared-a100, zone: lab-central-a, instance_type: gpu-a100-8, count: 1}
aliases:
  a2-highgpu-8g: gpu-a100-8
""",
    "short-cloud.yaml",
)
R = "lab-central"


def test_a_gcp_reservation_affinity_draws_on_the_reservation_it_names(
    redis_url: str, tmp_path: Path
) -> None:
    """The seed's GCP launch template names its reservation by a full resource path under
    instanceProperties.reservationAffinity (shared/reservations.py's one reading): read only
    the AWS way, the reserved machines ran outside the reservation."""
    gcp_style = {
        "instanceProperties": {
            "reservationAffinity": {
                "consumeReservationType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": ["projects/my-project/reservations/shared-a100"],
            }
        }
    }
    with local_provider(SHORT, redis_url, tmp_path / "logs") as p:
        template = spec(
            "lab-central-a", "a2-highgpu-8g", region=R, advanced_instance_config=gcp_style
        )
        [a] = p.launch(template)
        assert a.market == "reserved"
        with pytest.raises(CapacityError, match="reservation shared-a100 has 0 of 1"):
            p.launch(template.model_copy(update={"attempt_id": "att-second"}))
        p.terminate([a.provider_id])


def test_an_injected_error_for_one_market_leaves_the_other_alone(
    redis_url: str, tmp_path: Path
) -> None:
    with local_provider(SHORT, redis_url, tmp_path / "logs") as p:
        with pytest.raises(CapacityError, match="injected"):
            p.launch(spec("lab-central-a", "gpu-a100-8", region=R, market="spot"))
        [inst] = p.launch(spec("lab-central-a", "gpu-a100-8", region=R, attempt_id="att-od"))
        assert inst.market == "on_demand"
        p.terminate([inst.provider_id])
