"""Claims held while work runs: renewed in the background, released after, so a holder that
dies frees its claim within ``claim_ttl_s``."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from corral.services.runtime.deps import Deps

log = logging.getLogger("corral.claims")


@contextlib.contextmanager
def hold_claim(deps: Deps, key: str, owner: str) -> Iterator[None]:
    """Keep renewing a claim while the block runs; release it after."""
    ttl_s = deps.settings.timers.claim_ttl_s
    done = threading.Event()

    def renew() -> None:
        while not done.wait(ttl_s / 3):
            if not deps.store.renew(key, owner, ttl_s):
                log.warning("lost the claim %s while holding it", key)
                return

    keeper = threading.Thread(target=renew, name=f"renew-{key}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join(ttl_s)
        deps.store.release(key, owner)
