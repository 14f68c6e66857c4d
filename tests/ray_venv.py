"""Ray for the tests: a virtualenv of its own in the user's cache folder
(``~/.cache/corral/ray-venv-<ray version>-py<python version>``), ``ray`` from the package
index, created by the first test that needs it (the control plane never depends on Ray).

It lives outside the clone: CI runs `make check` in a fresh clone on the machine the tests
already ran on, and building it again there took half a minute of every CI run (about 400 MB
unpacked). One folder per Ray requirement and Python, so a new pin makes a new one.

``ray_python()`` answers the venv's interpreter, installing Ray when it is missing, or
``(None, why)`` when that is impossible (no network, no wheel for this Python). The
benchmark and the real-Ray integration tests share it; ``make ray-venv`` makes it ahead.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

# The version these tests were written against, with the dashboard (job submission) packages.
RAY_VERSION = "2.60.0"
RAY_REQUIREMENT = f"ray[default]=={RAY_VERSION}"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "corral"
RAY_VENV = CACHE / f"ray-venv-{RAY_VERSION}-py{'.'.join(map(str, sys.version_info[:3]))}"


def ray_python() -> tuple[Path | None, str]:
    """The Ray venv's interpreter (installing Ray first when missing), and how it was got;
    ``(None, why)`` when Ray cannot be installed here. Safe from several processes at once
    (a lock file next to the venv)."""
    python = RAY_VENV / "bin" / "python"
    RAY_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(RAY_VENV.parent / f"{RAY_VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        check = [str(python), "-c", "import ray, aiohttp, ray.dashboard"]  # Ray and its dashboard
        if (
            python.exists()
            and subprocess.run(check, capture_output=True, timeout=300).returncode == 0
        ):
            return python, "present"
        try:
            if not python.exists():  # never made, or half made: made afresh
                subprocess.run(
                    [sys.executable, "-m", "venv", "--clear", str(RAY_VENV)],
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", RAY_REQUIREMENT],
                check=True,
                capture_output=True,
                text=True,
                timeout=1200,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            return None, f"could not install {RAY_REQUIREMENT}: {str(detail).strip()[-400:]}"
        return python, "installed"


if __name__ == "__main__":
    found, how = ray_python()
    print(f"{found} ({how})" if found else how)
    sys.exit(0 if found else 1)
