"""Autostop and autodown: SkyPilot's ``resources.autostop``, and when an idle machine goes.

The setting, as SkyPilot's task YAML writes it (``docs/services.md``):

- ``autostop: true`` stops after the default idle time (5 minutes); ``false`` (or absent): never;
- ``autostop: 10`` or ``autostop: "10m"`` (also ``"1h"``, ``"1d"``): that many idle minutes;
- ``autostop: {idle_minutes: 10, down: true}``: tear down (terminate) instead of stop.
  ``wait_for`` (``jobs_and_ssh``, ``jobs``, ``none``) is read; ``hook`` / ``hook_timeout``
  are refused (Corral runs no pre-stop hook).

Corral also takes a fractional number of minutes (``0.05``: three seconds), which tests use.

The decision (:func:`decide`) is pure: a node's idle-since time (from its agent's idle report),
the setting, whether the cloud can stop a machine, and ``now`` come in; what to do comes out.

Pure: the standard library and pydantic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

DEFAULT_IDLE_MINUTES = 5.0  # SkyPilot's, for ``autostop: true``
WAIT_FOR = ("jobs_and_ssh", "jobs", "none")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhd]?)\s*$", re.IGNORECASE)
_MINUTES_PER_UNIT = {"": 1.0, "m": 1.0, "h": 60.0, "d": 1440.0}


@dataclass(frozen=True, slots=True)
class Autostop:
    """A task's autostop: idle this long, then stop (or, ``down``, terminate)."""

    idle_minutes: float
    down: bool = False
    wait_for: str = "jobs_and_ssh"

    @property
    def idle_s(self) -> float:
        return self.idle_minutes * 60.0

    def to_json(self) -> dict[str, Any]:
        return {"idle_minutes": self.idle_minutes, "down": self.down, "wait_for": self.wait_for}


def _minutes(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected idle minutes (a number, or text like '10m'), got {value!r}")
    if isinstance(value, int | float):
        minutes = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        minutes = float(m.group(1)) * _MINUTES_PER_UNIT[m.group(2).lower()]
    else:
        raise ValueError(
            f"expected idle minutes: a number, or text like '10m', '2h' or '1d'; got {value!r}"
        )
    if minutes < 0:
        raise ValueError(f"expected idle minutes >= 0, got {value!r}")
    return minutes


def parse_autostop(value: object) -> Autostop | None:
    """``resources.autostop`` in any of SkyPilot's forms; None when off. Raises ValueError
    naming the expected forms."""
    if value is None or value is False:
        return None
    if value is True:
        return Autostop(DEFAULT_IDLE_MINUTES)
    if isinstance(value, dict):
        known = {"idle_minutes", "down", "wait_for", "hook", "hook_timeout"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(
                f"unknown autostop field(s) {', '.join(unknown)}; expected idle_minutes, down, "
                "wait_for"
            )
        if value.get("hook") is not None or value.get("hook_timeout") is not None:
            raise ValueError("autostop.hook is not supported by Corral (no pre-stop hook runs)")
        down = value.get("down", False)
        if not isinstance(down, bool):
            raise ValueError(f"expected autostop.down true or false, got {down!r}")
        wait_for = value.get("wait_for") or "jobs_and_ssh"
        if wait_for not in WAIT_FOR:
            raise ValueError(f"expected autostop.wait_for one of {', '.join(WAIT_FOR)}")
        raw = value.get("idle_minutes")
        minutes = DEFAULT_IDLE_MINUTES if raw is None else _minutes(raw)
        return Autostop(minutes, down=down, wait_for=str(wait_for))
    return Autostop(_minutes(value))


class Action(StrEnum):
    """What the control plane does with an idle machine."""

    NONE = "none"  # not idle long enough (or busy, or no word from its agent)
    STOP = "stop"  # stop it: the disk is kept, `corral start` brings it back
    DOWN = "down"  # terminate it (asked for, or the cloud cannot stop a machine)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    why: str = ""


def decide(
    idle_since: float | None, policy: Autostop | None, now: float, *, can_stop: bool
) -> Decision:
    """Whether a node idle since ``idle_since`` (None: busy, or no agent's word) goes now.
    ``can_stop``: its cloud stops machines (else a stop is a teardown)."""
    if policy is None or idle_since is None:
        return Decision(Action.NONE)
    idle_s = max(0.0, now - idle_since)
    if idle_s < policy.idle_s:
        return Decision(Action.NONE)
    why = f"autostop: idle {idle_s / 60:.2f} min (limit {policy.idle_minutes:g} min)"
    if policy.down:
        return Decision(Action.DOWN, why + ", autodown")
    if not can_stop:
        return Decision(Action.DOWN, why + ", torn down: its cloud cannot stop a machine")
    return Decision(Action.STOP, why)


def idle_since_of(
    beats: list[dict[str, Any] | None], *, wait_for: str = "jobs_and_ssh"
) -> float | None:
    """Since when every node of a request has been idle, from each node agent's last heartbeat
    (``ts`` and ``idle_s``, which the agent counts itself); None when any node is busy or
    silent. ``wait_for: none`` counts from the node's first report (running work does not
    hold it up), as SkyPilot's ``wait_for: none`` ignores activity."""
    if not beats:
        return None
    since = []
    for beat in beats:
        if not beat:
            return None
        ts = beat.get("ts")
        if not isinstance(ts, int | float):
            return None
        if wait_for == "none":
            up = beat.get("up_s")
            if not isinstance(up, int | float):
                return None
            since.append(float(ts) - float(up))
            continue
        idle = beat.get("idle_s")
        if not isinstance(idle, int | float) or isinstance(idle, bool):
            return None
        since.append(float(ts) - float(idle))
    return max(since)
