"""The API's pulse (issue #23 item 8): cloud machines report through the API, so while no API
pulses their silence is nobody's fault, and after it returns it counts from its return. On
the test's redis-server (Redis's own clock, as in production)."""

from __future__ import annotations

import time

import redis

from corral.services.state.nodes import NodeBook, NodeName
from corral.services.state.outage import OutageBook

GAP_S = 0.3


def _book(redis_url: str) -> OutageBook:
    return OutageBook(redis.Redis.from_url(redis_url), "t-pulse", GAP_S)


def test_no_api_ever_holds_nothing(redis_url: str) -> None:
    assert _book(redis_url).api_heard_since() == 0.0


def test_an_api_away_for_the_gap_holds_every_silence_until_it_is_back(redis_url: str) -> None:
    book = _book(redis_url)
    assert book.pulse_api() == 0.0
    assert book.api_heard_since() == 0.0  # pulsing: no outage seen
    time.sleep(GAP_S * 2)  # the API is away
    away = book.api_heard_since()
    assert abs(away - time.time()) < 0.5  # now: nobody can hear the machines
    back = book.pulse_api()  # the API's first pulse on return ends the outage
    assert back >= away and book.api_heard_since() == back
    assert float(book.r.hget(book.api_key, "began_at") or 0) < back


def test_a_node_silent_through_an_api_outage_is_held_not_lost(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    book = OutageBook(client, "t-nodes", GAP_S)
    nodes = NodeBook(client, "t-nodes", secret="s", outage=book)
    node = NodeName("aws", "a1", 0)
    book.pulse_api()
    nodes.register(node, "i-1", time.time())
    nodes.heartbeat(node, {"activity": "running"}, ttl_s=0.2, now=time.time())
    for _ in range(6):  # Redis is up and pulsing all along; the API stopped pulsing
        time.sleep(0.1)
        book.pulse()
    view = nodes.view(node)
    assert view.beat is None and view.held  # the API was away: not the machine's fault
    for _ in range(4):  # the API is back; the node stays silent a whole TTL past its return
        book.pulse_api()
        assert book.pulse() == 0.0  # no Redis outage in all this
        time.sleep(0.1)
    assert not nodes.view(node).held  # silent while the API listened: lost
