#!/usr/bin/env python3
"""Count the structure issue #48 asks to shrink, read from the source with ``ast`` (nothing is
imported or run), so any commit can be counted the same way.

    python ops/structure_counts.py                 # the working tree
    python ops/structure_counts.py --rev c5be811   # a commit (``git archive`` to a temp dir)
    python ops/structure_counts.py --json          # one JSON object, for scripts and tests

Standard library only. The folders read are ``shared/``, ``services/`` and ``workers/``
(``tests/`` never). Each count, as defined here, so a figure can be reproduced by hand:

``machine_record_types``
    Classes recording one machine: a class that is a pydantic model (it derives, through
    classes of the tree, from ``BaseModel``) or a ``@dataclass``, and that declares, itself or
    through a base of the tree, a field ``provider_id`` (the cloud's id of the machine). A
    record pointing at a machine by Corral's id (``machine_id``: a boot, an assignment, a
    scheduler's decision) is the shape #48 wants and does not count. Only leaves count (a base
    another counted class derives from is part of that class). Left out: the provider port's
    own answer (the class ``Provider.describe`` returns in ``services/providers/base.py``:
    the cloud's report, not Corral's record) and the HTTP API's and client's shapes
    (``services/api/``, ``services/client/``: views of a record on the wire).

``lifecycles``
    Transition tables: module- or class-level names annotated ``dict[S, frozenset[S]]`` or
    ``Mapping[..., frozenset[...]]`` whose name ends in ``TRANSITIONS``.

``task_validate_sites``
    Call sites of ``Task.model_validate(...)`` under ``services/runtime/`` (each re-parses a
    request's task dict). The number of validations one direct launch runs is measured, not
    read: ``tests/unit/runtime/test_structure_counts.py`` counts them around a launch.

``cas_retry_loops``
    Compare-and-set retry loops: functions with a ``for``/``while`` loop that end by raising
    ``WriteConflict`` (a write retried until it wins or gives up).

``backoff_formulas``
    Exponential backoff written out: expressions ``2 ** e`` whose exponent ``e`` is not a
    constant (``2**30`` and ``2.0**-20`` are units; ``0.001 * 2**attempt`` is a backoff).

``redis_clients``
    Modules that open their own connection to Redis: they call redis-py's constructors
    (``Redis(...)``, ``StrictRedis(...)``, ``Sentinel(...)``, ``redis.from_url(...)``,
    ``Redis.from_url(...)``) or speak the protocol themselves (a bytes constant holding a RESP
    array header, ``b"*%d\\r\\n"``).

``cloud_lists``
    Module-level names that list Corral's clouds: a name containing ``CLOUDS`` bound either to
    a value holding a string constant that is, or whose words include, a cloud with a
    provider package (``services/providers/<cloud>/``), or to another name (an alias is a list
    under a second name). A table keyed by a file format's own words built from another table
    (``tuple(RULES_BY_CLOUD)``) holds no such constant and is left out.

``getattr_features``
    Optional provider features read by probing: ``getattr(x, "name", default)`` or
    ``hasattr(x, "name")`` where ``x`` is a name containing ``provider`` or a call of
    something named ``provider`` (``deps.provider(cloud)``).

``process_group_kill_modules``
    Modules that signal a process group themselves: they call ``killpg`` (``os.killpg(...)``).
    Every other module stops a group through the one that does.

``retry_pauses_by_hand``
    A retry in place written out: a call of ``sleep`` or ``RetryLater`` whose first argument
    is a ``backoff_s(...)`` call (the caller counting its tries and pausing by the backoff
    formula itself, rather than asking ``shared/retry.py``: AWS's ``terminate_attempts``,
    GCP's ``teardown_tries``, the ``throttle_retries`` of a launch and of Kubernetes' calls).
    A compare-and-set loop's drawn pause (``sleep(uniform(0, backoff_s(...)))``) is counted
    under ``cas_retry_loops``, not here.

``services_lines``
    Physical lines of the ``.py`` files under ``services/``.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FOLDERS = ("shared", "services", "workers")
WIRE_VIEWS = ("services/api/", "services/client/")  # the HTTP API's shapes of records
MACHINE_IDS = frozenset({"provider_id"})
REDIS_CONSTRUCTORS = frozenset({"Redis", "StrictRedis", "Sentinel"})


@dataclass
class Module:
    path: str  # relative to the root, with forward slashes
    text: str
    tree: ast.Module = field(repr=False)


def modules(root: Path) -> Iterator[Module]:
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(root).as_posix()
            yield Module(rel, text, ast.parse(text, filename=rel))


def _name(node: ast.AST) -> str:
    """The last name of a name, an attribute or a subscript's value (``a.b.C`` -> ``C``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


