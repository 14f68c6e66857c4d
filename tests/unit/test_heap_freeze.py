"""What a long-lived process loaded at its start is frozen out of the collector's sight
(corral.services.runtime.heap): in a worker before it forks its pool and in each pool process
once warmed up, in the API once warmed up when it is the process's whole life, and never in a
process that makes API apps by the dozen (this test suite). Each case runs in a fresh
interpreter, whose collector this test may change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(probe: str, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CORRAL_HOME": str(tmp_path / "home"),
        "CORRAL_REDIS_URL": redis_url,
        "CORRAL_API_TOKEN": "test-token-not-secret",
        "CORRAL_CLOUDS": '["local"]',
    }


def test_freezing_collects_first_when_asked_and_freezes_what_is_alive(
    env: dict[str, str],
) -> None:
    probe = """
import gc, weakref
from corral.services.runtime.heap import freeze_loaded

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

gone = cycle()  # garbage, in a cycle: only a collection frees it
gc.disable()  # no collection but the one asked for
print(gc.get_freeze_count() == 0, gone() is not None)
freeze_loaded(collect=True)
print(gone() is None, gc.get_freeze_count() > 0)
later = cycle()
freeze_loaded()  # no collection: the new cycle is frozen with the rest, not freed
print(later() is not None)
"""
    assert _run(probe, env) == ["True"] * 5


API_PROBE = """
import asyncio, gc, sys, threading
from corral.services.api.app import create_app

app = create_app(own_process=sys.argv[1] == "own")

async def main():
    async with app.router.lifespan_context(app):
        for t in threading.enumerate():
            if t.name == "warm-up":
                t.join(60)
        print(gc.get_freeze_count() > 0)

asyncio.run(main())
"""


@pytest.mark.parametrize(("own", "frozen"), [("own", "True"), ("shared", "False")])
def test_the_api_freezes_its_start_only_as_its_process_s_whole_life(
    env: dict[str, str], own: str, frozen: str
) -> None:
    assert _run(API_PROBE.replace("sys.argv[1]", repr(own)), env) == [frozen]


def test_a_worker_freezes_before_forking_and_each_pool_process_after_its_warm_up(
    env: dict[str, str],
) -> None:
    probe = """
import gc, threading
from celery.signals import worker_init, worker_process_init
from corral.workers import app as worker_app

before = gc.get_freeze_count()
worker_init.send(sender=None)  # what Celery sends in the worker before it starts its pool
forked = gc.get_freeze_count()
gc.unfreeze()
worker_process_init.send(sender=None)  # ... and in each pool process as it starts
for t in threading.enumerate():
    if t.name == "warm-up":
        t.join(60)
print(before == 0, forked > 0, gc.get_freeze_count() > 0)
"""
    assert _run(probe, env) == ["True", "True", "True"]
