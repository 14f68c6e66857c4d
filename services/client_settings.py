"""The few settings the API client needs, read without pydantic-settings.

``corral status`` and ``corral launch`` need five values of the settings tree: where Corral's
home is, the API's address and token, the bundle limit and the local cloud's file. Building the
whole tree (``corral.services.settings.Settings``) imports pydantic-settings (with asyncio,
argparse and dotenv) and checks some sixty fields: a sixth of what those commands cost before
they sent a byte. This module reads the same five as ``Settings`` reads them
(``CORRAL_<NAME>``, the name in any case, an empty value kept as empty); a unit test
(tests/unit/test_client_settings.py) holds the two to the same answers. A value this reading
cannot vouch for (a bundle limit that is not plain digits within its bounds) is left to
``Settings``, so its error is the one every other command gives. It is the settings module's
one companion: nothing else reads the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PREFIX = "corral_"
# Settings.local_cloud_file's default (services/settings.py's PACKAGED_LOCAL_CLOUD).
PACKAGED_LOCAL_CLOUD = (
    Path(__file__).resolve().parent / "providers" / "local" / "example-cloud.yaml"
)
# Settings.bundle_max_bytes's bounds (ge, le).
BUNDLE_MAX_BYTES_BOUNDS = (1024, 512 * 1024 * 1024)


@dataclass(frozen=True)
class ClientSettings:
    """What the client reads of the settings, under the names of ``Settings``'s fields."""

    home: Path
    api_url: str | None
    api_token: str | None  # the secret itself (Settings keeps a SecretStr)

    def file(self, name: str) -> Path:
        return self.home / name


def _environment() -> dict[str, str]:
    """The environment as pydantic-settings reads it with ``case_sensitive=False``: every
    name lowercased (of two that differ only in case, the later wins)."""
    return {name.lower(): value for name, value in os.environ.items()}


def client_settings() -> ClientSettings:
    """The client's settings from the environment, as ``get_settings()`` gives them."""
    env = _environment()
    home = env.get(PREFIX + "home")
    return ClientSettings(
        home=Path.home() / ".corral" if home is None else Path(home),
        api_url=env.get(PREFIX + "api_url"),
        api_token=env.get(PREFIX + "api_token"),
    )


def local_cloud_file() -> Path:
    """``Settings.local_cloud_file``: CORRAL_LOCAL_CLOUD_FILE, else the packaged local cloud
    (launch's quick look at the names a task gives, services/cli/launch_cmd.py)."""
    text = _environment().get(PREFIX + "local_cloud_file")
    return PACKAGED_LOCAL_CLOUD if text is None else Path(text)


def bundle_max_bytes() -> int:
    """``Settings.bundle_max_bytes``: CORRAL_BUNDLE_MAX_BYTES, else the default. A value
    that is not plain digits within the bounds is left to ``Settings`` (which reads the forms
    pydantic takes, or refuses the value with the error every other command gives)."""
    text = _environment().get(PREFIX + "bundle_max_bytes")
    if text is None:
        from corral.shared.bundles import DEFAULT_MAX_BUNDLE_BYTES

        return DEFAULT_MAX_BUNDLE_BYTES
    low, high = BUNDLE_MAX_BYTES_BOUNDS
    if text.isascii() and text.isdigit() and low <= int(text) <= high:
        return int(text)
    from corral.services.settings import get_settings

    return get_settings().bundle_max_bytes
