"""Machine pools at run time, on a real system (API, scheduling and provisioning workers, beat)
and the local cloud: the seed's pool and compute config (instance types and reservation id
changed to local ones) filling reserved -> spot -> on-demand, preemption with requeue, the
thrash guard, replacement, and four schedulers racing on one partition.

Every test shares one installation (``pools_system``): each applies pools of its own names,
and after it every request is taken down, every pool deleted and every machine gone, so the
next finds the local cloud (and its reservation) free."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from corral.services.cli.pools_api_cmd import pool_body
from corral.services.client import Client
from corral.services.state.pool_store import pool_ledgers
from corral.services.state.store import Store

from harness import System, wait_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLOUD = FIXTURES / "localcloud" / "pools.yaml"
SEED_POOL = FIXTURES / "pools" / "seed-pool-local.yaml"
SEED_COMPUTE = FIXTURES / "seeds" / "anyscale-compute-config-aws.yaml"
POOL = "demo-machine-pool"  # the name the seed's compute config uses

pytestmark = pytest.mark.integration


# The shared installation's: the thrash test's guard (2 s) is everyone's; only preemption
# reads it, and only the preemption tests preempt.
MIN_RUNTIME_S = 2.0


def start(make_system: Any, workers: int = 1, cloud: Path = CLOUD, **timers: str) -> System:
    system: System = make_system(
        cloud,
        MIN_RUNTIME_S=timers.pop("MIN_RUNTIME_S", "1"),
        POOL_REBALANCE_INTERVAL_S=timers.pop("POOL_REBALANCE_INTERVAL_S", "0.5"),
        REPLACEMENT_GUARD_S=timers.pop("REPLACEMENT_GUARD_S", "30"),
        **timers,
    )
    system.start_api()
    for _ in range(workers):
        system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    return system


def shared_cloud(tmp: Path) -> Path:
    """pools.yaml with one more instance type, cpu-4, sold out (capacity 0): the sent-back
    test's third machine, which cannot launch. No other test asks for it."""
    cloud = yaml.safe_load(CLOUD.read_text())
    cloud["instance_types"].append(
        {"name": "cpu-4", "vcpus": 4, "memory_gib": 8, "price_usd_per_hour": 0.20}
    )
    [zone] = cloud["regions"][0]["zones"]
    zone["capacity"]["cpu-4"] = 0
    path = tmp / "pools-and-sold-out.yaml"
    path.write_text(yaml.safe_dump(cloud))
    return path


@pytest.fixture(scope="module")
def shared(
    make_module_system: Callable[..., System], tmp_path_factory: pytest.TempPathFactory
) -> System:
    # Four scheduling workers and two provisioning ones, for the racing test: an installation
    # of its own cost a whole start (eight processes, about 10 s of CPU); the other tests
    # only gain from placing through four racing schedulers. pool_min_machines only matters
    # where idle machines are reaped: the reaping test's pool.
    system = start(
        make_module_system,
        workers=4,
        cloud=shared_cloud(tmp_path_factory.mktemp("pools-cloud")),
        MIN_RUNTIME_S=str(MIN_RUNTIME_S),
        POOL_MIN_MACHINES="1",
        # The sent-back test's sold-out group is passed over 3 s (not 1 min) after each failure,
        # and its refusal remembered 3 s (not 3 min: while every place of a type is blocked
        # no machine of it is booked), so its placement is tried again within its wait
        # (tests/integration/test_pool_fallback.py plays the defaults).
        POOL_RETRY_INITIAL_S="1",
        POOL_AVOID_INITIAL_S="3",
        BLOCKED_TTL_S="3",
    )
    system.start_worker("provision")
    return system


@pytest.fixture
def pools_system(shared: System) -> Iterator[System]:
    """The module's installation as a fresh one: after the test, its requests end, its pools
    are deleted and their machines terminated."""
    yield shared
    shared.clear()


def api(system: System) -> Client:
    """The client `corral launch`, `pools apply`, `why` and `terminate` use, called in this
    process: a `corral` process per call cost most of a second of CPU on a loaded machine,
    about a third of this module's time (the commands' own output: test_pools_api.py,
    test_cli_runtime.py)."""
    return Client(system.api_url, system.token)


def apply(system: System, path: Path, name: str = POOL) -> None:
    """``corral pools apply PATH --name NAME``: the file read and checked as the command does."""
    with api(system) as client:
        client.apply_pool(**pool_body(path, name, None))


