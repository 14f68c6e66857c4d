"""The one byte relay (services/state/relay.py) on a real redis-server, through both clients it
runs on: redis-py's (the API's, raw replies) and the node agent's MiniRedis (text replies)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from corral.services.queues.redis_conn import MiniRedis
from corral.services.state import relay
from corral.services.state.relay import Stream


@pytest.fixture(params=["redis-py", "MiniRedis"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Any:
    if request.param == "redis-py":
        return redis.Redis.from_url(redis_url)
    return MiniRedis.from_url(redis_url)


@pytest.fixture
def real(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def _keys() -> tuple[str, str]:
    base = f"relay-{uuid.uuid4().hex[:8]}"
    return f"{base}:chunks", f"{base}:rec"


def test_a_numbered_append_is_kept_once_whatever_is_resent(client: Any) -> None:
    key, rec = _keys()
    s = Stream(key, 60, (rec, "bytes"))
    assert relay.append(client, s, b"hello ", at=0) == 6
    assert relay.append(client, s, b"hello world", at=0) == 11  # a resend: only "world" is new
    assert relay.append(client, s, b"world", at=6) == 11  # all of it already here
    assert relay.append(client, s, b"!", at=20) == 11  # a gap: nothing written, resync from 11
    assert relay.read_since(client, s, 0) == (0, b"hello world", 11)
    assert relay.read_since(client, s, 6) == (6, b"world", 11)
    assert relay.read_since(client, s, 11) == (11, b"", 11)
    assert relay.read_all(client, s) == b"hello world"


def test_binary_bytes_pass_through_unchanged(client: Any, real: redis.Redis) -> None:
    key, rec = _keys()
    s = Stream(key, 60, (rec, "bytes"))
    data = bytes(range(256))
    relay.append(client, s, data)
    assert relay.read_since(real, s, 0) == (0, data, 256)


def test_the_oldest_chunks_go_past_keep_bytes_and_the_cursor_skips_them(client: Any) -> None:
    key, rec = _keys()
    s = Stream(key, 60, (rec, "bytes"), kept="kept", keep_bytes=10)
    for at, piece in enumerate([b"aaaa", b"bbbb", b"cccc", b"dddd"]):
        relay.append(client, s, piece, at=4 * at)
    assert relay.read_all(client, s) == b"ccccdddd"  # 16 sent; at 12 > 10 the oldest went
    assert relay.read_since(client, s, 0) == (8, b"ccccdddd", 16)
    assert relay.read_since(client, s, 13) == (13, b"ddd", 16)


def test_past_max_bytes_the_rest_is_cut_with_a_note_then_dropped(client: Any) -> None:
    key, rec = _keys()
    s = Stream(key, 60, (rec, "bytes"), max_bytes=8)
    relay.append(client, s, b"12345", cut_note=b"[cut]")
    relay.append(client, s, b"6789", cut_note=b"[cut]")
    relay.append(client, s, b"more", cut_note=b"[cut]")
    assert relay.read_all(client, s) == b"12345678[cut]"


def test_every_write_renews_the_ttl_of_the_stream_and_its_touched_keys(
    client: Any, real: redis.Redis
) -> None:
    key, rec = _keys()
    real.set(rec, "1")
    relay.append(client, Stream(key, 60, (f"{rec}:c", "bytes")), b"x")
    assert 0 < real.ttl(key) <= 60
    drained = Stream(f"{key}:in", 300, touch=(rec,))
    assert relay.push(client, drained, relay.encode_entries(b"x"))
    assert 60 < real.ttl(f"{key}:in") <= 300 and 60 < real.ttl(rec) <= 300


def test_a_drained_stream_carries_bytes_a_size_and_its_end(client: Any) -> None:
    key, _ = _keys()
    s = Stream(key, 60)
    assert relay.push(client, s, relay.encode_entries(b"ls\n", size=(24, 80)))
    assert relay.push(client, s, relay.encode_entries(b"\x00\xff", eof=True))
    assert relay.push(client, s, relay.encode_entries(b"after the end"))
    got = relay.take(client, s, 64)
    assert relay.decode_entries(got) == (b"ls\n\x00\xff", True, (24, 80))  # nothing after it
    assert relay.take(client, s, 64) == []


def test_a_full_drained_stream_tells_the_writer_to_wait_and_takes_nothing(client: Any) -> None:
    key, _ = _keys()
    s = Stream(key, 60, max_pending=2)
    assert relay.push(client, s, ["a", "b"])
    assert relay.push(client, s, ["c"]) is False
    assert [e if isinstance(e, str) else e.decode() for e in relay.take(client, s, 1)] == ["a"]
    assert relay.push(client, s, ["c"])
    assert len(relay.take(client, s, 64)) == 2


def test_wait_take_returns_what_came_or_none(client: Any, real: redis.Redis) -> None:
    key, _ = _keys()
    s = Stream(key, 60)
    assert relay.wait_take(client, s, 0.1, 64) is None
    real.rpush(key, *relay.encode_entries(b"one"), *relay.encode_entries(b"two", eof=True))
    got = relay.wait_take(client, s, 0.1, 64)
    assert got is not None and relay.decode_entries(got) == (b"onetwo", True, None)


def test_push_runs_its_other_commands_in_the_same_transaction(
    client: Any, real: redis.Redis
) -> None:
    key, rec = _keys()
    s = Stream(key, 60)
    assert relay.push(
        client, s, relay.encode_entries(b"", eof=True), also=[("HSET", rec, "closed", 1)]
    )
    assert real.hget(rec, "closed") == b"1" and real.lrange(key, 0, -1) == [b""]
    assert relay.push(client, Stream(f"{key}:none", 60), [], also=[("HSET", rec, "x", 1)])
    assert real.hget(rec, "x") is None  # nothing to write: nothing done
