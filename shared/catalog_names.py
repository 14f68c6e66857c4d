"""Names a file gives that the catalog does not know: an instance type or an accelerator.

A task that names ``n1-standrd-2`` or ``L40`` would plan nothing; these checks say so at the
field that names it, with the nearest name the catalog has (difflib's closeness, as for a
misspelt field), so ``validate``, ``plan`` and ``launch`` stop with FILE:LINE and a fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from corral.shared.catalog import Catalog
from corral.shared.config.task import Resources

PathKey = tuple[str | int, ...]


def nearest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to ``word`` (case-insensitive), or None when none is close."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    found = difflib.get_close_matches(word.lower(), sorted(by_lower), n=1, cutoff=cutoff)
    return by_lower[found[0]] if found else None


def _hint(word: str, choices: Iterable[str]) -> str:
    close = nearest(word, choices)
    return f" (did you mean {close!r}?)" if close else ""


def _clouds(catalog: Catalog, cloud: str | None) -> tuple[str, ...] | None:
    """The clouds to look a name up in: the pinned one, else every cloud of the catalog.
    None when the pinned cloud has no offerings here (the planner says why, not this)."""
    if cloud is None:
        return catalog.clouds
    return (cloud,) if cloud in catalog.clouds else None


def unknown_instance_type(catalog: Catalog, name: str, cloud: str | None) -> str | None:
    """Why ``name`` plans nothing (not on ``cloud``, or on no cloud), with the nearest type
    the catalog has; None when it is known (or the cloud has no offerings to judge by)."""
    clouds = _clouds(catalog, cloud)
    if clouds is None or any((c, name.lower()) in catalog.by_instance_type for c in clouds):
        return None
    names = {
        catalog.offerings[ix[0]].instance_type
        for (c, _), ix in catalog.by_instance_type.items()
        if c in clouds
    }
    where = f"the {cloud} catalog" if cloud else "the catalog"
    return f"instance type {name!r} is not in {where}{_hint(name, names)}"


def unknown_accelerator(catalog: Catalog, name: str, cloud: str | None) -> str | None:
    """Why accelerator ``name`` (canonical) plans nothing, with the nearest one; None when
    some cloud considered carries it."""
    clouds = _clouds(catalog, cloud)
    if clouds is None:
        return None
    carried = {
        a
        for a, ix in catalog.by_accelerator.items()
        if any(catalog.offerings[i].cloud in clouds for i in ix)
    }
    if name in carried:
        return None
    where = f"on {cloud}" if cloud else "in the catalog"
    return f"no instance type {where} carries accelerator {name!r}{_hint(name, carried)}"


def resources_name_problems(
    resources: Resources, catalog: Catalog, path: PathKey = ("resources",)
) -> list[tuple[PathKey, str]]:
    """The instance types and accelerators of ``resources`` (and of each ``any_of`` /
    ``ordered`` candidate) that the catalog does not know, each at its field."""
    items: list[tuple[PathKey, Resources, Resources | None]] = [(path, resources, None)]
    for key in ("any_of", "ordered"):
        for i, item in enumerate(getattr(resources, key) or ()):
            items.append(((*path, key, i), item, resources))
    out: list[tuple[PathKey, str]] = []
    for where, item, outer in items:
        cloud = item.cloud if item.cloud is not None or outer is None else outer.cloud
        if item.instance_type is not None:
            why = unknown_instance_type(catalog, item.instance_type, cloud)
            if why:
                out.append(((*where, "instance_type"), why))
        request = item.accelerator_request() if item.accelerators is not None else None
        if request is not None:
            # A set or list is satisfied by any one option: refused only when none is known
            # (the plan's reasons name each unknown option with its nearest name).
            whys = [unknown_accelerator(catalog, o.name, cloud) for o in request.options]
            if all(whys):
                out.extend(((*where, "accelerators"), why) for why in whys if why)
    return out
