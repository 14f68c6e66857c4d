"""Models of the users' config files, read as their own systems write them.

One module per kind of file (``machine_pool``, ``compute_config``, ``master_config``, ``task``,
``cluster``); ``detect`` tells a file's kind and loads it. This package module holds the few
field helpers every model shares: closed choices with a message that lists them, and durations
written as ``30s``, ``1m``, ``2h`` or ``1h30m``. It imports no model module, so any model module
can import it without a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, get_args

from pydantic import BeforeValidator, PlainSerializer

# A duration is one or more <number><unit> parts, as Go (Determined) and Anyscale write them.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DURATION_HINT = "expected a duration like 30s, 1m or 2h"


def parse_duration_s(text: str) -> float:
    """``"30s"`` -> 30.0, ``"1h30m"`` -> 5400.0, ``"0"`` -> 0.0; ValueError otherwise."""
    cleaned = text.strip()
    if cleaned == "0":
        return 0.0
    pos = 0
    total_s = 0.0
    for match in _DURATION_PART.finditer(cleaned):
        if match.start() != pos:
            break
        total_s += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(cleaned):
        raise ValueError(f"{DURATION_HINT} (units ms, s, m, h, d), got {text!r}")
    return total_s


def _duration_s(value: object) -> object:
    if isinstance(value, str):
        return parse_duration_s(value)
    # A bare number is ambiguous (seconds? minutes?): these files always write a unit.
    raise ValueError(f"{DURATION_HINT} (with a unit), got {value!r}")


def _duration_text(value: float) -> str:
    return f"{value:g}s"


# A duration field: written as text in the file, held as seconds (float) in the model, and
# written back as text in JSON ("90s"), so a stored file validates again as it was.
DurationS = Annotated[
    float,
    BeforeValidator(_duration_s),
    PlainSerializer(_duration_text, return_type=str, when_used="json"),
]


def one_of(choices: Any, *, case_insensitive: bool = False) -> Callable[[object], object]:
    """A before-validator for a closed set of words (a ``Literal`` type or a tuple of words).

    The error lists the choices (``expected one of fair_share, priority, round_robin``), which
    pydantic's own literal message spells less plainly. With ``case_insensitive`` the value is
    returned in the spelling of the choice it matched.
    """
    words: tuple[str, ...] = tuple(get_args(choices) or choices)
    by_key = {(w.lower() if case_insensitive else w): w for w in words}

    def check(value: object) -> object:
        if value is None:
            return None  # an optional field left empty; a required one fails on its type
        if isinstance(value, str):
            key = value.strip().lower() if case_insensitive else value.strip()
            if key in by_key:
                return by_key[key]
        raise ValueError(f"expected one of {', '.join(words)}, got {value!r}")

    return check


def word_list(text: str) -> tuple[str, ...]:
    """``"aws gcp azure"`` -> ``("aws", "gcp", "azure")``: long name lists stay readable."""
    return tuple(text.split())


def words(text: str) -> frozenset[str]:
    """``"a b c"`` -> ``frozenset({"a", "b", "c"})`` (for key sets and the like)."""
    return frozenset(text.split())


__all__ = ["DURATION_HINT", "DurationS", "one_of", "parse_duration_s", "word_list", "words"]
