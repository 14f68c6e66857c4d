"""Base classes for the models of users' config files.

Every model forbids unknown keys (a typo must be an error, not a silent default). A field that
the owning system's documentation defines but Corral does not act on is still accepted, and
classed "noticed" in its format's table (:mod:`corral.shared.config.compat`) so that
:func:`ignored_notices` says, in one line, what Corral does instead; one acted on otherwise
only for some values is named by the model's ``done_otherwise``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from corral.shared.configio import Document, PathKey, format_loc

from .compat import UNLISTED, has_table, lookup, sub_keys


class StrictModel(BaseModel):
    """A user-file model: unknown keys are errors; documented-but-unused keys are notices."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)

    def acts_on(self, key: str) -> bool:
        """Whether a noticed field is acted on after all in this file (a field some
        settings of the file give a use); False unless a model says otherwise."""
        return False

    def done_otherwise(self) -> list[tuple[PathKey, str]]:
        """Fields this file sets that Corral acts on otherwise than their own system does:
        (their path under this model, what Corral does instead); none unless a model says."""
        return []


class PassThrough(BaseModel):
    """A provider blob (``advanced_instance_config``, ``node_config``): any keys allowed."""

    model_config = ConfigDict(extra="allow")


def _alias(model: BaseModel, name: str) -> str:
    info = type(model).model_fields.get(name)
    return info.alias if info is not None and info.alias else name


def ignored_notices(model: Any, doc: Document | None = None, path: PathKey = ()) -> Iterator[str]:
    """One line per noticed field the file sets: ``FILE:LINE: field: accepted; <what Corral
    does instead>``, the text of the field's entry in its format's table."""
    if isinstance(model, BaseModel):
        yield from _model_notices(model, doc, path)
    elif isinstance(model, list | tuple):
        for i, item in enumerate(model):
            yield from ignored_notices(item, doc, (*path, i))
    elif isinstance(model, dict):
        for k, item in model.items():
            if isinstance(item, BaseModel | list | dict):
                yield from ignored_notices(item, doc, (*path, str(k)))


def _model_notices(model: BaseModel, doc: Document | None, path: PathKey) -> Iterator[str]:
    cls = type(model)
    for name in cls.model_fields:
        key = _alias(model, name)
        value = getattr(model, name)
        entry = lookup(cls, key)
        acted_on = isinstance(model, StrictModel) and model.acts_on(key)
        if entry and entry.notices_when_set() and name in model.model_fields_set and not acted_on:
            yield _notice(doc, (*path, key), entry.what)
            continue
        if isinstance(value, dict) and (inside := sub_keys(cls, key)):
            for sub in value:
                found = inside.get(str(sub))
                if found is None or found.notices_when_set():
                    yield _notice(doc, (*path, key, str(sub)), found.what if found else UNLISTED)
            continue
        yield from ignored_notices(value, doc, (*path, key))
    if has_table(cls):
        for key in model.model_extra or {}:
            entry = lookup(cls, key)
            if entry is None or entry.notices_when_set():
                yield _notice(doc, (*path, key), entry.what if entry else UNLISTED)
    if isinstance(model, StrictModel):
        for sub_path, instead in model.done_otherwise():
            yield f"{_where(doc, (*path, *sub_path))}{format_loc((*path, *sub_path))}: {instead}"


def _notice(doc: Document | None, path: PathKey, what: str) -> str:
    return f"{_where(doc, path)}{format_loc(path)}: accepted; {what}"


def _where(doc: Document | None, path: PathKey) -> str:
    """``FILE:LINE: `` of a field (``FILE: `` when its line is unknown; nothing without a file)."""
    if doc is None:
        return ""
    line = doc.line_of(path)
    return f"{doc.name}:{line}: " if line else f"{doc.name}: "
