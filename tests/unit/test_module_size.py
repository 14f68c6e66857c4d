"""No module of Corral's grows past what a reader holds in one sitting (STYLE: no module should
need scrolling for minutes)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 800


def test_no_module_over_800_lines() -> None:
    sizes = {
        path.relative_to(REPO).as_posix(): len(path.read_text().splitlines())
        for folder in ("shared", "services", "workers")
        for path in (REPO / folder).rglob("*.py")
    }
    assert len(sizes) > 50, "the package's modules were not found"
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"split these along their concerns: {over}"
