"""The API loads what its first submit would otherwise load at start: anyio's asyncio
backend, which every route run in a thread needs (a submit among them), is imported by the
lifespan, not by the first request (it cost the API about 0.1 s of CPU in its first burst of
submits, 1.3 ms a launch in the launch-cost benchmark's 100). A fresh interpreter, since this
test process may have loaded anyio's backend already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import asyncio, sys
from corral.services.api.app import create_app

app = create_app()
before = "anyio._backends._asyncio" in sys.modules

async def main():
    async with app.router.lifespan_context(app):
        print(before, "anyio._backends._asyncio" in sys.modules)

asyncio.run(main())
"""


def test_the_lifespan_loads_the_thread_backend_before_any_request(
    redis_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "CORRAL_HOME": str(tmp_path / "home"),
        "CORRAL_REDIS_URL": redis_url,
        "CORRAL_API_TOKEN": "test-token-not-secret",
        "CORRAL_CLOUDS": '["local"]',
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]  # not at import; loaded by the lifespan
