"""A task's arguments as Celery shows them (Flower, the worker's log): written by the
dispatcher with ``repr`` where Celery's ``saferepr`` would write the same text, else left to
Celery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.utils.saferepr import saferepr

from corral.services.queues import dispatch
from corral.services.settings import Settings

PLAIN: list[list[Any]] = [
    [],
    ["r-3f2a9c", "local"],
    ["r1", None, "terminated by the user"],
    ["pool-a", "m-1"],
    [1, -2, 2.5, 1e300, True, False, None, 10**30],
    ["a b,c=d+e@f:g/h_i.j"],
]
OTHER: list[list[Any]] = [
    ["it's"],
    ['a"b'],
    ["a\nb"],
    ["ü"],
    [{"task": {"run": "true"}}],
    [["nested"]],
    ["x" * 2000],
]


@pytest.mark.parametrize("args", PLAIN, ids=repr)
def test_plain_arguments_read_as_saferepr_writes_them(args: list[Any]) -> None:
    assert dispatch.plain_repr(args) == saferepr(args, 1024)


@pytest.mark.parametrize("args", OTHER, ids=lambda a: repr(a)[:20])
def test_other_arguments_are_left_to_celery(args: list[Any]) -> None:
    assert dispatch.plain_repr(args) is None


def test_a_sent_message_shows_its_arguments(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(redis_url=redis_url, home=tmp_path, prefix="argsrepr")
    dispatch.send(dispatch.ADMIT, ["r1", "local"], queue="argsrepr-q", settings=settings)
    dispatch.send(dispatch.SUBMIT, [{"run": "it's"}], queue="argsrepr-q", settings=settings)
    raw = redis.Redis.from_url(redis_url).lrange("argsrepr-q", 0, -1)
    shown = sorted(
        (m["headers"]["argsrepr"], m["headers"]["kwargsrepr"]) for m in map(json.loads, raw)
    )
    # The second is Celery's own writing (saferepr escapes the quote where repr would not).
    assert shown == [("['r1', 'local']", "{}"), (saferepr([{"run": "it's"}], 1024), "{}")]
