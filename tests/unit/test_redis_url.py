"""Redis URLs as Corral takes them, and the forms kombu and the agents' client need."""

from __future__ import annotations

import pytest
import redis
import redis.utils

from corral.services.cli.supervisor import masked_url
from corral.services.queues.redis_conn import (
    MiniRedis,
    RedisUrlError,
    broker_options,
    broker_url,
    connect,
    parse_redis_url,
)

SENTINEL = "sentinel://:pw@h1:26379;sentinel://:pw@h2:26380/2?master_name=corral"


def test_plain_urls() -> None:
    t = parse_redis_url("redis://:secret@127.0.0.1:6380/3")
    assert (t.scheme, t.db, t.password, t.is_sentinel) == ("redis", 3, "secret", False)
    assert broker_url(t) == t.url and broker_options(t) == {}


def test_sentinel_urls() -> None:
    t = parse_redis_url(SENTINEL)
    assert t.sentinels == (("h1", 26379), ("h2", 26380))
    assert (t.db, t.password, t.master_name) == (2, "pw", "corral")
    assert broker_url(t) == "sentinel://:pw@h1:26379;sentinel://:pw@h2:26380/2"
    assert broker_options(t)["master_name"] == "corral"
    assert parse_redis_url("sentinel://h:1").master_name == "mymaster"


@pytest.mark.parametrize("bad", ["", "http://h:1", "sentinel://h:1;redis://h:2", "redis://h:1/x"])
def test_bad_urls_say_what_was_expected(bad: str) -> None:
    with pytest.raises(RedisUrlError):
        parse_redis_url(bad)


def test_the_agents_client_reads_sentinel_urls() -> None:
    client = MiniRedis.from_url(SENTINEL)
    assert client.sentinels == [("h1", 26379), ("h2", 26380)]
    assert (client.db, client.password, client.master_name) == (2, "pw", "corral")


def test_a_sentinel_url_prints_without_its_passwords() -> None:
    printed = masked_url(SENTINEL)
    assert "pw" not in printed and printed.count("***") == 2


def test_a_new_connection_looks_no_package_metadata_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py 7.1+ reads its own version from the installed packages' metadata for each
    connection it makes (about 1 ms of CPU) unless a client gives it: Corral's give it, found
    once per process, and report the same name and version."""
    client = connect("redis://127.0.0.1:1/0", patience_s=0.1)  # nothing is dialled here
    looked_up: list[int] = []
    real = redis.utils.get_lib_version
    monkeypatch.setattr(redis.utils, "get_lib_version", lambda: looked_up.append(1) or real())
    made = [client.connection_pool.make_connection() for _ in range(3)]
    assert looked_up == []
    info = getattr(made[0], "driver_info", None)  # redis-py 7.1+
    if info is not None:
        assert (info.formatted_name, info.lib_version) == ("redis-py", redis.__version__)