# --- machine records ---------------------------------------------------------------------
@dataclass
class _Class:
    where: str
    bases: list[str]
    dataclass: bool
    fields: set[str]


def _classes(mods: list[Module]) -> dict[str, list[_Class]]:
    out: dict[str, list[_Class]] = {}
    for mod in mods:
        for node in ast.walk(mod.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            fields = {
                st.target.id
                for st in node.body
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            }
            is_dc = any(_name(d) == "dataclass" for d in node.decorator_list)
            out.setdefault(node.name, []).append(
                _Class(f"{mod.path}:{node.name}", [_name(b) for b in node.bases], is_dc, fields)
            )
    return out


def _port_answer(mods: list[Module]) -> set[str]:
    """The class names ``Provider.describe`` returns (``list[X]`` -> X)."""
    for mod in mods:
        if mod.path != "services/providers/base.py":
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ClassDef) and node.name == "Provider":
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == "describe" and fn.returns:
                        return {n.id for n in ast.walk(fn.returns) if isinstance(n, ast.Name)}
    return set()


def machine_record_types(mods: list[Module]) -> list[str]:
    classes = _classes(mods)

    def lineage(cls: _Class, seen: frozenset[str] = frozenset()) -> Iterator[_Class]:
        yield cls
        for base in cls.bases:
            if base in seen:
                continue
            for parent in classes.get(base, []):
                yield from lineage(parent, seen | {base})

    def is_record(cls: _Class) -> bool:
        line = list(lineage(cls))
        modelled = any(c.dataclass for c in line) or any("BaseModel" in c.bases for c in line)
        return modelled and any(MACHINE_IDS & c.fields for c in line)

    answer = _port_answer(mods)
    found = {
        (name, cls.where)
        for name, variants in classes.items()
        for cls in variants
        if name not in answer and not cls.where.startswith(WIRE_VIEWS) and is_record(cls)
    }
    bases_of_found = {
        b for name, variants in classes.items() for c in variants for b in c.bases
        if (name, c.where) in found
    }  # fmt: skip
    return sorted(where for name, where in found if name not in bases_of_found)


# --- lifecycles ----------------------------------------------------------------------------
def lifecycles(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            annotation = ast.unparse(node.annotation)
            # A ClassVar declared without a value is no table.
            table = node.target.id.endswith("TRANSITIONS") and "frozenset[" in annotation
            if table and node.value is not None:
                out.append(f"{mod.path}:{node.target.id}")
    return sorted(out)


# --- the task re-parsed --------------------------------------------------------------------
def task_validate_sites(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        if not mod.path.startswith("services/runtime/"):
            continue
        for node in ast.walk(mod.tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "model_validate"
                and _name(node.func.value) == "Task"
            ):
                out.append(f"{mod.path}:{node.lineno}")
    return out


# --- compare-and-set loops and backoff -----------------------------------------------------
def cas_retry_loops(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for fn in ast.walk(mod.tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            loops = any(isinstance(n, ast.For | ast.While) for n in ast.walk(fn))
            raises = any(
                isinstance(n, ast.Raise) and n.exc is not None and _name(n.exc) == "WriteConflict"
                for n in ast.walk(fn)
            )
            if loops and raises:
                out.append(f"{mod.path}:{fn.name}")
    return sorted(out)


def _constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)
    )


def backoff_formulas(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for node in ast.walk(mod.tree):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Pow)
                and isinstance(node.left, ast.Constant)
                and node.left.value == 2
                and not _constant(node.right)
            ):
                out.append(f"{mod.path}:{node.lineno}")
    return out


# --- Redis clients -------------------------------------------------------------------------
def redis_clients(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call):
                name = _name(node.func)
                owner = _name(node.func.value) if isinstance(node.func, ast.Attribute) else ""
                if name in REDIS_CONSTRUCTORS or (
                    name == "from_url" and owner in {"redis", *REDIS_CONSTRUCTORS}
                ):
                    out.append(mod.path)
                    break
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, bytes)
                and node.value.startswith(b"*%d\r\n")
            ):
                out.append(mod.path)
                break
    return sorted(out)


