"""httpx as the client uses it: without its command line.

httpx imports its own command line (click, rich's progress bars and syntax, pygments) whenever
those are installed, as they are with Corral: about half of its import time, paid by every
``corral`` command that calls the API. Corral never runs httpx's command line. A None entry in
``sys.modules`` makes that one import fail, and httpx then defines a stub in its place (its own
fallback for an install without them); if httpx was imported already, nothing changes.
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import httpx

__all__ = ["httpx"]
