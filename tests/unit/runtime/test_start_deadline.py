"""How long a started machine's agents have to report again: ``start_deadline_s`` when set,
the attempt deadline otherwise (a start is a boot)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from corral.services.runtime.stopping import start_deadline_s
from corral.services.settings import Timers


def _deps(**timers: Any) -> Any:
    return SimpleNamespace(settings=SimpleNamespace(timers=Timers(**timers)))


def test_the_start_deadline_is_the_attempt_deadline_unless_set() -> None:
    assert start_deadline_s(_deps(attempt_deadline_s=45.0)) == 45.0
    assert start_deadline_s(_deps(attempt_deadline_s=45.0, start_deadline_s=5.0)) == 5.0