# --- process groups and retries ----------------------------------------------------------
def process_group_kill_modules(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call) and _name(node.func) == "killpg":
                out.append(mod.path)
                break
    return sorted(out)


def retry_pauses_by_hand(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for node in ast.walk(mod.tree):
            if (
                isinstance(node, ast.Call)
                and _name(node.func) in {"sleep", "RetryLater"}
                and node.args
                and isinstance(node.args[0], ast.Call)
                and _name(node.args[0].func) == "backoff_s"
            ):
                out.append(f"{mod.path}:{node.lineno}")
    return out


# --- lists of clouds -----------------------------------------------------------------------
def provider_clouds(root: Path) -> set[str]:
    """The clouds with a provider package: ``services/providers/<cloud>/provider.py``."""
    return {p.parent.name for p in (root / "services" / "providers").glob("*/provider.py")}


def _strings(node: ast.AST) -> Iterator[str]:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def cloud_lists(mods: list[Module], clouds: set[str]) -> list[str]:
    out = []
    for mod in mods:
        for node in mod.tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for target in targets:
                if not (isinstance(target, ast.Name) and "CLOUDS" in target.id):
                    continue
                alias = isinstance(value, ast.Name | ast.Attribute)
                named = any(set(s.split()) & clouds for s in _strings(value))
                if alias or named:
                    out.append(f"{mod.path}:{target.id}")
    return sorted(out)


# --- features probed -----------------------------------------------------------------------
def _is_provider(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "provider" in node.id
    if isinstance(node, ast.Call):
        return "provider" in _name(node.func)
    return False


def getattr_features(mods: list[Module]) -> list[str]:
    out = []
    for mod in mods:
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            probe = (node.func.id == "getattr" and len(node.args) == 3) or (
                node.func.id == "hasattr" and len(node.args) == 2
            )
            if (
                probe
                and _is_provider(node.args[0])
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                out.append(f"{mod.path}:{node.lineno}:{node.args[1].value}")
    return out


# --- all of them ---------------------------------------------------------------------------
def count(root: Path) -> dict[str, dict[str, object]]:
    """Every count of the tree at ``root``: ``{name: {"count": n, "where": [...]}}``."""
    mods = list(modules(root))
    lines = sum(m.text.count("\n") for m in mods if m.path.startswith("services/"))
    found: dict[str, list[str]] = {
        "machine_record_types": machine_record_types(mods),
        "lifecycles": lifecycles(mods),
        "task_validate_sites": task_validate_sites(mods),
        "cas_retry_loops": cas_retry_loops(mods),
        "backoff_formulas": backoff_formulas(mods),
        "redis_clients": redis_clients(mods),
        "cloud_lists": cloud_lists(mods, provider_clouds(root)),
        "getattr_features": getattr_features(mods),
        "process_group_kill_modules": process_group_kill_modules(mods),
        "retry_pauses_by_hand": retry_pauses_by_hand(mods),
    }
    out: dict[str, dict[str, object]] = {k: {"count": len(v), "where": v} for k, v in found.items()}
    out["services_lines"] = {"count": lines, "where": ["services/**/*.py"]}
    return out


def _checkout(rev: str, into: Path) -> Path:
    """The folders at ``rev`` unpacked under ``into`` (``git archive``)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, *FOLDERS], check=True, capture_output=True
    ).stdout
    tar = into / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="a git revision to count instead of the working tree")
    parser.add_argument("--root", default=".", help="the repository (default: here)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--where", action="store_true", help="list what each count found")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = _checkout(args.rev, Path(tmp)) if args.rev else Path(args.root)
        counts = count(root)
    if args.json:
        print(json.dumps(counts, indent=2))
        return 0
    for name, entry in counts.items():
        print(f"{name:22} {entry['count']}")
        if args.where and name != "services_lines":
            for where in entry["where"]:  # type: ignore[attr-defined]
                print(f"    {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
