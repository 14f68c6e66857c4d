"""Logs: plain text by default, one JSON object per line with ``CORRAL_LOG_FORMAT=json``.

Every line logged while a piece of work is under way carries that work's ids: a Celery task
binds the request (or pool, cloud, cluster) its arguments name, with the task's name and id
(:mod:`.worker_hooks`); an API call binds the request its path names, and the submit handler
the request it created (:class:`RequestContextMiddleware`, :func:`tag`). The ids travel in a
context variable, so code that logs needs to pass nothing along.

A JSON line: ``{"ts", "level", "logger", "message", "process", ...ids, "exc"}``; ``ts`` is UTC
ISO 8601 with milliseconds. The message is the one text logs show: nothing more is written,
and no secret is (the formatter adds ids only).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from corral.services.settings import Settings

# The ids bound to the work at hand. A dict shared by reference: a handler running in a
# thread pool (with a copy of the context) adds to the same dict the middleware bound.
_BOUND: ContextVar[dict[str, str] | None] = ContextVar("corral_log_ids", default=None)


def bound() -> dict[str, str]:
    """The ids bound now (a copy)."""
    return dict(_BOUND.get() or {})


@contextlib.contextmanager
def binding(**ids: str | None) -> Iterator[None]:
    """Bind ``ids`` (None values left out) for the lines logged inside the block."""
    token = _BOUND.set({k: str(v) for k, v in ids.items() if v is not None})
    try:
        yield
    finally:
        _BOUND.reset(token)


def bind(**ids: str | None) -> None:
    """Bind ``ids`` until :func:`unbind` (Celery's prerun and postrun signals are two calls)."""
    _BOUND.set({k: str(v) for k, v in ids.items() if v is not None})


def unbind() -> None:
    _BOUND.set(None)


def tag(**ids: str | None) -> None:
    """Add ``ids`` to those bound now (the submit handler adds the request it created)."""
    current = _BOUND.get()
    if current is None:
        bind(**ids)
        return
    current.update({k: str(v) for k, v in ids.items() if v is not None})


class ContextFilter(logging.Filter):
    """Puts the bound ids on every record (``record.corral_ids``), so any formatter can use
    them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.corral_ids = bound()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, process, the bound ids."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        ids = getattr(record, "corral_ids", None)
        line.update(ids if ids is not None else bound())
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def json_handler(stream: Any = None) -> logging.Handler:
    """A handler writing JSON lines to ``stream`` (stderr by default)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    return handler


def configure_json_root(level: int | str = logging.INFO) -> None:
    """The root logger writes JSON lines to stderr, and only those."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(json_handler())
    root.setLevel(level)
    logging.captureWarnings(True)  # Python's warnings as log lines too, not bare text


def uvicorn_log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's logging config for the API: to stderr (stdout carries only the address line,
    which a supervisor may read once and never drain), as JSON lines when asked. The access log
    has the request line only, never headers, so the token stays out of it."""
    import uvicorn.config

    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stderr"
    if settings.log_format == "json":
        config["formatters"] = {"json": {"()": f"{__name__}.JsonFormatter"}}
        config["filters"] = {"ids": {"()": f"{__name__}.ContextFilter"}}
        for handler in config["handlers"].values():
            handler["formatter"] = "json"
            handler["filters"] = ["ids"]
        # Corral's own loggers (corral.*) and Python's warnings go through the root logger.
        config["root"] = {"handlers": ["default"], "level": "INFO"}
        logging.captureWarnings(True)
    return config


# -- the API ------------------------------------------------------------------------------

_REQUEST_PATH = re.compile(r"^/v1/requests/([^/]+)")
_INSTANCE_PATH = re.compile(r"^/v1/instances/([^/]+)")
_POOL_PATH = re.compile(r"^/v1/pools/([^/]+)")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestContextMiddleware:
    """Binds, for each HTTP call, the launch request (instance, pool) its path names; the
    access log line and every line logged while the call runs carry it. A plain ASGI
    middleware: the app runs in this context, not in a task of its own."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        ids: dict[str, str] = {}
        for field, pattern in (
            ("request_id", _REQUEST_PATH),
            ("instance_id", _INSTANCE_PATH),
            ("pool", _POOL_PATH),
        ):
            if m := pattern.match(path):
                ids[field] = m.group(1)
        token = _BOUND.set(ids)
        try:
            await self.app(scope, receive, send)
        finally:
            _BOUND.reset(token)
