"""The compatibility files of tests/fixtures/compat/<format>/: one per documented feature of
each format, written for Corral's tests. Each file's header says what it shows::

    # feature: what the file exercises
    # expect: ok | refused FIELD
    # notices: FIELD, FIELD      (every field noticed, in any order; none when absent)
    # launch: yes                (launched on the local cloud by test_compat_launch.py)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
COMPAT = FIXTURES / "compat"
LOCAL_CLOUD = FIXTURES / "localcloud" / "runtime.yaml"
DEMAND = COMPAT / "ray" / "demand.yaml"


@dataclass(frozen=True)
class Case:
    path: Path
    feature: str
    refused: str | None
    notices: frozenset[str]
    launch: bool

    @property
    def fmt(self) -> str:
        return self.path.parent.name


def read_case(path: Path) -> Case | None:
    """A fixture's header as a case; None for a file without one (the Ray demand)."""
    head: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^# (feature|expect|notices|launch): (.*)$", line)
        if not line.startswith("#"):
            break
        if match:
            head[match.group(1)] = match.group(2).strip()
    if "feature" not in head:
        return None
    expect = head.get("expect", "ok")
    refused = expect.split(" ", 1)[1] if expect.startswith("refused ") else None
    notices = frozenset(n.strip() for n in head.get("notices", "").split(",") if n.strip())
    return Case(path, head["feature"], refused, notices, head.get("launch") == "yes")


def cases() -> list[Case]:
    found = [read_case(p) for p in sorted(COMPAT.glob("*/*.yaml"))]
    return [c for c in found if c is not None]


def noticed(stderr: str, path: Path) -> set[str]:
    """The fields a command's notices name for this file."""
    pattern = re.compile(rf"^notice: {re.escape(str(path))}:\d+: (\S+): accepted;", re.M)
    return set(pattern.findall(stderr))
