"""Reading user files (YAML or JSON) with the line of every value, and clear errors.

Every error a user can cause is a :class:`ConfigError`: a list of :class:`Issue` rows, each
naming the file, the line, the field path and what was expected. The CLI prints them as
``FILE:LINE: field.path: message`` and exits 2; nothing here prints or exits.
"""

from __future__ import annotations

import difflib
import json
import typing
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


@dataclass(frozen=True)
class YamlLimits:
    """What one document may cost to read. An alias is a pointer, so 400 bytes of anchors
    can stand for gigabytes once expanded (the "billion laughs"); deep nesting exhausts the
    parser's recursion. Every path that reads user YAML (CLI, API, queue) passes here."""

    max_bytes: int = 16 * 1024 * 1024  # the text itself
    max_aliases: int = 1_000  # ``*name`` references in the text
    max_depth: int = 100  # nested collections
    max_nodes: int = 1_000_000  # values once every alias is expanded
    # Past 10,000 values, aliases may at most multiply the values the text spells out by
    # this much (go-yaml's alias ratio, in spirit): a bomb is refused after a few ms.
    max_alias_ratio: int = 10


DEFAULT_LIMITS = YamlLimits()


class _LimitExceeded(Exception):
    """Raised inside the loader; :func:`parse_text` turns it into a ConfigError."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class _LineLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys (a silent overwrite hides a typo) and counts
    aliases and nesting as it composes (before anything is expanded)."""

    def __init__(self, stream: str, limits: YamlLimits = DEFAULT_LIMITS) -> None:
        super().__init__(stream)
        self.limits = limits
        self.aliases = 0
        self.depth = 0
        self.expanded = 0
        self.composed = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if not self.check_event(yaml.AliasEvent):
            self.composed += 1
        else:
            self.aliases += 1
            if self.aliases > self.limits.max_aliases:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise _LimitExceeded(
                    f"more than {self.limits.max_aliases} aliases (*name); expand them", line
                )
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise _LimitExceeded(f"nested deeper than {self.limits.max_depth} levels", line)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _count(loader: _LineLoader, node: yaml.Node, depth: int) -> None:
    loader.expanded += 1
    limits = loader.limits
    if loader.expanded > 10_000 and loader.expanded > limits.max_alias_ratio * loader.composed:
        raise _LimitExceeded(
            f"aliases expand {loader.composed} written values past "
            f"{limits.max_alias_ratio} times as many (an alias bomb?)",
            node.start_mark.line + 1,
        )
    if loader.expanded > limits.max_nodes:
        raise _LimitExceeded(
            f"more than {limits.max_nodes} values once aliases are expanded",
            node.start_mark.line + 1,
        )
    if depth > loader.limits.max_depth:  # aliases can nest what the text did not
        raise _LimitExceeded(
            f"nested deeper than {loader.limits.max_depth} levels once aliases are expanded",
            node.start_mark.line + 1,
        )


def _compose_to_python(node: yaml.Node, path: PathKey, doc: Document, loader: _LineLoader) -> Any:
    _count(loader, node, len(path))
    # A key's own line was recorded by its parent; a block value starts a line lower.
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError.single(
                    doc.name,
                    "a key must be a plain value (a name or a number), not a list or mapping",
                    format_loc(path),
                    key_node.start_mark.line + 1,
                )
            key = loader.construct_object(key_node, deep=True)
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


def parse_text(
    text: str,
    name: str = "<input>",
    base_dir: Path | None = None,
    limits: YamlLimits = DEFAULT_LIMITS,
) -> Document:
    """Parse YAML or JSON text (JSON is read as YAML so lines are known; a pure JSON
    fallback covers the few JSON texts YAML 1.1 reads differently). A text past ``limits``
    (size, aliases, depth, expanded values) is a ConfigError, found before it costs much."""
    doc = Document(name=name, data=None, base_dir=base_dir)
    if len(text) > limits.max_bytes:
        raise ConfigError.single(
            name, f"{len(text)} characters, more than the {limits.max_bytes} a file may hold"
        )
    try:
        loader = _LineLoader(text, limits)  # its reader refuses control characters at once
    except yaml.YAMLError as exc:
        raise ConfigError.single(name, f"not valid YAML or JSON: {exc}") from None
    try:
        node = loader.get_single_node()
        doc.data = None if node is None else _compose_to_python(node, (), doc, loader)
    except _LimitExceeded as exc:
        raise ConfigError.single(name, f"refused: {exc.message}", "", exc.line) from None
    except RecursionError:
        raise ConfigError.single(name, "refused: nested too deeply") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        try:
            doc.data = json.loads(text)
            doc.lines = {}
        except RecursionError:
            raise ConfigError.single(name, "refused: nested too deeply") from None
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


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def known_fields(model: type[BaseModel], path: Sequence[str | int]) -> set[str]:
    """The field names (and aliases) that are valid where ``path`` points inside ``model``:
    the keys a typo at ``path[-1]`` should have been. Empty when the path leaves the models."""
    models = [model]
    for part in path[:-1]:
        if isinstance(part, int):
            continue  # an index into a list (or a dict's values): same models
        nxt: list[type[BaseModel]] = []
        for m in models:
            field = m.model_fields.get(part) or next(
                (f for f in m.model_fields.values() if f.alias == part), None
            )
            if field is not None:
                nxt += _models_in(field.annotation)
        models = nxt
    names: set[str] = set()
    for m in models:
        for name, field in m.model_fields.items():
            names.add(field.alias or name)
    return names


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when one of ``choices`` is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def issues_from_validation(
    doc: Document,
    exc: ValidationError,
    prefix: PathKey = (),
    model: type[BaseModel] | None = None,
) -> list[Issue]:
    """Turn a pydantic error into issues that name file, line and field. Given the ``model``
    validated (at ``prefix``), an unknown field's issue suggests the field it is close to."""
    seen: set[tuple[str, str]] = set()
    issues: list[Issue] = []
    for err in exc.errors():
        rel = _data_path(_walk(doc.data, prefix), err["loc"])
        path = [*prefix, *rel]
        message = _message(err)
        if err.get("type") == "extra_forbidden" and model is not None and rel:
            hint = did_you_mean(str(rel[-1]), known_fields(model, rel))
            if hint:  # "check the spelling" becomes the spelling it probably is
                message = message.replace("check the spelling)", hint.strip()[1:])
        issue = doc.issue(path, message)
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
        raise ConfigError(issues_from_validation(doc, exc, path, model)) from None


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
