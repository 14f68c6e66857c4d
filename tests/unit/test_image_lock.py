"""The image's dependencies are pinned: ops/lock/requirements.lock (pip-compile from
pyproject.toml) holds one exact, hashed version of every package Corral needs, each within
pyproject's ranges, and ops/Dockerfile installs from the locks with hashes required. The
development and CI set, ops/lock/dev.txt, pins every dependency and dev tool within them too.

Whether the lock resolves and installs is shown by installing it in a clean venv (see the
commands in ops/lock/update.sh and ops/Dockerfile); this test keeps the lock and pyproject.toml
from drifting apart without reaching a registry.
"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from harness import REPO

LOCKS = REPO / "ops" / "lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def pinned(lock: str) -> dict[str, tuple[Version, int]]:
    """Each package of a lock file: its version and how many hashes it carries."""
    out: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in (LOCKS / lock).read_text().splitlines():
        if m := PIN.match(line):
            name = canonicalize_name(m.group(1))
            assert name not in out, f"{lock}: {name} pinned twice"
            out[name] = (Version(m.group(2)), 0)
        elif "--hash=sha256:" in line and name:
            version, hashes = out[name]
            out[name] = (version, hashes + 1)
        elif line.strip() and not line.lstrip().startswith("#"):
            assert line.startswith(" "), f"{lock}: not a pin: {line!r}"
    return out


def requirements(section: str) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    if section == "build":
        return [Requirement(r) for r in project["build-system"]["requires"]]
    if section == "dev":
        return [Requirement(r) for r in project["project"]["optional-dependencies"]["dev"]]
    return [Requirement(r) for r in project["project"]["dependencies"]]


def test_the_lock_pins_every_dependency_within_pyproject_ranges() -> None:
    lock = pinned("requirements.lock")
    for req in requirements("project"):
        name = canonicalize_name(req.name)
        assert name in lock, f"{name} is in pyproject.toml but not in the lock"
        version, _ = lock[name]
        assert req.specifier.contains(version, prereleases=True), f"{name} {version} {req}"
    # Extras' packages are locked too (celery[redis] brings redis, uvicorn, ...).
    assert "redis" in lock and "kombu" in lock
    assert len(lock) > len(requirements("project"))  # the transitive ones as well


def test_the_dev_set_pins_every_dependency_and_dev_tool_within_pyproject_ranges() -> None:
    """ops/lock/dev.txt: the versions ops/setup.sh installs for development and CI, as
    constraints (the set that last passed CI), each within pyproject's ranges."""
    dev = pinned("dev.txt")
    for req in [*requirements("project"), *requirements("dev")]:
        name = canonicalize_name(req.name)
        assert name in dev, f"{name} is in pyproject.toml but not in ops/lock/dev.txt"
        assert req.specifier.contains(dev[name][0], prereleases=True), f"{name} {dev[name][0]}"
    assert "redis" in dev and "kombu" in dev  # what the extras bring is pinned too
    setup = (REPO / "ops" / "setup.sh").read_text()
    assert setup.count("-c ops/lock/dev.txt -e '.[dev]'") == 2  # uv's install and pip's


def test_the_build_lock_covers_the_build_system() -> None:
    lock = pinned("build.lock")
    for req in requirements("build"):
        name = canonicalize_name(req.name)
        assert name in lock and req.specifier.contains(lock[name][0]), req


def test_every_pin_carries_hashes() -> None:
    for lock in ("requirements.lock", "build.lock"):
        for name, (_, hashes) in pinned(lock).items():
            assert hashes >= 1, f"{lock}: {name} has no hash (pip --require-hashes refuses it)"


def test_the_dockerfile_installs_from_the_locks_only() -> None:
    text = (REPO / "ops" / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    steps = " ".join("\n".join(lines).replace("\\\n", " ").split())
    installs = [cmd.strip() for cmd in re.split(r"&&|RUN |COPY ", steps) if "pip install" in cmd]
    assert installs == [
        "pip install --require-hashes --only-binary=:all: -r ops/lock/build.lock",
        "pip install --require-hashes -r ops/lock/requirements.lock",
        # Corral itself: no dependency resolution, no build isolation fetching setuptools.
        "pip install --no-deps --no-build-isolation --no-index .",
    ]
