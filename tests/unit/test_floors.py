"""Every module and folder directly under services/ stands on one of the floors that
import-linter's "Floors of services" contract names (pyproject.toml). A folder the contract
does not name escapes it: the web console once sat beside the API, imported it and was
imported by it, and no contract saw the circle."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _floors() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (floors,) = [c for c in contracts if c["name"].startswith("Floors of services")]
    return [{m.strip() for m in layer.replace(":", "|").split("|")} for layer in floors["layers"]]


def _under_services() -> set[str]:
    found = set()
    for entry in (ROOT / "services").iterdir():
        if entry.name.startswith(("_", ".")):
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            found.add(f"corral.services.{entry.name}")
        elif entry.suffix == ".py":
            found.add(f"corral.services.{entry.stem}")
    return found


def test_every_module_under_services_is_on_a_floor() -> None:
    named = set().union(*_floors())
    missing = _under_services() - named
    assert not missing, f"not on any floor of the contract in pyproject.toml: {sorted(missing)}"


def test_the_floors_name_nothing_that_is_gone() -> None:
    named = set().union(*_floors())
    assert named <= _under_services(), sorted(named - _under_services())
