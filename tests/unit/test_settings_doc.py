"""docs/settings.md is generated from the settings model (services/settings_doc.py): this test
fails when a setting is added, renamed or re-commented without regenerating the page."""

from __future__ import annotations

from pathlib import Path

from corral.services.settings import Settings, Timers
from corral.services.settings_doc import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_docs_settings_md_is_what_the_model_renders() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/settings.md is stale: run "
        "`.venv/bin/python -m corral.services.settings_doc > docs/settings.md`"
    )


def test_every_setting_and_timer_is_on_the_page() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in Settings.model_fields:
        if name != "prometheus_multiproc_dir":  # read under prometheus_client's own name
            assert f"`CORRAL_{name.upper()}`" in text
    for name in Timers.model_fields:
        assert f"`CORRAL_TIMERS__{name.upper()}`" in text
    # The two a new user missed in the README (issue #28).
    assert "`CORRAL_CLOUDS`" in text and "`CORRAL_AWS_DEFAULT_IMAGE_ID`" in text
