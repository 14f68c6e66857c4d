"""docs/settings.md, written from the settings model itself: every ``CORRAL_*`` variable with
its type, default and the comment beside its field in services/settings.py.

    python -m corral.services.settings_doc > docs/settings.md

tests/unit/test_settings_doc.py fails when the file and the model disagree, so a setting added
without regenerating the page is caught in CI.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from corral.services import settings as settings_module
from corral.services.settings import PACKAGED_LOCAL_CLOUD, Settings, Timers

HEADER = """# Settings

Every setting is an environment variable `CORRAL_<NAME>`; nested ones use a double underscore
(`CORRAL_TIMERS__HEARTBEAT_S`). `corral up` passes them on to every process it starts. A value
given as JSON (lists, mappings) is parsed as JSON. Where the CLI finds the API and its token
(`CORRAL_API_URL`, `CORRAL_API_TOKEN`, then `~/.corral/config.yaml` contexts, then the files
`corral up` writes) is in the README's quickstart.

This page is generated from `services/settings.py` by
`python -m corral.services.settings_doc > docs/settings.md`; a test keeps the two in sync.
"""


def _comments(source: str) -> dict[tuple[str, str], str]:
    """(class, field) -> the comment on the field's lines, or the comment block just above."""
    lines = source.splitlines()
    by_line: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            by_line[tok.start[0]] = tok.string.lstrip("#").strip()
    found: dict[tuple[str, str], str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            end = stmt.end_lineno or stmt.lineno
            trailing = [by_line[n] for n in range(stmt.lineno, end + 1) if n in by_line]
            above: list[str] = []
            n = stmt.lineno - 1
            while n in by_line and lines[n - 1].strip().startswith("#"):
                above.insert(0, by_line[n])
                n -= 1
            found[(node.name, stmt.target.id)] = " ".join(above + trailing)
    return found


def _type(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "")
    text = text.replace("pydantic.types.", "").replace("corral.services.settings.", "")
    return text.replace("NoneType", "None")


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default_factory is not None:
        if name == "home":
            return "`~/.corral`"
        value = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if isinstance(value, SecretStr):
        return "(secret)"
    if value == PACKAGED_LOCAL_CLOUD:
        return "the packaged local cloud (`services/providers/local/example-cloud.yaml`)"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, dict):
        value = {k: v.model_dump(exclude_defaults=True) for k, v in value.items()}
    return f"`{value!r}`" if value is not None else "unset"


def _rows(model: type[BaseModel], prefix: str, comments: dict[tuple[str, str], str]) -> list[str]:
    rows = ["| variable | type | default | what it is |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        env = field.validation_alias if isinstance(field.validation_alias, str) else None
        var = env or f"{prefix}{name.upper()}"
        note = comments.get((model.__name__, name), "")
        cells = (f"`{var}`", f"`{_type(field.annotation)}`", _default(model, name), note)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def render() -> str:
    """The whole page."""
    comments = _comments(Path(settings_module.__file__).read_text(encoding="utf-8"))
    parts = [HEADER, "## Corral", "", *_rows(Settings, "CORRAL_", comments), ""]
    parts += ["## Timers (`CORRAL_TIMERS__<NAME>`)", "", Timers.__doc__ or "", ""]
    parts += [*_rows(Timers, "CORRAL_TIMERS__", comments), ""]
    return "\n".join(parts)


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
