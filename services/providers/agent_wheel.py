"""The node agent as a wheel: what the API serves at ``/v1/node/agent.whl``, and its sha256,
which every boot script checks before it runs a byte of it (the wheel may travel over plain
HTTP, and a boot script runs as root)."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path

AGENT_DIST = "corral_node_agent"
# shared/ modules the agent imports, shipped beside it (each the standard library only).
AGENT_SHARED_MODULES = ("backoff",)


def agent_wheel_sha256() -> str:
    """The hex sha256 of :func:`build_agent_wheel`'s bytes (the same in every process of one
    install: the wheel is built reproducibly)."""
    return hashlib.sha256(build_agent_wheel()[1]).hexdigest()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    return f"{path},sha256={digest},{len(data)}"


@lru_cache(maxsize=1)
def build_agent_wheel() -> tuple[str, bytes]:
    """(file name, bytes) of a wheel holding only the agent (standard library only, so
    ``pip install --no-deps`` of it is all a machine needs)."""
    try:
        version = metadata.version("corral")
    except metadata.PackageNotFoundError:
        version = "0"
    from corral.services import agent
    from corral.shared import backoff

    root = Path(agent.__file__).parent
    files = {"corral/services/__init__.py": b'"""Corral\'s services (the node agent only)."""\n'}
    for src in sorted(root.glob("*.py")):
        files[f"corral/services/agent/{src.name}"] = src.read_bytes()
    # The core's modules the agent imports (each the standard library only).
    shared = Path(backoff.__file__).parent
    files["corral/shared/__init__.py"] = b'"""Corral\'s core (the node agent\'s part)."""\n'
    for name in AGENT_SHARED_MODULES:
        files[f"corral/shared/{name}.py"] = (shared / f"{name}.py").read_bytes()
    info = f"{AGENT_DIST}-{version}.dist-info"
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {AGENT_DIST.replace('_', '-')}\nVersion: {version}\n"
        "Summary: Corral's node agent\nRequires-Python: >=3.8\n"
    ).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: corral\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(path, data) for path, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in files.items():
            whl.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return f"{AGENT_DIST}-{version}-py3-none-any.whl", buf.getvalue()
