"""The service endpoint's relay (services/api/serve.py): what it passes on to a replica and
what it gives back. A replica runs the user's code: none of Corral's credentials reach it."""

from __future__ import annotations

import httpx

from corral.services.api.console.auth import COOKIE
from corral.services.api.serve import _answer_headers, _passed_on
from corral.shared.serve.balance import Backend


def test_the_token_the_console_cookie_and_hop_by_hop_headers_stay_behind() -> None:
    sent = [
        ("Authorization", "Bearer secret-token"),
        ("Cookie", f"theme=dark; {COOKIE}=session-secret; cart=3"),
        ("Connection", "keep-alive"),
        ("Host", "api:8000"),
        ("Content-Type", "application/json"),
    ]
    passed = _passed_on(sent)
    assert passed == [("Cookie", "theme=dark; cart=3"), ("Content-Type", "application/json")]
    assert "secret" not in repr(passed)
    assert _passed_on([("cookie", f"{COOKIE}=only")]) == []


def test_the_answer_keeps_repeated_cookies_but_none_in_the_consoles_name() -> None:
    answer = httpx.Response(
        200,
        headers=[
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
            ("Set-Cookie", f"{COOKIE}=forged"),
            ("Transfer-Encoding", "chunked"),
            ("X-Model", "m"),
        ],
    )
    got = _answer_headers(answer, Backend(2, "http://r2:8080"))
    assert got == [
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("x-model", "m"),
        ("X-Corral-Replica", "2"),
    ]
