"""The merge engine: a workload's values laid over a template, position by position, by rules.

A rule says how the value at one position merges (see :mod:`corral.shared.merge.rules` for the
tables of each cloud):

* :class:`Replace` - the override's value replaces the template's whole;
* :class:`Deep` - mappings merge key by key, recursively; anything else is replaced;
* :class:`Struct` - a mapping whose known fields have rules of their own;
* :class:`Keyed` - a list of mappings matched by an identity key (``DeviceName``, ``name``);
* :class:`ByIndex` - a list of mappings matched by position;
* :class:`Union` - a list of scalars merged as a set.

Whatever the rule, a workload extends or overrides the template and never removes from it: a
``null`` over a key the template sets, and patch directives (``$patch``, ``$retainKeys``, ...),
are refused with a :class:`MergeError`. A ``null`` over a key the template lacks removes
nothing and is dropped. The engine never mutates its inputs and shares no mutable value with
them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from corral.shared.configio import format_loc

Loc = tuple[str | int, ...]
Side = Literal["template", "override"]


class MergeError(ValueError):
    """An override Corral refuses to merge: ``path`` names the place (``disks[1].boot``).

    ``side`` says which input the path points into (almost always the override) and ``loc`` is
    the same path as a tuple, so a caller holding the parsed file can find the line.
    """

    def __init__(self, path: str, message: str, *, side: Side = "override", loc: Loc = ()) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message
        self.side: Side = side
        self.loc = loc


def refuse(loc: Loc, message: str, side: Side = "override") -> MergeError:
    """A :class:`MergeError` at ``loc`` (a path into ``side``)."""
    return MergeError(format_loc(loc), message, side=side, loc=loc)


@dataclass(frozen=True)
class Replace:
    """The override's value replaces the template's whole (nested mappings included)."""


@dataclass(frozen=True)
class Deep:
    """Mappings merge key by key, recursively; lists and scalars are replaced (Kubernetes)."""


# Checks a merged list entry: (template entry, override entry) -> a refusal message or None.
EntryCheck: TypeAlias = Callable[[Mapping[Any, Any], Mapping[Any, Any]], str | None]


@dataclass(frozen=True)
class Struct:
    """A mapping merged key by key: ``fields`` name the keys with rules of their own, every
    other key follows ``other``. With ``fold_case`` a key matches in camelCase or snake_case."""

    fields: Mapping[str, Rule] = field(default_factory=dict)
    other: Rule = Replace()
    fold_case: bool = False

    def rule_for(self, key: Any) -> Rule:
        if self.fold_case:
            folded = fold(key)
            for name, rule in self.fields.items():
                if fold(name) == folded:
                    return rule
            return self.other
        return self.fields.get(key, self.other) if isinstance(key, str) else self.other


@dataclass(frozen=True)
class Keyed:
    """A list of mappings matched by identity ``keys``; matched entries merge by ``entry``.

    ``key_defaults`` fill an identity key an entry leaves out (AWS: ``NetworkCardIndex`` is 0).
    ``boot_first`` marks Google Cloud disks: one boot disk (``boot: true``), kept at index 0;
    an override disk that is ``boot: true`` without a ``device_name`` means the template's.
    """

    keys: tuple[str, ...]
    entry: Struct = Struct()
    key_defaults: Mapping[str, Any] = field(default_factory=dict)
    boot_first: bool = False
    check: EntryCheck | None = None


@dataclass(frozen=True)
class ByIndex:
    """A list of mappings matched by position; extra override entries are appended."""

    entry: Struct = Struct()


@dataclass(frozen=True)
class Union:
    """A list of scalars merged as a set: the template's items, then the override's new ones."""


Rule: TypeAlias = Replace | Deep | Struct | Keyed | ByIndex | Union

# Deep's mappings, as a Struct: no named fields, every key merges deeply again.
_DEEP_STRUCT = Struct(fields={}, other=Deep())


class _Absent:
    """The template has no value at this position (distinct from an explicit ``null``)."""


ABSENT: Any = _Absent()


def fold(key: Any) -> Any:
    """The spelling-free form of a key: ``deviceName`` and ``device_name`` -> ``devicename``."""
    return key.replace("_", "").lower() if isinstance(key, str) else key


def clean(value: Any) -> Any:
    """A fresh copy of an override value without null-valued keys (they remove nothing here)
    and without the no-op ``$patch: merge``."""
    if isinstance(value, Mapping):
        return {k: clean(v) for k, v in value.items() if v is not None and k != "$patch"}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


_DIRECTIVE_HINT = (
    "a workload can extend or override the machine pool's template, not delete, replace or "
    "reorder its entries (edit the machine pool to change them)"
)


def refuse_directives(value: Any, loc: Loc = ()) -> None:
    """Refuse every patch directive in an override; ``$patch: merge`` alone is harmless."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and key.startswith("$"):
                if key == "$patch" and item == "merge":
                    continue
                shown = f"{key}: {item}" if key == "$patch" else key
                raise refuse((*loc, key), f"patch directive {shown!r} refused: {_DIRECTIVE_HINT}")
            refuse_directives(item, (*loc, key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            refuse_directives(item, (*loc, i))


def merge_value(rule: Rule, tmpl: Any, over: Any, t_loc: Loc, o_loc: Loc) -> Any:
    """Merge one position: ``tmpl`` may be :data:`ABSENT`; ``over`` is never ``None``."""
    if isinstance(rule, Replace):
        return clean(over)
    if isinstance(rule, Deep):
        if isinstance(over, Mapping) and (tmpl is ABSENT or isinstance(tmpl, Mapping)):
            return merge_struct(_DEEP_STRUCT, {} if tmpl is ABSENT else tmpl, over, t_loc, o_loc)
        if isinstance(tmpl, Mapping):
            raise refuse(
                o_loc,
                "expected a mapping: the template has one here, which a workload can "
                "extend but not replace with a plain value",
            )
        return clean(over)
    if isinstance(rule, Struct):
        t_map = {} if tmpl is ABSENT else _expect_mapping(tmpl, t_loc, "template")
        return merge_struct(rule, t_map, _expect_mapping(over, o_loc, "override"), t_loc, o_loc)
    if isinstance(rule, Union):
        t_list = [] if tmpl is ABSENT else _expect_list(tmpl, t_loc, "template")
        merged = copy.deepcopy(list(t_list))
        for item in _expect_list(over, o_loc, "override"):
            if item not in merged:
                merged.append(clean(item))
        return merged
    if isinstance(rule, ByIndex):
        return _merge_by_index(rule, tmpl, over, t_loc, o_loc)
    return _merge_keyed(rule, tmpl, over, t_loc, o_loc)


def merge_struct(
    rule: Struct, tmpl: Mapping[Any, Any], over: Mapping[Any, Any], t_loc: Loc, o_loc: Loc
) -> dict[Any, Any]:
    """Key by key: the template's keys in its order and spelling, then the override's new keys.

    A key both inputs have keeps the template's spelling (camelCase or snake_case, where the
    rule folds case), so the result reads like the machine pool's own definition.
    """
    t_keys = _key_index(tmpl, rule.fold_case, t_loc, "template")
    merged = {k: copy.deepcopy(v) for k, v in tmpl.items()}
    for fkey, o_key in _key_index(over, rule.fold_case, o_loc, "override").items():
        value = over[o_key]
        t_key = t_keys.get(fkey, ABSENT)
        if o_key == "$patch" or (value is None and t_key is ABSENT):
            continue  # `$patch: merge` is what happens anyway; a null over nothing removes nothing
        if value is None:
            raise refuse(
                (*o_loc, o_key),
                f"null would remove {t_key!r}, which the template sets; a workload can "
                "override or extend the template, not remove from it",
            )
        child = rule.rule_for(o_key)
        if t_key is ABSENT:
            merged[o_key] = merge_value(child, ABSENT, value, (*t_loc, o_key), (*o_loc, o_key))
        else:
            merged[t_key] = merge_value(child, tmpl[t_key], value, (*t_loc, t_key), (*o_loc, o_key))
    return merged


def _key_index(data: Mapping[Any, Any], fold_case: bool, loc: Loc, side: Side) -> dict[Any, Any]:
    """Folded key -> key as written; two spellings of one key in one mapping are ambiguous."""
    index: dict[Any, Any] = {}
    for key in data:
        fkey = fold(key) if fold_case else key
        if fkey in index:
            raise refuse(
                (*loc, key), f"{index[fkey]!r} and {key!r} name the same field; write it once", side
            )
        index[fkey] = key
    return index


def _expect_mapping(value: Any, loc: Loc, side: Side) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise refuse(loc, f"expected a mapping, got {type(value).__name__}", side)
    return value


def _expect_list(value: Any, loc: Loc, side: Side) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise refuse(loc, f"expected a list, got {type(value).__name__}", side)
    return value


def _merge_by_index(rule: ByIndex, tmpl: Any, over: Any, t_loc: Loc, o_loc: Loc) -> list[Any]:
    t_list = [] if tmpl is ABSENT else _expect_list(tmpl, t_loc, "template")
    merged = copy.deepcopy(list(t_list))
    for i, entry in enumerate(_expect_list(over, o_loc, "override")):
        o_entry = _expect_mapping(entry, (*o_loc, i), "override")
        if i < len(t_list):
            t_entry = _expect_mapping(t_list[i], (*t_loc, i), "template")
            merged[i] = merge_struct(rule.entry, t_entry, o_entry, (*t_loc, i), (*o_loc, i))
        else:
            merged.append(merge_struct(rule.entry, {}, o_entry, (*t_loc, i), (*o_loc, i)))
    return merged


# The identity of Google Cloud's boot disk when an override entry names no device.
_BOOT_DISK = ("<boot disk>",)


def _lookup(entry: Mapping[Any, Any], name: str, fold_case: bool) -> Any:
    if not fold_case:
        return entry.get(name, ABSENT)
    for key, value in entry.items():
        if fold(key) == fold(name):
            return value
    return ABSENT


def _is_boot(entry: Any, fold_case: bool) -> bool:
    return isinstance(entry, Mapping) and _lookup(entry, "boot", fold_case) is True


def _identity(
    rule: Keyed, entry: Mapping[Any, Any], loc: Loc, side: Side
) -> tuple[Any, ...] | None:
    """The entry's identity; ``None`` for a template entry without one (it is never matched)."""
    values: list[Any] = []
    for key in rule.keys:
        value = _lookup(entry, key, rule.entry.fold_case)
        if value is ABSENT or value is None:
            value = rule.key_defaults.get(key, ABSENT)
        if value is ABSENT:
            if rule.boot_first and _is_boot(entry, rule.entry.fold_case):
                return _BOOT_DISK
            if side == "template":
                return None
            raise refuse(
                loc,
                f"entry lacks {key!r}, its identity key: without it Corral cannot tell "
                "which template entry it extends, or that it is new",
            )
        if isinstance(value, Mapping | list):
            raise refuse((*loc, key), f"{key!r} must be a plain value (an identity key)", side)
        values.append(value)
    return tuple(values)


def _index_template(rule: Keyed, t_list: Sequence[Any], t_loc: Loc) -> dict[Any, list[int]]:
    index: dict[Any, list[int]] = {}
    for pos, entry in enumerate(t_list):
        if not isinstance(entry, Mapping):
            continue
        ident = _identity(rule, entry, (*t_loc, pos), "template")
        if ident is not None:
            index.setdefault(ident, []).append(pos)
        if rule.boot_first and ident != _BOOT_DISK and _is_boot(entry, rule.entry.fold_case):
            index.setdefault(_BOOT_DISK, []).append(pos)
    return index


def _merge_keyed(rule: Keyed, tmpl: Any, over: Any, t_loc: Loc, o_loc: Loc) -> list[Any]:
    """Match each override entry to the template entry with its identity; append new ones."""
    t_list = [] if tmpl is ABSENT else _expect_list(tmpl, t_loc, "template")
    index = _index_template(rule, t_list, t_loc)
    merged = copy.deepcopy(list(t_list))
    claimed: dict[int, int] = {}  # merged position -> the override entry that extended it
    for i, entry in enumerate(_expect_list(over, o_loc, "override")):
        e_loc = (*o_loc, i)
        o_entry = _expect_mapping(entry, e_loc, "override")
        ident = _identity(rule, o_entry, e_loc, "override")
        positions = index.get(ident, [])
        if len(positions) > 1:
            raise refuse(
                (*t_loc, positions[1]),
                f"entries {positions[0]} and {positions[1]} have the same identity; an "
                "override cannot tell which one it extends",
                "template",
            )
        if positions and positions[0] in claimed:
            raise refuse(
                e_loc,
                f"entry {claimed[positions[0]]} already extends the same entry; "
                "write each entry once",
            )
        if positions:
            pos = positions[0]
            t_entry = _expect_mapping(t_list[pos], (*t_loc, pos), "template")
            _check_entry(rule, t_entry, o_entry, e_loc)
            merged[pos] = merge_struct(rule.entry, t_entry, o_entry, (*t_loc, pos), e_loc)
        else:
            pos = len(merged)
            index[ident] = [pos]
            merged.append(merge_struct(rule.entry, {}, o_entry, e_loc, e_loc))
        claimed[pos] = i
    return _boot_disk_first(merged, t_list, rule, o_loc) if rule.boot_first else merged


def _check_entry(
    rule: Keyed, t_entry: Mapping[Any, Any], o_entry: Mapping[Any, Any], loc: Loc
) -> None:
    message = rule.check(t_entry, o_entry) if rule.check is not None else None
    if message is not None:
        raise refuse(loc, message)


def _boot_disk_first(
    merged: list[Any], t_list: Sequence[Any], rule: Keyed, o_loc: Loc
) -> list[Any]:
    """Google Cloud boots from one disk, and Corral keeps it at index 0."""
    fold_case = rule.entry.fold_case
    boot = [d for d in merged if _is_boot(d, fold_case)]
    if len(boot) > 1:
        raise refuse(
            o_loc,
            f"{len(boot)} disks would have boot: true; an instance has one boot disk "
            "(to change the template's, omit device_name)",
        )
    if not boot and any(_is_boot(d, fold_case) for d in t_list):
        raise refuse(o_loc, "the template's boot disk would stop being one (boot must stay true)")
    return boot + [d for d in merged if not _is_boot(d, fold_case)]
