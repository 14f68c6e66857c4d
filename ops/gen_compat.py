#!/usr/bin/env python3
"""Write docs/compatibility.md from the compatibility tables (shared/config/compat/).

    .venv/bin/python ops/gen_compat.py           # rewrite the doc
    .venv/bin/python ops/gen_compat.py --check   # exit 1 when the committed doc is stale

tests/unit/test_compat.py fails when the committed doc differs from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from corral.shared.config.compat.walk import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if DOC.read_text() != text:
            print(f"{DOC} is stale: run .venv/bin/python ops/gen_compat.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
