"""A service's readiness probe, run by its node agent (SkyPilot's ``service.readiness_probe``).

The control plane puts the probe in the node's work envs as JSON (``CORRAL_READINESS_PROBE``:
``{url, post_data, initial_delay_s, timeout_s, headers}``, the URL on 127.0.0.1 and the
service's first port). A thread asks the URL every ``PROBE_EVERY_S``: GET, or POST with
``post_data`` as JSON; an answer 200 means ready. ``ready`` is what the heartbeat carries: it
turns True on a 200 and back to False on a failure. Failures within ``initial_delay_s`` of the
start are not reported as a verdict yet (None), as SkyPilot ignores them; after it, False.

Standard library only.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import urllib.request

PROBE_ENV = "CORRAL_READINESS_PROBE"
PROBE_EVERY_S = 1.0


class ReadinessWatch(threading.Thread):
    def __init__(self, probe: dict[str, Any], every_s: float = PROBE_EVERY_S) -> None:
        super().__init__(name="corral-readiness", daemon=True)
        self.url = str(probe["url"])
        self.post_data = probe.get("post_data")
        self.initial_delay_s = float(probe.get("initial_delay_s") or 0.0)
        self.timeout_s = max(0.1, float(probe.get("timeout_s") or 15.0))
        self.headers = {str(k): str(v) for k, v in (probe.get("headers") or {}).items()}
        self.every_s = every_s
        self.ready: bool | None = None  # None: no verdict yet (within the initial delay)
        self._began = time.monotonic()
        self._stop = threading.Event()
        self._opener: urllib.request.OpenerDirector | None = None

    @classmethod
    def from_envs(cls, envs: dict[str, str]) -> ReadinessWatch | None:
        raw = envs.get(PROBE_ENV)
        if not raw:
            return None
        try:
            probe = json.loads(raw)
        except ValueError:
            return None
        return cls(probe) if isinstance(probe, dict) and probe.get("url") else None

    def run(self) -> None:
        while True:
            passed = self.once()
            if passed:
                self.ready = True
            elif self.ready or time.monotonic() - self._began >= self.initial_delay_s:
                self.ready = False
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()

    def once(self) -> bool:
        """One probe: True when the service answered 200 within the timeout."""
        # Imported here: urllib.request (with ssl and email) triples what the local cloud's
        # launcher holds, and so what each fork of it costs, for the services that probe.
        import urllib.error
        import urllib.request

        if self._opener is None:  # the node itself: never through a proxy the env names
            self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        data = None
        headers = dict(self.headers)
        if self.post_data is not None:
            data = json.dumps(self.post_data).encode()
            headers.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(
            self.url, data=data, headers=headers, method="POST" if data is not None else "GET"
        )
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False
