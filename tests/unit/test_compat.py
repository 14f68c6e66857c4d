"""The compatibility tables (shared/config/compat/): every field of the four formats has a
class, every class is backed (a test for honoured, a notice's text for noticed), Ray's schema
has nothing unclassified, and docs/compatibility.md is what the tables render."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from corral.shared.config.base import ignored_notices
from corral.shared.config.compat import Support, registry
from corral.shared.config.compat.walk import FORMATS, rows

ROOT = Path(__file__).resolve().parents[2]
RAY_SCHEMA_PATHS = ROOT / "tests" / "fixtures" / "compat" / "ray_schema_paths.txt"


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_field_of_every_model_has_a_class(fmt: str) -> None:
    unclassified = [row.path for row in rows(fmt) if row.entry is None]
    assert not unclassified, (
        f"fields of the {fmt} format with no class (add them to shared/config/compat/{fmt}.py "
        f"as honoured, noticed or refused): {unclassified}"
    )


def _model_keys() -> dict[str, set[str]]:
    """Every model the walk meets: its name -> its keys as a file writes them."""
    found: dict[str, set[str]] = {}
    for fmt in FORMATS:
        for row in rows(fmt):
            for cls in row.model.__mro__:
                if hasattr(cls, "model_fields"):
                    keys = {info.alias or name for name, info in cls.model_fields.items()}
                    found.setdefault(cls.__name__, set()).update(keys)
    return found


def test_every_table_key_is_a_key_of_its_model() -> None:
    # A misspelt key would classify nothing, and the field it meant would stay silent.
    models = _model_keys()
    wrong = []
    for model, entries in registry().items():
        assert model in models, f"{model}: no model of that name in the four formats"
        for key in entries:
            head = key.split(".", 1)[0]
            if head not in models[model] and not _lets_extra_through(model):
                wrong.append(f"{model}.{key}")
    assert not wrong, wrong


def _lets_extra_through(model: str) -> bool:
    return any(
        row.model.__name__ == model and row.model.model_config.get("extra") == "allow"
        for fmt in FORMATS
        for row in rows(fmt)
    )


@cache
def _test_names(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


def test_every_honoured_field_names_a_test_that_exists_and_every_other_says_why() -> None:
    bad = []
    for model, entries in registry().items():
        for key, entry in entries.items():
            where = f"{model}.{key}"
            if not entry.what.strip():
                bad.append(f"{where}: no text")
            if entry.support is not Support.HONOURED:
                if entry.test:
                    bad.append(f"{where}: only an honoured field names a test")
                continue
            path, _, name = entry.test.partition("::")
            if not path or not (ROOT / path).is_file():
                bad.append(f"{where}: no test file {path!r}")
            elif name not in _test_names(path):
                bad.append(f"{where}: {path} has no {name}")
    assert not bad, bad


def _schema_paths() -> list[str]:
    lines = RAY_SCHEMA_PATHS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_property_of_rays_schema_has_a_class() -> None:
    classified = {row.path: row.entry for row in rows("ray") if row.entry is not None}
    missing = []
    for path in _schema_paths():
        if path in classified:
            continue
        # A key inside a section classed as a whole (noticed or refused) shares its class.
        parents = [path.rsplit(".", n)[0] for n in range(1, path.count(".") + 1)]
        whole = [classified[p] for p in parents if p in classified]
        if not (whole and whole[0].support is not Support.HONOURED):
            missing.append(path)
    assert len(_schema_paths()) > 80
    assert not missing, f"properties of Ray's schema with no class: {missing}"


def test_docs_compatibility_md_is_what_the_tables_render() -> None:
    from corral.shared.config.compat.walk import render

    doc = ROOT / "docs" / "compatibility.md"
    assert doc.read_text() == render(), (
        "docs/compatibility.md is stale: run `.venv/bin/python ops/gen_compat.py`"
    )


def _noticed_entries() -> list[tuple[type, str, str]]:
    """(model, key, text) of every field noticed whenever it is set, over the four formats."""
    out: dict[tuple[type, str], str] = {}
    for fmt in FORMATS:
        for row in rows(fmt):
            if row.entry is not None and row.entry.notices_when_set():
                out[(row.model, row.key)] = row.entry.what
    return [(model, key, what) for (model, key), what in out.items()]


def _bare(model: type[Any], **fields: Any) -> Any:
    """An instance holding only ``fields`` as set (no validation), its required nested models
    as bare instances: what ignored_notices walks."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        kind = info.annotation
        if not info.is_required() or name in fields:
            continue
        nested = isinstance(kind, type) and issubclass(kind, BaseModel)
        values[name] = _bare(kind) if nested else "x"
    return model.model_construct(**values, **fields)


@pytest.mark.parametrize(
    ("model", "key", "what"), _noticed_entries(), ids=lambda v: getattr(v, "__name__", str(v))[:40]
)
def test_every_noticed_field_draws_its_notice_when_set(
    model: type[Any], key: str, what: str
) -> None:
    head, _, inside = key.partition(".")
    name = next((n for n, i in model.model_fields.items() if (i.alias or n) == head), None)
    if inside:
        instance = _bare(model, **{name or head: {inside: 1}})
    else:
        instance = _bare(model, **{name or head: 1})
    assert f"{key}: accepted; {what}" in list(ignored_notices(instance))
