"""Claims held while work runs: renewed in the background, released after, so a holder that
dies frees its claim within ``claim_ttl_s``.

One daemon thread per process renews every claim held in it (:class:`_Renewer`), each at most
half its TTL after it was taken or last renewed. A thread started and joined per claim cost an
attempt two waits for the scheduler (the start and the join), which on a loaded machine were a
visible share of a launch."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

from corral.services.runtime.deps import Deps

log = logging.getLogger("corral.claims")


class Held:
    """A claim held by :func:`hold_claim`. ``lapse()``: after the block, stop renewing it but
    do not release it; it lapses within ``claim_ttl_s`` (a release is a script of three Redis
    commands, worth saving where nobody waits to take the claim next)."""

    def __init__(self) -> None:
        self.release = True

    def lapse(self) -> None:
        self.release = False


@contextlib.contextmanager
def hold_claim(deps: Deps, key: str, owner: str) -> Iterator[Held]:
    """Keep renewing a claim while the block runs; release it after (unless the block said
    :meth:`Held.lapse`; an exception releases it regardless)."""
    held = Held()
    _RENEWER.hold(deps, key, owner)
    failed = True
    try:
        yield held
        failed = False
    finally:
        _RENEWER.drop(key, owner)
        if held.release or failed:
            deps.store.release(key, owner)


class _Renewer:
    """Renews the claims held in this process: each is due a third of its TTL after it was
    taken or renewed, and the thread looks every sixth of the shortest TTL, so a claim is
    renewed at most half a TTL late of its last renewal."""

    def __init__(self) -> None:
        self._reset()
        # A forked process has none of its parent's threads, nor its claims.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._some = threading.Condition(self._lock)  # notified when the first claim comes
        self._held: dict[tuple[str, str], tuple[Deps, float]] = {}  # -> (deps, renew at)
        self._thread: threading.Thread | None = None

    def hold(self, deps: Deps, key: str, owner: str) -> None:
        ttl_s = deps.settings.timers.claim_ttl_s
        with self._lock:
            self._held[(key, owner)] = (deps, time.monotonic() + ttl_s / 3)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="claims", daemon=True)
                self._thread.start()
            elif len(self._held) == 1:
                self._some.notify()

    def drop(self, key: str, owner: str) -> None:
        with self._lock:
            self._held.pop((key, owner), None)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._held:
                    self._some.wait()
                now = time.monotonic()
                due = [(k, d) for k, (d, at) in self._held.items() if at <= now]
                tick_s = min(d.settings.timers.claim_ttl_s for d, _ in self._held.values()) / 6
            for (key, owner), deps in due:
                self._renew(deps, key, owner)
            time.sleep(tick_s)

    def _renew(self, deps: Deps, key: str, owner: str) -> None:
        ttl_s = deps.settings.timers.claim_ttl_s
        try:
            renewed = deps.store.renew(key, owner, ttl_s)
        except Exception:  # the renewer must outlive a Redis error; the holder will notice
            log.exception("could not renew the claim %s", key)
            return
        with self._lock:
            if (key, owner) not in self._held:
                return  # released meanwhile: its renewal failing is expected
            if renewed:
                self._held[(key, owner)] = (deps, time.monotonic() + ttl_s / 3)
                return
            del self._held[(key, owner)]
        log.warning("lost the claim %s while holding it", key)


_RENEWER = _Renewer()
