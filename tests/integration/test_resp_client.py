"""The node agent's small Redis client against a real redis-server."""

from __future__ import annotations

import pytest
import redis

from corral.services.queues.redis_conn import MiniRedis, RedisError

pytestmark = pytest.mark.integration


def test_commands_pipelines_and_scripts(redis_url: str) -> None:
    mini = MiniRedis.from_url(redis_url)
    real = redis.Redis.from_url(redis_url, decode_responses=True)
    assert mini.set("k", "v", px=10_000) is True
    assert mini.set("k", "other", nx=True) is False
    assert mini.get("k") == "v" and mini.get("missing") is None
    assert 0 < real.pttl("k") <= 10_000
    mini.hset("h", mapping={"a": 1, "b": "two"})
    mini.hset("h", "c", "3")
    assert mini.hsetnx("h", "a", "x") == 0
    assert mini.hgetall("h") == {"a": "1", "b": "two", "c": "3"}
    assert mini.incr("n") == 1 and mini.incr("n") == 2
    real.sadd("s", "x", "y")
    assert mini.srem("s", "x") == 1 and mini.smembers("s") == {"y"}

    pipe = mini.pipeline(transaction=True)
    pipe.set("p", "1", px=5000)
    pipe.hset("h", "d", "4")
    pipe.hsetnx("h", "e", "5")
    assert pipe.execute() == ["OK", 1, 1]
    pipe = mini.pipeline(transaction=False)
    pipe.hgetall("h")
    pipe.get("p")
    assert pipe.execute() == [{"a": "1", "b": "two", "c": "3", "d": "4", "e": "5"}, "1"]

    real.script_flush()
    script = mini.register_script("return redis.call('GET', KEYS[1]) .. ARGV[1]")
    assert script(keys=["k"], args=["!"]) == "v!"  # loaded through EVAL after NOSCRIPT
    assert script(keys=["k"], args=["?"]) == "v?"  # then by its SHA


def test_errors_are_redis_errors(redis_url: str) -> None:
    mini = MiniRedis.from_url(redis_url)
    mini.set("str", "x")
    with pytest.raises(RedisError, match="WRONGTYPE"):
        mini.hgetall("str")
    down = MiniRedis("127.0.0.1", 1, timeout_s=0.5)
    with pytest.raises(RedisError, match="cannot reach Redis"):
        down.get("k")
