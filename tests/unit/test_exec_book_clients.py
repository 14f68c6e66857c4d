"""The exec book's node side is one protocol for both kinds of agent: the API runs it on
redis-py's client for cloud agents, the local agent on its own MiniRedis. The same steps, on a
real redis-server, through either client, read the same from the API's side."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis

from corral.services.queues.redis_conn import MiniRedis
from corral.services.state.execs import CUT_NOTE, ExecBook
from corral.shared.execs import MAX_OUTPUT_BYTES, job_queue_key


@pytest.fixture(params=["redis-py", "MiniRedis"])
def node_side(request: pytest.FixtureRequest, redis_url: str) -> Any:
    if request.param == "redis-py":
        return redis.Redis.from_url(redis_url)
    return MiniRedis.from_url(redis_url)


@pytest.fixture
def api(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def test_a_command_is_taken_its_output_kept_and_its_end_read(
    node_side: Any, api: redis.Redis
) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    user, node = ExecBook(api, prefix), ExecBook(node_side, prefix)
    xid = user.create("r-1", "i-1", "n-1", "echo hi", now=1.0)
    [item] = node.take("n-1")
    assert (item["id"], item["command"]) == (xid, "echo hi") and node.take("n-1") == []
    node.output(xid, b"hi\n\xff")
    node.done(xid, 3, "boom")
    seen = user.read(xid, 0)
    assert seen is not None
    assert (seen["state"], seen["exit_code"], seen["offset"]) == ("done", 3, 4)
    assert seen["output"] == "hi\n\ufffd"
    assert user.read(xid, 3)["output"] == "\ufffd"  # type: ignore[index]


def test_output_past_the_cap_ends_with_the_cut_note(node_side: Any, api: redis.Redis) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    xid = ExecBook(api, prefix).create("r-1", "i-1", "n-1", "yes", now=1.0)
    node = ExecBook(node_side, prefix)
    node.output(xid, b"x" * (MAX_OUTPUT_BYTES - 2))
    node.output(xid, b"yyyy")
    node.output(xid, b"zz")
    seen = ExecBook(api, prefix).read(xid, MAX_OUTPUT_BYTES - 2)
    assert seen is not None and seen["output"].encode() == b"yy" + CUT_NOTE


def test_a_queued_job_is_taken_first_by_its_number(node_side: Any, api: redis.Redis) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    queue = job_queue_key(prefix, "n-1")
    api.zadd(
        queue, {json.dumps({"id": "x-2", "job": 2}): 2, json.dumps({"id": "x-1", "job": 1}): 1}
    )
    node = ExecBook(node_side, prefix)
    assert node.take_job("n-1") == {"id": "x-1", "job": 1}
    assert api.hget(f"{prefix}:exec:x-1", "state") == b"running"
    assert node.take_job("n-1") == {"id": "x-2", "job": 2} and node.take_job("n-1") is None


def test_a_sessions_streams_carry_bytes_both_ways_and_end(node_side: Any, api: redis.Redis) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    user = ExecBook(api, prefix)
    xid = user.create("r-1", "i-1", "n-1", "", now=1.0, session={"kind": "shell"}, user="u")
    node = ExecBook(node_side, prefix)
    assert node.wait_pull(xid, "in", 0.1) is None
    assert user.push(xid, "in", b"ls\n", size=(24, 80))
    assert node.wait_pull(xid, "in", 0.1) == (b"ls\n", False, (24, 80))
    assert node.push(xid, "up", b"a\x00b", eof=True)
    assert user.pull(xid, "up") == (b"a\x00b", True, None)
    assert not node.gone(xid)
    user.end_sessions_of("u")
    assert node.gone(xid)


def test_the_local_agents_step_looks_at_both_queues_with_one_command(
    redis_url: str, api: redis.Redis
) -> None:
    """An agent's step takes commands, then (free) the next job: with both queues empty, one
    EXISTS answers both; with either holding something, each is taken as before."""
    from corral.services.providers.local.agent import RedisLink
    from corral.services.providers.local.state import CloudState, InstanceRecord

    prefix = f"t{uuid.uuid4().hex[:6]}"
    state = CloudState(MiniRedis.from_url(redis_url), prefix)  # type: ignore[arg-type]
    rec = InstanceRecord(
        id="li-1", request_id="r", attempt_id="a", region="r", zone="z", instance_type="t",
        market="on_demand", pool=state.keys.pool("z", "t"), log_path="-", created_at=0.0,
        vcpus=1.0, memory_gib=1.0,
    )  # fmt: skip
    link = RedisLink(state, rec, prefix)
    commands = ("exists", "lpop", "zpopmin")

    def looks() -> dict[str, int]:
        stats = api.info("commandstats")
        return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}

    before = looks()
    assert link.take_execs() == [] and link.take_job() is None
    after = looks()
    assert {c: after[c] - before[c] for c in commands} == {"exists": 1, "lpop": 0, "zpopmin": 0}
    user = ExecBook(api, prefix)
    xid = user.create("r", "i-1", "li-1", "echo hi", now=1.0)
    api.zadd(job_queue_key(prefix, "li-1"), {json.dumps({"id": "x-1", "job": 2}): 2})
    assert [i["id"] for i in link.take_execs()] == [xid]
    assert link.take_job() == {"id": "x-1", "job": 2} and link.take_job() is None
    api.zadd(job_queue_key(prefix, "li-1"), {json.dumps({"id": "x-3", "job": 3}): 3})
    assert link.take_execs() == [] and link.take_job() == {"id": "x-3", "job": 3}
