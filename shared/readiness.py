"""A service's readiness probe: SkyPilot's ``service.readiness_probe``.

Two forms, as SkyPilot's service YAML writes them:

- ``readiness_probe: /health``: a path, probed with GET;
- ``readiness_probe: {path: /v1/models, post_data: {...}, initial_delay_seconds: 1200,
  timeout_seconds: 15}``: POST with ``post_data`` as JSON when given; failures in the first
  ``initial_delay_seconds`` (default 1200) do not count; each probe waits ``timeout_seconds``
  (default 15).

Corral's node agent probes ``http://127.0.0.1:<first port of resources.ports><path>`` on the
node itself, and reports ready with its heartbeat once it answers 200 (``docs/services.md``).
``headers`` (SkyPilot's newer field) is read too. Pure: the standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DEFAULT_INITIAL_DELAY_S = 1200.0  # SkyPilot's
DEFAULT_TIMEOUT_S = 15.0  # SkyPilot's
MAX_POST_BYTES = 64 * 1024
PROBE_ENV = "CORRAL_READINESS_PROBE"  # the probe, as JSON, in the node's work envs


@dataclass(frozen=True, slots=True)
class ReadinessProbe:
    path: str
    post_data: Any = None
    initial_delay_s: float = DEFAULT_INITIAL_DELAY_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    headers: dict[str, str] = field(default_factory=dict)

    def for_agent(self, port: int) -> str:
        """The probe as the node agent reads it (JSON in ``CORRAL_READINESS_PROBE``)."""
        return json.dumps(
            {
                "url": f"http://127.0.0.1:{port}{self.path}",
                "post_data": self.post_data,
                "initial_delay_s": self.initial_delay_s,
                "timeout_s": self.timeout_s,
                "headers": self.headers,
            }
        )


def _seconds(value: object, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"expected readiness_probe.{name} a number of seconds >= 0, got {value!r}")
    return float(value)


def parse_probe(value: object) -> ReadinessProbe | None:
    """``service.readiness_probe`` in either form (None when absent); raises ValueError
    naming what was expected."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict):
        raise ValueError(f"expected readiness_probe a path or a mapping with path, got {value!r}")
    known = {"path", "post_data", "initial_delay_seconds", "timeout_seconds", "headers"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(
            f"unknown readiness_probe field(s) {', '.join(unknown)}; expected "
            f"{', '.join(sorted(known))}"
        )
    path = value.get("path")
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 2048:
        raise ValueError(f"expected readiness_probe.path a URL path starting with /, got {path!r}")
    post = value.get("post_data")
    if post is not None and len(json.dumps(post)) > MAX_POST_BYTES:
        raise ValueError(f"readiness_probe.post_data is over {MAX_POST_BYTES} bytes as JSON")
    headers = value.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ValueError("expected readiness_probe.headers a mapping of names to text")
    return ReadinessProbe(
        path=path,
        post_data=post,
        initial_delay_s=_seconds(
            value.get("initial_delay_seconds"), "initial_delay_seconds", DEFAULT_INITIAL_DELAY_S
        ),
        timeout_s=_seconds(value.get("timeout_seconds"), "timeout_seconds", DEFAULT_TIMEOUT_S),
        headers=dict(headers),
    )