def task_file(
    tmp: Path, name: str, compute: Path | dict[str, Any] = SEED_COMPUTE, **fields: Any
) -> Path:
    """A workload's task file; the compute config as a path (the CLI inlines it) or inline."""
    doc = {"name": name, "compute_config": str(compute) if isinstance(compute, Path) else compute}
    doc.update(fields)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def launch(system: System, path: Path) -> str:
    """``corral launch PATH``: its compute config path inlined as the command does."""
    with api(system) as client:
        return str(client.launch(path).id)


def terminate(system: System, request_id: str) -> None:
    with api(system) as client:
        client.terminate(request_id)


def pool_view(system: System, name: str = POOL) -> dict[str, Any]:
    resp = system.get(f"/v1/pools/{name}")
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def why_code(system: System, request_id: str) -> str:
    """Why the request waits, in one word, of the API (for a look repeated in a wait)."""
    return str(system.get(f"/v1/requests/{request_id}/why").json()["code"])


def why(system: System, request_id: str) -> dict[str, Any]:
    """What `corral why ID --json` prints."""
    with api(system) as client:
        found: dict[str, Any] = client.why(request_id).document()
    return found


def placed(system: System, request_id: str) -> list[tuple[str, str]]:
    """(machine type, market) of each running worker node of a request (not its head)."""
    req = system.request(request_id)
    return sorted(
        (i["machine_type"], i["market"])
        for i in req["instances"]
        if i["state"] == "RUNNING" and i["machine_type"] != "head_node"
    )


def heads(system: System, request_id: str) -> list[dict[str, Any]]:
    req = system.request(request_id)
    return [i for i in req["instances"] if i["machine_type"] == "head_node"]


class SizeWatch:
    """Reads the pool's ledger in Redis all along and keeps the most machines any partition
    ever held (machines on their way out included)."""

    def __init__(self, system: System, name: str = POOL) -> None:
        url = system.env["CORRAL_REDIS_URL"]
        self.ledgers = pool_ledgers(redis.Redis.from_url(url), "corral")
        self.name = name
        self.high: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ledger = self.ledgers.get(self.name)
            if ledger is not None:
                now = Counter(
                    f"{m.machine_type}/{m.partition}"
                    for m in ledger.machines.values()
                    if not m.head  # a head node is outside the pool
                )
                for key, count in now.items():
                    self.high[key] = max(self.high[key], count)
                self.samples += 1
            time.sleep(0.01)

    def stop(self) -> Counter[str]:
        self._stop.set()
        self._thread.join(5)
        return self.high


def test_the_seed_pool_fills_reserved_then_spot_then_on_demand(
    pools_system: System, tmp_path: Path
) -> None:
    system = pools_system
    apply(system, SEED_POOL)
    watch = SizeWatch(system)
    ids = []
    for i in range(3):
        ids.append(launch(system, task_file(tmp_path, f"train-{i}", num_nodes=2, run="sleep 300")))
        system.wait_state(ids[-1], {"RUNNING"}, 60)
    assert placed(system, ids[0]) == [("reserved-a100", "reserved")] * 2
    # The head node (m5.2xlarge, played by cpu-2) is launched outside the pool.
    [head] = heads(system, ids[0])
    assert (head["instance_type"], head["market"], head["state"]) == (
        "cpu-2",
        "on_demand",
        "RUNNING",
    )
    assert placed(system, ids[1]) == [("spot-a100", "spot")] * 2
    assert placed(system, ids[2]) == [("ondemand-a100", "on_demand")] * 2

    late = launch(system, task_file(tmp_path, "late", num_nodes=2, run="echo done"))
    wait_for(lambda: why_code(system, late) == "partition_full", 20, "late to wait")
    assert system.request(late)["state"] == "PENDING"
    explained = why(system, late)["reason"]
    assert "reserved-a100/any: 2 of 2 held" in explained, explained

    # The first workload ends: the late one takes its reserved machines, warm (no launch).
    reserved_before = {
        m["id"] for m in pool_view(system)["machines"] if m["machine_type"] == "reserved-a100"
    }
    terminate(system, ids[0])
    done = system.wait_state(late, {"SUCCEEDED"}, 60)
    assert {i["machine_type"] for i in done["instances"]} == {"reserved-a100", "head_node"}
    assert all(i["state"] == "TERMINATED" for i in done["instances"])
    wait_for(lambda: heads(system, ids[0])[0]["state"] == "TERMINATED", 20, "its head to end")
    reserved_after = {
        m["id"] for m in pool_view(system)["machines"] if m["machine_type"] == "reserved-a100"
    }
    assert reserved_after == reserved_before
    high = watch.stop()
    assert watch.samples > 50
    assert max(high.values()) == 2 and set(high) == {
        "reserved-a100/any",
        "spot-a100/any",
        "ondemand-a100/any",
    }
    # The local cloud ran the reserved machines against the reservation (its market says so).
    markets = {
        m["machine_type"]: m["market"]
        for m in pool_view(system)["machines"]
        if m["machine_type"] != "head_node"
    }
    assert markets == {
        "reserved-a100": "reserved",
        "spot-a100": "spot",
        "ondemand-a100": "on_demand",
    }


