"""Base classes for the models of users' config files.

Every model forbids unknown keys (a typo must be an error, not a silent default). A field that
the owning system's documentation defines but Corral does not act on is still accepted, and
listed in the model's ``IGNORED`` so that :func:`ignored_notices` can say so in one line; one
acted on otherwise than its own system does is named by the model's ``done_otherwise``, with
what Corral does instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from corral.shared.configio import Document, PathKey, format_loc


class StrictModel(BaseModel):
    """A user-file model: unknown keys are errors; documented-but-unused keys are notices."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)

    # Field names (as written in the file) that are accepted but not acted on.
    IGNORED: ClassVar[frozenset[str]] = frozenset()

    def acts_on(self, key: str) -> bool:
        """Whether an IGNORED field is acted on after all in this file (a field some
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
    """One line per ignored field that the file sets: ``FILE:LINE: field: accepted, ignored``."""
    if isinstance(model, StrictModel):
        for name in type(model).model_fields:
            key = _alias(model, name)
            value = getattr(model, name)
            if key in model.IGNORED and name in model.model_fields_set and not model.acts_on(key):
                where = _where(doc, (*path, key))
                yield f"{where}{format_loc((*path, key))}: accepted; Corral does not act on it"
                continue
            yield from ignored_notices(value, doc, (*path, key))
        for sub, instead in model.done_otherwise():
            yield f"{_where(doc, (*path, *sub))}{format_loc((*path, *sub))}: {instead}"
    elif isinstance(model, list | tuple):
        for i, item in enumerate(model):
            yield from ignored_notices(item, doc, (*path, i))
    elif isinstance(model, dict):
        for k, item in model.items():
            if isinstance(item, StrictModel | list | dict):
                yield from ignored_notices(item, doc, (*path, str(k)))


def _where(doc: Document | None, path: PathKey) -> str:
    """``FILE:LINE: `` of a field (``FILE: `` when its line is unknown; nothing without a file)."""
    if doc is None:
        return ""
    line = doc.line_of(path)
    return f"{doc.name}:{line}: " if line else f"{doc.name}: "
