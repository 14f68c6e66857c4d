"""The client's settings, read without pydantic-settings, agree with the settings tree's.

``corral.services.client_settings`` reads four of ``Settings``'s values itself (the CLI's
start-up would otherwise build the whole tree); for each environment below both are asked and
must answer alike, so a change to how ``Settings`` reads one of them shows up here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from corral.services import client_settings as light
from corral.services.settings import Settings

NAMES = (
    "CORRAL_HOME",
    "CORRAL_API_URL",
    "CORRAL_API_TOKEN",
    "CORRAL_BUNDLE_MAX_BYTES",
    "CORRAL_LOCAL_CLOUD_FILE",
)

ENVIRONMENTS = [
    {},
    {"CORRAL_HOME": "/srv/corral", "CORRAL_API_URL": "http://api:8000", "CORRAL_API_TOKEN": "t"},
    {"corral_api_url": "http://lower:1", "Corral_Home": "rel/home"},  # any case
    {"CORRAL_API_URL": "", "CORRAL_API_TOKEN": "", "CORRAL_HOME": ""},  # empty is kept
    {"CORRAL_BUNDLE_MAX_BYTES": "1024"},
    {"CORRAL_BUNDLE_MAX_BYTES": str(512 * 1024 * 1024)},
    {"CORRAL_BUNDLE_MAX_BYTES": " 4096 "},  # not plain digits: Settings reads it
    {"CORRAL_API_PORT": "not a port"},  # a value the client never reads
    {"CORRAL_LOCAL_CLOUD_FILE": "/srv/lab-cloud.yaml"},
]


def _set(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in NAMES:
        for variant in (name, name.lower(), name.title()):
            monkeypatch.delenv(variant, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda e: ",".join(e) or "none")
def test_the_client_reads_what_settings_read(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the default home is under it
    _set(monkeypatch, env)
    got = light.client_settings()
    if "CORRAL_API_PORT" in env:  # the tree refuses it; the client's four are still read
        with pytest.raises(ValidationError):
            Settings()
        assert got == light.ClientSettings(tmp_path / ".corral", None, None)
        return
    full = Settings()
    token = None if full.api_token is None else full.api_token.get_secret_value()
    assert (got.home, got.api_url, got.api_token) == (full.home, full.api_url, token)
    assert got.file("api-url") == full.file("api-url")
    assert light.bundle_max_bytes() == full.bundle_max_bytes
    assert light.local_cloud_file() == full.local_cloud_file
    assert got.file("catalog") == full.catalog_dir


@pytest.mark.parametrize("value", ["1023", str(512 * 1024 * 1024 + 1), "lots"])
def test_a_bundle_limit_out_of_bounds_is_refused_as_settings_refuse_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.services.settings import reset_settings

    _set(monkeypatch, {"CORRAL_BUNDLE_MAX_BYTES": value})
    reset_settings()
    try:
        with pytest.raises(ValidationError, match="bundle_max_bytes"):
            light.bundle_max_bytes()
    finally:
        reset_settings()


def test_the_bounds_are_the_settings_bounds() -> None:
    metadata = Settings.model_fields["bundle_max_bytes"].metadata
    low = next(m.ge for m in metadata if getattr(m, "ge", None) is not None)
    high = next(m.le for m in metadata if getattr(m, "le", None) is not None)
    assert (low, high) == light.BUNDLE_MAX_BYTES_BOUNDS