SMALL_POOL: dict[str, Any] = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "cpu-2"}],
            "partitions": [{"name": "shared", "size": 2}],
        }
    ],
}


def small_compute(pool: str = "small") -> dict[str, Any]:
    """A compute config of one ``cpu`` node from ``pool``."""
    flags = {"cloud_deployment": {"machine_pool": pool}}
    return {"worker_nodes": [{"instance_type": "cpu", "flags": flags}]}


SMALL_COMPUTE = small_compute()


def small_pool(system: System, tmp: Path, name: str = "small") -> dict[str, Any]:
    """SMALL_POOL registered as ``name``; the compute config that uses it."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(SMALL_POOL))
    apply(system, path, name)
    return small_compute(name)


def store(system: System) -> Store:
    """The system's records, read straight from its Redis."""
    return Store(redis.Redis.from_url(system.env["CORRAL_REDIS_URL"]), prefix="corral")


def history(system: System, request_id: str) -> list[dict[str, Any]]:
    resp = system.get(f"/v1/requests/{request_id}/events")
    assert resp.status_code == 200, resp.text
    events: list[dict[str, Any]] = resp.json()["events"]
    return events


def test_a_higher_priority_workload_preempts_the_newest_lowest_which_requeues(
    pools_system: System, tmp_path: Path
) -> None:
    system = pools_system
    compute = small_pool(system, tmp_path, "small-preempt")
    low = []
    for i in range(2):
        low.append(
            launch(
                system,
                task_file(tmp_path, f"low-{i}", compute, priority=0, run="sleep 300"),
            )
        )
        system.wait_state(low[-1], {"RUNNING"}, 60)
    time.sleep(MIN_RUNTIME_S + 0.2)  # past min_runtime_s
    # The high workload runs until the test lets it end (its agent is a process on this
    # machine): until the later low workload is seen queued, not a sleep that guessed how long
    # the steps before take.
    release = tmp_path / "high-may-end"
    high = launch(
        system,
        task_file(
            tmp_path,
            "high",
            compute,
            priority=10,
            run=f"while [ ! -e {release} ]; do sleep 0.1; done",
            scheduling={"on_full": "preempt"},
        ),
    )
    victim = system.wait_state(low[1], {"PREEMPTED"}, 30)  # the newest of the lowest
    assert system.request(low[0])["state"] == "RUNNING"
    told = why(system, low[1])
    assert told["preempted_by"] == high, told
    assert high in told["reason"]
    assert victim["instances"]
    wait_for(
        lambda: all(i["state"] == "TERMINATED" for i in system.request(low[1])["instances"]),
        20,
        "the victim's work to stop",
    )
    # A later low workload queues behind the preempted one, which keeps its place.
    later = launch(system, task_file(tmp_path, "low-later", compute, run="sleep 300"))
    wait_for(lambda: why_code(system, later) == "partition_full", 20, "low-later to queue")
    release.touch()
    system.wait_state(high, {"SUCCEEDED"}, 60)
    system.wait_state(low[1], {"RUNNING"}, 30)
    assert system.request(later)["state"] == "PENDING"
    texts = [e["text"] for e in history(system, low[1])]
    assert any(f"preempted by {high}" in t for t in texts), texts


