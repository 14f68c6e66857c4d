"""What a long-lived process loaded at its start, out of the garbage collector's sight.

A worker's pool process holds about 150,000 objects once its warm-up loaded the clouds' SDKs and
the catalog, and the API about as many. Python's full collection walks every one of them, and a
burst of launches set one off every few hundred tasks: in a pool process that was about a tenth
of its CPU (timed with ``gc.callbacks`` over a burst of 300 launches on ``corral up``).
:func:`freeze_loaded` moves what is loaded into the collector's permanent generation
(``gc.freeze``), so later collections walk only what the process made since. A process forked
after the freeze also leaves the pages it shares with its parent alone (a collection writes to
every object it walks, which copies the page it is on).

Frozen objects are never collected: only what lives as long as the process is frozen (what
start-up and warm-up loaded), never work in progress.
"""

from __future__ import annotations

import gc


def freeze_loaded(collect: bool = False) -> None:
    """Freeze every object alive now. ``collect``: collect first, so start-up's garbage is
    freed rather than frozen (a full collection: once, at start)."""
    if collect:
        gc.collect()
    gc.freeze()
