"""Accelerator requests as users write them (SkyPilot's ``resources.accelerators``).

Three forms, each meaning something different:

- one name, ``A100`` (count 1) or ``A100:8``: exactly that;
- a set, written as a YAML flow mapping ``{A10:1, L4:1, A10g:1}``: any of them, the cheapest
  launchable one wins (``ordered=False``);
- a list ``[A10:1, A10g:1, L4:1]``: the user's preference order, first launchable wins
  (``ordered=True``).

Names match case-insensitively: ``A10g`` is ``A10G``. Counts are whole numbers >= 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# A name is letters, digits and the separators real catalogs use (A100-80GB, tpu-v4-8, H100.x).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True, slots=True)
class AcceleratorOption:
    """One accelerator choice: a canonical (upper-case) name and a per-node count >= 1."""

    name: str
    count: int

    def __str__(self) -> str:
        return f"{self.name}:{self.count}"


@dataclass(frozen=True, slots=True)
class AcceleratorRequest:
    """The accelerators a task may run on, with how to choose among them."""

    options: tuple[AcceleratorOption, ...]
    ordered: bool  # True: a list (user's preference order); False: one name or a set (cheapest)

    def __str__(self) -> str:
        inner = ", ".join(str(o) for o in self.options)
        if len(self.options) == 1:
            return inner
        return f"[{inner}]" if self.ordered else f"{{{inner}}}"


def canonical_accelerator(name: str) -> str:
    """The catalog's spelling of an accelerator name: ``"a10g"`` -> ``"A10G"``.

    Raises ValueError for an empty name or one with characters no catalog uses.
    """
    cleaned = name.strip()
    if not _NAME.match(cleaned):
        raise ValueError(
            f"invalid accelerator name {name!r}: expected a name like A100, A10G or A100-80GB"
        )
    return cleaned.upper()


def _parse_count(raw: object, where: str) -> int:
    """A whole count >= 1 from an int, a whole float or a digit string."""
    if isinstance(raw, bool):
        raise ValueError(f"{where}: expected a whole accelerator count >= 1, got {raw!r}")
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if not isinstance(raw, int) or raw < 1:
        raise ValueError(f"{where}: expected a whole accelerator count >= 1, got {raw!r}")
    return raw


def _parse_one(text: str, count: object = None) -> AcceleratorOption:
    """``"A100"``, ``"A100:8"``, or a name with its count given separately (a mapping value)."""
    name, sep, written_count = text.strip().partition(":")
    if sep and count is not None:
        raise ValueError(
            f"accelerator {text!r} has a count in its name and a value {count!r}: give it once"
        )
    if sep:
        return AcceleratorOption(canonical_accelerator(name), _parse_count(written_count, text))
    if count is None:
        return AcceleratorOption(canonical_accelerator(name), 1)
    return AcceleratorOption(canonical_accelerator(name), _parse_count(count, text))


def _dedupe(options: Iterable[AcceleratorOption]) -> tuple[AcceleratorOption, ...]:
    """Drop repeated options (``A10g`` and ``A10G`` are one), keeping the first position."""
    return tuple(dict.fromkeys(options))


def _split_braced(text: str) -> list[str] | None:
    """``"{A10:1, L4:1}"`` or ``"[A10:1, L4:1]"`` written as one string -> its items."""
    if len(text) >= 2 and (text[0], text[-1]) in {("{", "}"), ("[", "]")}:
        return [part for part in (p.strip() for p in text[1:-1].split(",")) if part]
    return None


def _from_items(items: list[AcceleratorOption], ordered: bool) -> AcceleratorRequest:
    if not items:
        raise ValueError("expected at least one accelerator, got an empty collection")
    return AcceleratorRequest(_dedupe(items), ordered)


def _from_mapping(raw: Mapping[object, object]) -> AcceleratorRequest:
    items = []
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ValueError(f"expected an accelerator name as key, got {key!r}")
        items.append(_parse_one(key, value))
    return _from_items(items, ordered=False)


def _from_list(raw: list[object] | tuple[object, ...]) -> AcceleratorRequest:
    items: list[AcceleratorOption] = []
    for entry in raw:
        if isinstance(entry, str):
            items.append(_parse_one(entry))
        elif isinstance(entry, Mapping) and len(entry) == 1:
            items.extend(_from_mapping(entry).options)
        else:
            raise ValueError(f"expected list items like 'A10:1', got {entry!r}")
    return _from_items(items, ordered=True)


def parse_accelerators(raw: object) -> AcceleratorRequest | None:
    """Read ``resources.accelerators`` as written; None when unset.

    ``"A100"`` -> one option, count 1; ``"A100:8"`` -> count 8; a mapping (a set in YAML flow
    style, whose values are None or counts) -> cheapest of them; a list -> preference order.
    Raises ValueError with a message naming what was expected.
    """
    if raw is None:
        return None
    if isinstance(raw, str):
        parts = _split_braced(raw.strip())
        if parts is None:
            return AcceleratorRequest((_parse_one(raw),), ordered=False)
        options = [_parse_one(p) for p in parts]
        return _from_items(options, ordered=raw.strip().startswith("["))
    if isinstance(raw, Mapping):
        return _from_mapping(raw)
    if isinstance(raw, list | tuple):
        return _from_list(raw)
    if isinstance(raw, set | frozenset):
        return _from_items([_parse_one(str(p)) for p in sorted(raw, key=str)], ordered=False)
    raise ValueError(
        "expected accelerators like A100, A100:8, {A10:1, L4:1} (any of them) or "
        f"[A10:1, L4:1] (in order), got {type(raw).__name__}"
    )
