"""JSON log lines and the ids bound to the work at hand (CORRAL_LOG_FORMAT=json)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from corral.services.observability import logs
from corral.services.observability.worker_hooks import ids_of
from corral.services.queues import dispatch
from corral.services.settings import Settings


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the 'corral.test' logger writes, as JSON lines."""
    stream = io.StringIO()
    logger = logging.getLogger("corral.test")
    handler = logs.json_handler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)


def _read(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_is_one_json_object_with_the_bound_ids(lines: io.StringIO) -> None:
    log = logging.getLogger("corral.test")
    log.info("before")
    with logs.binding(request_id="r-1", task=dispatch.ATTEMPT, pool=None):
        log.warning("launching %s", "cpu-2")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")
    log.info("after")
    before, during, failed, after = _read(lines)
    assert before["message"] == "before" and "request_id" not in before
    assert during["message"] == "launching cpu-2" and during["level"] == "WARNING"
    assert (during["request_id"], during["task"]) == ("r-1", dispatch.ATTEMPT)
    assert "pool" not in during  # None is left out
    assert "ValueError: boom" in str(failed["exc"]) and failed["request_id"] == "r-1"
    assert "request_id" not in after
    assert str(before["ts"]).endswith("+00:00")


def test_a_task_binds_what_its_arguments_name() -> None:
    assert ids_of(dispatch.ATTEMPT, ["r-9", 2, 0], "t-1") == {
        "task": dispatch.ATTEMPT,
        "task_id": "t-1",
        "request_id": "r-9",
    }
    assert ids_of(dispatch.POOL_MACHINE, ["small", "m-1"], None) == {
        "task": dispatch.POOL_MACHINE,
        "pool": "small",
        "machine_id": "m-1",
    }
    assert ids_of(dispatch.RECONCILE, [], "t-2") == {"task": dispatch.RECONCILE, "task_id": "t-2"}


def test_api_calls_bind_the_request_of_their_path_and_the_one_they_create(
    lines: io.StringIO,
) -> None:
    app = FastAPI()
    log = logging.getLogger("corral.test")

    @app.get("/v1/requests/{rid}")
    def show(rid: str) -> dict[str, str]:  # a sync handler runs in a thread pool
        log.info("showing")
        return {}

    @app.post("/v1/requests")
    def create() -> dict[str, str]:
        logs.tag(request_id="r-new")
        return {}

    app.add_middleware(logs.RequestContextMiddleware)
    with TestClient(app) as client:
        client.get("/v1/requests/r-42")
        client.post("/v1/requests")
        assert logs.bound() == {}
    [shown] = _read(lines)
    assert shown["request_id"] == "r-42"


def test_the_submit_handler_tag_reaches_the_access_line() -> None:
    """The middleware's ids are one dict shared with the handler: what the handler tags, the
    lines written afterwards in the middleware's context (uvicorn's access line) carry."""
    after: dict[str, str] = {}

    async def app(scope: object, receive: object, send: object) -> None:
        logs.tag(request_id="r-made")

    async def call() -> None:
        middleware = logs.RequestContextMiddleware(app)  # type: ignore[arg-type]

        async def send(message: object) -> None:
            after.update(logs.bound())

        async def inner(scope: object, receive: object, send_: object) -> None:
            await app(scope, receive, send_)
            await send_({})  # the response goes out after the handler: the access line

        middleware.app = inner  # type: ignore[assignment]
        await middleware({"type": "http", "path": "/v1/requests"}, None, send)  # type: ignore[arg-type]

    asyncio.run(call())
    assert after == {"request_id": "r-made"}


def test_uvicorn_logs_json_lines_when_asked() -> None:
    text = logs.uvicorn_log_config(Settings(log_format="text"))
    assert text["handlers"]["access"]["stream"] == "ext://sys.stderr"
    assert "json" not in text["formatters"]
    config = logs.uvicorn_log_config(Settings(log_format="json"))
    assert {h["formatter"] for h in config["handlers"].values()} == {"json"}
    logging.config.dictConfig(config)  # a config logging accepts
    logging.config.dictConfig(text)
