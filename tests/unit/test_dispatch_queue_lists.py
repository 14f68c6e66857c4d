"""Each Celery queue is one Redis list: Corral sends no message priorities, so kombu's four
lists per queue (one per priority step) only made every BRPOP name four keys per queue."""

from __future__ import annotations

from pathlib import Path

import redis
from celery import Celery

from corral.services.queues import dispatch
from corral.services.settings import Settings


def _app(redis_url: str, tmp_path: Path) -> Celery:
    settings = Settings(redis_url=redis_url, home=tmp_path, prefix="lists")
    app = Celery("lists", set_as_current=False)
    app.conf.update(dispatch.celery_config(settings))
    return app


def test_a_consumer_waits_on_one_key_per_queue(redis_url: str, tmp_path: Path) -> None:
    with _app(redis_url, tmp_path).connection_for_read() as conn:
        channel = conn.default_channel
        assert channel.priority_steps == [0]
        assert {channel._q_for_pri("provision", p) for p in (0, 3, 6, 9)} == {"provision"}


def test_a_message_sent_with_a_priority_lands_in_the_one_list(
    redis_url: str, tmp_path: Path
) -> None:
    app = _app(redis_url, tmp_path)
    client = redis.Redis.from_url(redis_url)
    client.delete("lists-q")
    app.send_task(dispatch.ADMIT, ["r1", "local"], queue="lists-q", priority=9)
    settings = Settings(redis_url=redis_url, home=tmp_path, prefix="lists")
    dispatch.send(dispatch.ADMIT, ["r2", "local"], queue="lists-q", settings=settings)
    assert client.llen("lists-q") == 2
    assert client.keys("lists-q?*") == []
