"""What a long-lived process loaded at its start, out of the garbage collector's sight.

A worker's pool process holds about 150,000 objects once its warm-up loaded the clouds' SDKs and
the catalog (the API loads much the same). Python's full collection walks every one of them, and a
burst of launches set one off every few hundred tasks: in a pool process that was about a tenth
of its CPU (timed with ``gc.callbacks`` over a burst of 300 launches on ``corral up``).
:func:`freeze_loaded` moves what is loaded into the collector's permanent generation
(``gc.freeze``), so later collections walk only what the process made since. A process forked
after the freeze also leaves the pages it shares with its parent alone (a collection writes to
every object it walks, which copies the page it is on).

Frozen objects are never collected, so a freeze comes once start-up and warm-up are done. A
pool process freezes from its warm-up thread, so a task that is already running then has its
objects frozen too: those that are not in a reference cycle are still freed when the task drops
them, and at most that one task's cycles stay.
"""

from __future__ import annotations

import gc


def freeze_loaded(collect: bool = False) -> None:
    """Freeze every object alive now. ``collect``: collect first, so start-up's garbage is
    freed rather than frozen (a full collection: once, at start)."""
    if collect:
        gc.collect()
    gc.freeze()
