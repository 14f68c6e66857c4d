"""``<home>/config.yaml``: named contexts, each an API and the file holding its token.

::

    current-context: prod
    contexts:
      prod:
        api_url: https://corral.example.com
        token_file: ~/.corral/prod-token

Where a command finds its API, first match wins: ``CORRAL_API_URL``, the current context's
``api_url``, then ``<home>/api-url`` (written by ``corral up``). Its token: ``CORRAL_API_TOKEN``,
the current context's ``token_file``, then ``<home>/api-token``. The file holds no secret
itself (a token file is named, never copied in), and is written with mode 0600 all the same.
``corral config get/set/use-context`` edit it (services/cli/config_cmd.py).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.yaml"
CONTEXT_KEYS = ("api_url", "token_file")
CURRENT = "current-context"


class ContextError(ValueError):
    """The config file or a name given for it is wrong; the message says which and why."""


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass
class UserConfig:
    """The contents of ``<home>/config.yaml``."""

    path: Path
    current: str | None = None
    contexts: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls, home: Path) -> UserConfig:
        """The file under ``home``; an empty config when there is none."""
        path = home / CONFIG_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return cls(path)
        import yaml  # only when there is a file: most homes have none

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ContextError(f"{path}: not YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ContextError(f"{path}: expected a mapping, found {type(data).__name__}")
        unknown = sorted(set(data) - {CURRENT, "contexts"})
        if unknown:
            hint = did_you_mean(unknown[0], (CURRENT, "contexts"))
            raise ContextError(f"{path}: {unknown[0]}: unknown key{hint}")
        contexts = data.get("contexts") or {}
        if not isinstance(contexts, dict):
            raise ContextError(f"{path}: contexts: expected a mapping of name to context")
        parsed: dict[str, dict[str, str]] = {}
        for name, ctx in contexts.items():
            ctx = ctx or {}
            if not isinstance(ctx, dict):
                raise ContextError(f"{path}: contexts.{name}: expected a mapping")
            for key in ctx:
                if key not in CONTEXT_KEYS:
                    hint = did_you_mean(str(key), CONTEXT_KEYS)
                    raise ContextError(f"{path}: contexts.{name}.{key}: unknown key{hint}")
            parsed[str(name)] = {k: str(v) for k, v in ctx.items() if v is not None}
        current = data.get(CURRENT)
        if current is not None and str(current) not in parsed:
            hint = did_you_mean(str(current), list(parsed))
            raise ContextError(f"{path}: {CURRENT}: no context named {current!r}{hint}")
        return cls(path, None if current is None else str(current), parsed)

    def context(self) -> dict[str, str]:
        """The current context's settings (empty when none is chosen)."""
        return self.contexts.get(self.current, {}) if self.current else {}

    def as_dict(self) -> dict[str, Any]:
        return {CURRENT: self.current, "contexts": self.contexts}

    def save(self) -> None:
        """Write the file, readable by its owner only."""
        import yaml

        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = yaml.safe_dump(self.as_dict(), sort_keys=False)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(self.path, 0o600)

    def get(self, key: str) -> Any:
        """``current-context``, ``contexts``, ``contexts.NAME`` or ``contexts.NAME.KEY``,
        or a bare context key (``api_url``) of the current context."""
        if key == CURRENT:
            return self.current
        if key == "contexts":
            return self.contexts
        name, ctx_key = self._split(key)
        if name not in self.contexts:
            hint = did_you_mean(name, list(self.contexts))
            raise ContextError(f"no context named {name!r}{hint}")
        return self.contexts[name] if ctx_key is None else self.contexts[name].get(ctx_key)

    def set(self, key: str, value: str) -> None:
        """Set a context key (``contexts.NAME.KEY`` or a bare key of the current context;
        the context is made when new) or ``current-context``."""
        if key == CURRENT:
            self.use(value)
            return
        name, ctx_key = self._split(key)
        if ctx_key is None:
            raise ContextError(f"{key}: name a key of the context ({', '.join(CONTEXT_KEYS)})")
        self.contexts.setdefault(name, {})[ctx_key] = value
        if self.current is None:
            self.current = name

    def use(self, name: str) -> None:
        if name not in self.contexts:
            hint = did_you_mean(name, list(self.contexts))
            known = ", ".join(self.contexts) or "none yet; `corral config set` makes one"
            raise ContextError(f"no context named {name!r}{hint} (contexts: {known})")
        self.current = name

    def _split(self, key: str) -> tuple[str, str | None]:
        parts = key.split(".")
        ctx_key: str | None
        if len(parts) == 1:  # a bare key: the current context's (or "default")
            name, ctx_key = self.current or "default", parts[0]
        elif parts[0] == "contexts" and len(parts) in (2, 3):
            name, ctx_key = parts[1], (parts[2] if len(parts) == 3 else None)
        else:
            raise ContextError(f"{key}: expected {CURRENT}, contexts.NAME[.KEY] or a context key")
        if ctx_key is not None and ctx_key not in CONTEXT_KEYS:
            hint = did_you_mean(ctx_key, (*CONTEXT_KEYS, CURRENT))
            raise ContextError(f"{ctx_key}: unknown key{hint} (keys: {', '.join(CONTEXT_KEYS)})")
        return name, ctx_key


def context_url(home: Path) -> str | None:
    """The current context's API address, if any."""
    return UserConfig.load(home).context().get("api_url")


def context_token_file(home: Path) -> Path | None:
    """The current context's token file, if any (``~`` expanded)."""
    name = UserConfig.load(home).context().get("token_file")
    return Path(name).expanduser() if name else None
