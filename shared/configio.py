"""Reading user files (YAML or JSON) with the line of every value, and clear errors.

Every error a user can cause is a :class:`ConfigError`: a list of :class:`Issue` rows, each
naming the file, the line, the field path and what was expected. The CLI prints them as
``FILE:LINE: field.path: message`` and exits 2; nothing here prints or exits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

PathKey = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Issue:
    """One problem in one place of one file."""

    file: str
    line: int | None
    loc: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.loc}: {self.message}" if self.loc else f"{where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "field": self.loc, "message": self.message}


class ConfigError(Exception):
    """The user's input is wrong. Carries every issue found, not just the first."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))

    @classmethod
    def single(cls, file: str, message: str, loc: str = "", line: int | None = None) -> ConfigError:
        return cls([Issue(file, line, loc, message)])


@dataclass
class Document:
    """A parsed file: its data and the line (1-based) where each value starts."""

    name: str
    data: Any
    lines: dict[PathKey, int] = field(default_factory=dict)
    base_dir: Path | None = None

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line of the deepest known prefix of ``path`` (a missing key points at its parent)."""
        key = tuple(path)
        while True:
            if key in self.lines:
                return self.lines[key]
            if not key:
                return None
            key = key[:-1]

    def issue(self, path: Sequence[str | int], message: str) -> Issue:
        return Issue(self.name, self.line_of(path), format_loc(path), message)

    def error(self, path: Sequence[str | int], message: str) -> ConfigError:
        return ConfigError([self.issue(path, message)])


def format_loc(path: Iterable[str | int]) -> str:
    """``("resources", "any_of", 2, "cloud")`` -> ``resources.any_of[2].cloud``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class _LineLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys (a silent overwrite hides a typo)."""


def _compose_to_python(node: yaml.Node, path: PathKey, doc: Document, loader: _LineLoader) -> Any:
    # A key's own line was recorded by its parent; a block value starts a line lower.
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, list):
                key = tuple(key)
            if key in out:
                raise ConfigError.single(
                    doc.name,
                    f"duplicate key {key!r}",
                    format_loc((*path, str(key))),
                    key_node.start_mark.line + 1,
                )
            child: str | int = key if isinstance(key, str | int) else str(key)
            doc.lines[(*path, child)] = key_node.start_mark.line + 1
            out[key] = _compose_to_python(value_node, (*path, child), doc, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_compose_to_python(v, (*path, i), doc, loader) for i, v in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def parse_text(text: str, name: str = "<input>", base_dir: Path | None = None) -> Document:
    """Parse YAML or JSON text (JSON is read as YAML so lines are known; a pure JSON
    fallback covers the few JSON texts YAML 1.1 reads differently)."""
    doc = Document(name=name, data=None, base_dir=base_dir)
    try:
        loader = _LineLoader(text)  # its reader refuses control characters at once
    except yaml.YAMLError as exc:
        raise ConfigError.single(name, f"not valid YAML or JSON: {exc}") from None
    try:
        node = loader.get_single_node()
        doc.data = None if node is None else _compose_to_python(node, (), doc, loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        try:
            doc.data = json.loads(text)
            doc.lines = {}
        except ValueError:
            line = mark.line + 1 if mark else None
            problem = exc.problem or str(exc)
            raise ConfigError.single(name, f"not valid YAML or JSON: {problem}", "", line) from None
    except yaml.YAMLError as exc:
        raise ConfigError.single(name, f"not valid YAML or JSON: {exc}") from None
    finally:
        loader.dispose()
    return doc


def load_file(path: str | Path) -> Document:
    """Read and parse one file; a missing or unreadable file is a :class:`ConfigError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError.single(str(path), "no such file") from None
    except IsADirectoryError:
        raise ConfigError.single(
            str(path), "is a directory, expected a YAML or JSON file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError.single(str(path), f"cannot read: {exc}") from None
    return parse_text(text, str(path), base_dir=p.parent)


def _data_path(data: Any, loc: Sequence[str | int]) -> list[str | int]:
    """Keep the parts of a pydantic error location that address the data; drop the union
    and validator tags pydantic puts in between (``function-after[...]``, model names)."""
    out: list[str | int] = []
    cur = data
    for part in loc:
        if _addresses(cur, part):
            out.append(part)
            cur = cur[part]
        elif isinstance(part, str) and (
            "[" in part
            or part[:1].isupper()
            or part in {"str", "int", "float", "bool", "list", "dict", "none", "literal"}
            or "-" in part
        ):
            continue  # a tag, not a key
        else:
            out.append(part)  # a key the data lacks (missing field) or an extra key
            cur = None
    return out


def _addresses(data: Any, part: str | int) -> bool:
    """Whether ``part`` is a key of the mapping (or an index of the list) ``data``."""
    if isinstance(data, Mapping):
        return part in data
    return isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)


def _message(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field (not part of this file's schema; check the spelling)"
    if kind == "missing":
        return "required field is missing"
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, ") :]
    return msg


def issues_from_validation(
    doc: Document, exc: ValidationError, prefix: PathKey = ()
) -> list[Issue]:
    """Turn a pydantic error into issues that name file, line and field."""
    seen: set[tuple[str, str]] = set()
    issues: list[Issue] = []
    for err in exc.errors():
        path = [*prefix, *_data_path(_walk(doc.data, prefix), err["loc"])]
        issue = doc.issue(path, _message(err))
        if (issue.loc, issue.message) in seen:
            continue
        seen.add((issue.loc, issue.message))
        issues.append(issue)
    return issues


def _walk(data: Any, path: PathKey) -> Any:
    for part in path:
        data = data[part]
    return data


def validate_doc(model: type[M], doc: Document, path: PathKey = (), context: Any = None) -> M:
    """Validate ``doc.data`` (or the part at ``path``) as ``model``; errors name file and line."""
    data = _walk(doc.data, path)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(issues_from_validation(doc, exc, path)) from None


def check_problems(model: BaseModel, doc: Document) -> None:
    """Raise the model's cross-field problems (if it has a ``problems()``) as one error."""
    problems = getattr(model, "problems", None)
    found = problems() if callable(problems) else []
    if found:
        raise ConfigError([doc.issue(path, message) for path, message in found])


def load_as(path: str | Path, model_cls: type[M]) -> tuple[M, Document]:
    """Read a file as one model class (cross-field problems included); raises ConfigError."""
    doc = load_file(path)
    if not isinstance(doc.data, Mapping):
        raise ConfigError.single(doc.name, "expected a mapping of fields", "", 1)
    model = validate_doc(model_cls, doc)
    check_problems(model, doc)
    return model, doc