def test_no_thrash_under_a_stream_of_alternating_priorities(
    pools_system: System, tmp_path: Path
) -> None:
    min_runtime_s = MIN_RUNTIME_S
    system = pools_system
    compute = small_pool(system, tmp_path, "small-thrash")
    ids = []
    # Submitted to the API, not with `corral launch`: the stream is its 0.4 s apart (a CLI
    # process per launch, most of a second on a loaded machine, spread it out, and the run
    # waited for the launches rather than for the work).
    for i in range(8):
        fields = {"priority": 5 * (i % 2), "run": "sleep 2.5", "scheduling": {"on_full": "preempt"}}
        ids.append(system.submit({"name": f"w{i}", "compute_config": compute, **fields}))
        time.sleep(0.4)
    for rid in ids:
        system.wait_state(rid, {"SUCCEEDED"}, 120)
    records = store(system)
    priority = {rid: 5 * (i % 2) for i, rid in enumerate(ids)}
    preemptions = []
    for rid in ids:
        req = records.get_request(rid)
        assert req is not None
        since = None
        for move in req.history:
            if move.to_state == "PROVISIONING":
                since = move.at
            if move.to_state == "PREEMPTED":
                by = move.reason.removeprefix("preempted by ")
                preemptions.append((rid, by))
                # Never before it had run min_runtime_s since it was placed ...
                assert since is not None and move.at - since >= min_runtime_s - 0.05
                # ... and only by strictly higher work, so no two workloads take turns.
                assert priority[by] > priority[rid], (rid, by)
    # Each high-priority arrival needs one machine: it preempts one workload at most.
    preemptors = [by for _, by in preemptions]
    assert len(preemptors) == len(set(preemptors)) <= 4, preemptions


def seed_compute(pool: str) -> dict[str, Any]:
    """The seed's compute config with its workers from ``pool``."""
    compute: dict[str, Any] = yaml.safe_load(SEED_COMPUTE.read_text())
    for node in compute["worker_nodes"]:
        node["flags"]["cloud_deployment"]["machine_pool"] = pool
    return compute


def test_replacement_moves_a_fallen_back_workload_to_the_reservation(
    pools_system: System, tmp_path: Path
) -> None:
    system = pools_system
    pool = "replacing-pool"
    apply(system, SEED_POOL, pool)
    compute = seed_compute(pool)
    compute["flags"]["replacement_threshold"] = "2s"
    steady = seed_compute(pool)  # the blockers never move
    steady["flags"]["instance_ranking_strategy"][0]["ranker_config"]["enable_replacement"] = False
    blockers = []
    for name in ("hold-reserved", "hold-spot"):
        blockers.append(
            launch(
                system,
                task_file(tmp_path, name, steady, workload_type="service", num_nodes=2),
            )
        )
        system.wait_state(blockers[-1], {"RUNNING"}, 60)
    mover = launch(system, task_file(tmp_path, "mover", compute, run="sleep 300"))
    system.wait_state(mover, {"RUNNING"}, 60)
    assert placed(system, mover) == [("ondemand-a100", "on_demand")]

    terminate(system, blockers[0])  # the reservation frees
    freed_at = time.time()

    def moved() -> bool:
        return placed(system, mover) == [("reserved-a100", "reserved")]

    wait_for(moved, 30, "the mover to run on the reservation")
    assert time.time() - freed_at >= 2.0  # not before the threshold
    wait_for(
        lambda: all(
            m["machine_type"] != "ondemand-a100" for m in pool_view(system, pool)["machines"]
        ),
        20,
        "the on-demand machine to be retired",
    )
    records = store(system).list_instances(request_id=mover)
    better = next(r for r in records if r.machine_type == "reserved-a100")
    worse = next(r for r in records if r.machine_type == "ondemand-a100")
    ended = next(h for h in worse.history if h.to_state == "TERMINATED")
    assert better.created_at <= ended.at  # the better machine ran the work first
    assert "replaced by a better machine" in ended.reason
    assert system.request(mover)["state"] == "RUNNING"


def test_four_schedulers_racing_on_one_partition_never_exceed_its_size(
    pools_system: System, tmp_path: Path
) -> None:
    system = pools_system  # four scheduling workers, two provisioning ones
    pool = {
        **SMALL_POOL,
        "machine_types": [
            {**SMALL_POOL["machine_types"][0], "partitions": [{"name": "shared", "size": 3}]}
        ],
    }
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(pool))
    apply(system, path, "small")
    watch = SizeWatch(system, "small")
    body = {"name": "racer", "compute_config": SMALL_COMPUTE, "run": "sleep 0.5"}
    ids = [system.submit({**body, "name": f"racer-{i}"}) for i in range(20)]
    for rid in ids:
        system.wait_state(rid, {"SUCCEEDED"}, 180)
    high = watch.stop()
    assert high["cpu/shared"] == 3, high
    assert watch.samples > 100


