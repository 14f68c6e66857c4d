"""The console's HTML helpers (services/api/console/html.py): user data is escaped in every
new kind of cell (times, mappings, nested rows), times carry their epoch for the browser to
format in its zone with the server's UTC as the text without a script, and a page loads no
external script and asks for no /favicon.ico."""

from __future__ import annotations

import re
from types import SimpleNamespace

from corral.services.api.console.html import cell, duration, fields, page, records, when

EVIL = '<script>alert("x")</script>'


def test_times_carry_their_epoch_and_a_utc_fallback() -> None:
    shown = when(1_800_000_000.0)
    assert 'data-t="1800000000.000"' in shown
    assert "2027-01-15 08:00:00 UTC" in shown and 'datetime="2027-01-15T08:00:00Z"' in shown
    assert when(None) == "-" and when(0) == "-"


def test_cells_escape_keys_and_values_at_every_depth() -> None:
    nested = {
        "labels": {EVIL: EVIL},
        "machines": [{"name": EVIL, "applied_at": 1.9e9}],
        "x": [EVIL],
    }
    html = fields(nested, list(nested)) + records([nested]) + cell("k", EVIL)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<time data-t=" in cell("applied_at", 1.9e9)  # a time key as a time
    assert cell("count", 1.9e9) == "1900000000.0"  # a number that is not a time stays one
    assert cell("by_type", {}) == "-" and cell("tags", []) == "-"


def test_a_page_has_no_external_script_an_inline_favicon_and_a_sign_out() -> None:
    who = SimpleNamespace(name=EVIL, role="viewer")
    html = page(EVIL, "<p>body</p>", "/console/requests", refresh_s=5, who=who)
    assert not re.search(r"<script[^>]*\bsrc=", html)
    assert '<link rel="icon" href="data:image/svg+xml,' in html
    assert 'id="sign-out"' in html and 'data-refresh="5"' in html
    assert EVIL not in html  # the title and the user's name, escaped


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (None, 5, 125, 7300)] == ["-", "5s", "2m 05s", "2h 01m"]
