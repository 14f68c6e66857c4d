"""What Corral does with every field of the four file formats it reads, as data.

Each field of a SkyPilot task, a Ray cluster file, a Determined master config and an Anyscale
machine pool or compute config is in exactly one class:

- **honoured**: acted on as its own system does; the entry names the test that proves it;
- **noticed**: accepted, and :func:`corral.shared.config.base.ignored_notices` says, at
  validate, plan and launch, what Corral does instead (the entry's text is that notice);
- **refused**: the file is refused (exit 2, ``FILE:LINE``, the field, what was expected).

The tables live one per format (``skypilot``, ``ray``, ``determined``, ``anyscale``), keyed by
the model class's name and then by the key as the file writes it. A key with a dot
(``service.replicas``) is a key inside a mapping field the model holds as written. The tables
import no model, so the models' base can read them; :mod:`.walk` joins them to the models and
renders docs/compatibility.md.
"""

from __future__ import annotations

from functools import cache

from .anyscale import ANYSCALE
from .determined import DETERMINED
from .entry import UNLISTED, Entry, Support, Table, honoured, noticed, refused
from .ray import RAY
from .skypilot import SKYPILOT


@cache
def registry() -> dict[str, dict[str, Entry]]:
    """Every table merged: model class name -> key -> entry (a model in two tables is a
    mistake: its keys would have two classes)."""
    merged: dict[str, dict[str, Entry]] = {}
    for table in (SKYPILOT, RAY, DETERMINED, ANYSCALE):
        for model, entries in table.items():
            if model in merged:
                raise RuntimeError(f"model {model} is in two compatibility tables")
            merged[model] = entries
    return merged


def lookup(model: type, key: str) -> Entry | None:
    """The entry of ``key`` on ``model`` (or on the nearest base class that has a table)."""
    tables = registry()
    for cls in model.__mro__:
        table = tables.get(cls.__name__)
        if table is not None and key in table:
            return table[key]
    return None


def has_table(model: type) -> bool:
    """Whether some table lists keys of this model (or of a base class of it)."""
    tables = registry()
    return any(cls.__name__ in tables for cls in model.__mro__)


def sub_keys(model: type, key: str) -> dict[str, Entry]:
    """The entries of the keys inside mapping field ``key`` (``service.replicas`` ->
    ``replicas``); empty when the mapping is passed on as written."""
    tables = registry()
    prefix = f"{key}."
    for cls in model.__mro__:
        table = tables.get(cls.__name__)
        if table is not None:
            found = {k[len(prefix) :]: e for k, e in table.items() if k.startswith(prefix)}
            if found:
                return found
    return {}


__all__ = [
    "UNLISTED",
    "Entry",
    "Support",
    "Table",
    "has_table",
    "honoured",
    "lookup",
    "noticed",
    "refused",
    "registry",
    "sub_keys",
]