def test_idle_machines_are_reaped_past_their_limit_reserved_last(
    pools_system: System, tmp_path: Path
) -> None:
    system = pools_system  # pool_min_machines = 1
    template = {"instance_type": "cpu-2"}
    reserved = {
        **template,
        "advanced_instance_config": {
            "CapacityReservationSpecification": {
                "CapacityReservationTarget": {"CapacityReservationId": "r-pool-cpu"}
            }
        },
    }
    pool = {
        "kind": "ANYSCALE_MANAGED",
        "machine_types": [
            {
                "machine_type": name,
                "launch_templates": [tpl],
                "recycle_policy": {"max_idle_duration": "2s"},
                "partitions": [{"name": "any", "size": 1}],
            }
            for name, tpl in (("reserved", reserved), ("ondemand", template))
        ],
    }
    path = tmp_path / "reaped.yaml"
    path.write_text(yaml.safe_dump(pool))
    apply(system, path, "reaped")
    compute = {
        "worker_nodes": [
            {"instance_type": t, "flags": {"cloud_deployment": {"machine_pool": "reaped"}}}
            for t in ("reserved", "ondemand")
        ]
    }
    rid = launch(system, task_file(tmp_path, "short", compute, num_nodes=2, run="sleep 1"))
    done = system.wait_state(rid, {"SUCCEEDED"}, 60)
    assert sorted(i["machine_type"] for i in done["instances"]) == ["ondemand", "reserved"]
    ended_at = time.time()
    machines = {m["machine_type"]: m for m in pool_view(system, "reaped")["machines"]}
    assert set(machines) == {"reserved", "ondemand"}  # warm for a while
    wait_for(
        lambda: (
            [m["machine_type"] for m in pool_view(system, "reaped")["machines"]] == ["reserved"]
        ),
        30,
        "the idle on-demand machine to be reaped",
    )
    assert time.time() - ended_at >= 1.5
    time.sleep(3)  # the reserved one stays: the pool keeps pool_min_machines = 1
    assert [m["machine_type"] for m in pool_view(system, "reaped")["machines"]] == ["reserved"]
    gone = machines["ondemand"]["provider_id"]
    with api(system) as client:
        left = [i.state for i in client.instances() if i.provider_id == gone]
    assert set(left) <= {"TERMINATED"}, left


def test_a_placement_sent_back_by_a_failed_launch_leaves_no_running_record_behind(
    pools_system: System, tmp_path: Path
) -> None:
    """A three-node workload gets two warm-able machines up and a third that cannot launch
    (its type is sold out): the workload goes back to the queue and is placed again, as often
    as the launch fails. The records of a placement that was sent back end with it: the
    request never shows more running nodes than it asked for, all of one placement (seen in
    CI on a loaded machine as eight running nodes for two three-node requests)."""
    system = pools_system  # its cloud's cpu-4 is sold out (capacity 0)
    pool = {
        "kind": "ANYSCALE_MANAGED",
        "machine_types": [
            {
                "machine_type": name,
                "launch_templates": [{"instance_type": itype}],
                "partitions": [{"name": "any", "size": size}],
            }
            for name, itype, size in (("small", "cpu-2", 2), ("big", "cpu-4", 1))
        ],
    }
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(pool))
    apply(system, path, "split")

    def compute(*types: str) -> dict[str, Any]:
        flags = {"cloud_deployment": {"machine_pool": "split"}}
        return {"worker_nodes": [{"instance_type": t, "flags": flags} for t in types]}

    # Two small machines warm first, so the three-node placement finds them up at once.
    warm = launch(system, task_file(tmp_path, "warm", compute("small"), num_nodes=2, run="true"))
    system.wait_state(warm, {"SUCCEEDED"}, 60)
    rid = launch(
        system, task_file(tmp_path, "three", compute("small", "big"), num_nodes=3, run="sleep 600")
    )

    def sent_back_twice() -> bool:
        texts = [str(e["text"]) for e in history(system, rid)]
        return sum("could not be launched" in t for t in texts) >= 2

    wait_for(sent_back_twice, 90, "the sold-out machine to fail twice")
    records = store(system).list_instances(request_id=rid)
    running = [i for i in records if i.state.value == "RUNNING"]
    assert len(running) <= 2, running  # only the small machines ever come up
    assert len({i.placement for i in running}) <= 1, running
    ended = [i for i in records if "sent back" in (i.history[-1].reason or "")]
    assert ended, "the first placement's records ended when it was sent back"
    terminate(system, rid)
