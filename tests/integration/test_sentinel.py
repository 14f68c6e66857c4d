"""Corral on Redis Sentinel: the API, the workers, beat and the local cloud's agents all reach
Redis through ``sentinel://`` URLs. The master is SIGKILLed while 20 services launch; the
sentinels promote the replica, and every request still ends RUNNING on exactly one instance,
none FAILED, nothing launched twice or left running."""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path

import pytest
import redis

from corral.services.queues.redis_conn import connect

from faults import SERVICE, SentinelGroup, account, cancel_all, submit_patiently, wait_settled
from harness import REPO, System, agent_pids, kill_agents, wait_for

pytestmark = pytest.mark.integration

LAUNCHES = 20


def test_master_killed_during_launches_fails_over_and_loses_nothing(tmp_path: Path) -> None:
    group = SentinelGroup(tmp_path / "redis")
    system = System(
        tmp_path / "home",
        group.url,
        REPO / "tests/fixtures/localcloud/crash.yaml",  # machines boot in a second
        BLOCKED_TTL_S="180",
        # Redis unreachable for 10 s is an outage (30 s as shipped). The failover is over 2-3 s
        # after the kill (1 s to be judged down, one election), so a client that follows it
        # rides through either way. A call in flight at the kill (a submit in the API, a task
        # in a pool process) stays on the dead master until its patience is spent, then fails
        # and is sent again: at 30 s the launches settled half a minute after the kill.
        REDIS_PATIENCE_S="10",
    )
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_beat()
        beat_log = system.home / "logs" / "beat.log"
        wait_for(lambda: "Acquired lock" in beat_log.read_text(), 60, "beat to lead")
        headers = {"Authorization": f"Bearer {system.token}"}
        # Everything is up and talking through the sentinels before the fault, and the
        # sentinels (which came to know each other while Corral started) can fail over.
        warm = system.submit({**SERVICE, "name": "warm"})
        system.wait_state(warm, {"RUNNING"}, 60)
        group.wait_ready()

        old = group.ports["master"]
        killer = threading.Timer(1.0, group.kill_master)
        killer.start()
        # A failover can outlast the API's patience: a submit it answered 503 is sent again
        # under its idempotency key, so it is taken once.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(
                pool.map(
                    lambda i: submit_patiently(system.api_url, headers, f"s-{i}"), range(LAUNCHES)
                )
            )
        killer.join()
        ids = [rid for rid in got if rid]
        refused = [i for i, rid in enumerate(got) if rid is None]
        promoted = group.master_port() not in (None, old)
        assert not refused, f"{refused[:3]}; promoted: {promoted}\n{group.tails()}"
        try:
            wait_for(lambda: group.master_port() not in (None, old), 30, "the replica's promotion")
        except pytest.fail.Exception as exc:
            raise AssertionError(f"{exc}\n{group.tails()}") from None

        rows = wait_settled(system.api_url, headers, ids, timeout_s=120)
        store = connect(group.url, patience_s=10, decode_responses=True)
        acc = account(system.api_url, headers, rows, _plain_url(store))
        print(f"sentinel failover: {acc.line()}")
        assert not acc.failed and not acc.not_settled, acc.line()
        assert not acc.launched_twice and not acc.shared, acc.line()

        # Nothing else runs: one agent per request (and the warm one), the rest terminated.
        rows.append(system.request(warm))
        live = [i["provider_id"] for r in rows for i in r["instances"] if i["state"] == "RUNNING"]

        def only_ours() -> bool:
            everything = list(store.smembers("corral:local:instances"))
            return sorted(agent_pids(everything)) == sorted(agent_pids(live))

        wait_for(only_ours, 60, "leftovers to be terminated", system.home / "logs")
        cancel_all(system.api_url, headers, [*ids, warm])
    finally:
        system.stop(grace_s=0)  # nothing left to finish: every request was cancelled
        kill_agents(system)
        group.stop()


def _plain_url(client: redis.Redis) -> str:
    """A redis:// URL of the master the client is on now (the account reads the local cloud)."""
    host, port = client.connection_pool.get_master_address()  # type: ignore[attr-defined]
    return f"redis://{host}:{port}/0"
