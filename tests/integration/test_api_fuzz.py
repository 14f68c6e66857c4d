"""The API fuzzed from its own OpenAPI document with schemathesis, against a real Redis: every
operation is called with parameters and bodies drawn from its schemas (and, schemathesis's
negative mode, ones that break them), once with the write token and once without. No answer
may be a 500 or carry a traceback; no write may succeed without the token; a body over the
ceiling is refused with 413, whether announced or streamed.

CORRAL_FUZZ_EXAMPLES sets the examples per operation (``make fuzz`` runs many more)."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from corral.services.api import create_app
from corral.services.api.bundles import BUNDLES_PATH
from corral.services.settings import Settings, Timers

pytestmark = pytest.mark.integration

TOKEN = "fuzz-token-not-secret"
EXAMPLES = int(os.environ.get("CORRAL_FUZZ_EXAMPLES", "10"))
MAX_BODY = 64 * 1024  # a small ceiling, so the oversize checks stay cheap
WRITES = {"POST", "PUT", "DELETE", "PATCH"}
SEEN: Counter[str] = Counter()


def _app(redis_url: str, home: Path, redis_patience_s: float = 30.0) -> Any:
    cfg = Settings(
        redis_url=redis_url,
        api_token=TOKEN,
        home=home,
        prefix="fuzz",
        api_max_body_bytes=MAX_BODY,
        timers=Timers(redis_patience_s=redis_patience_s),
    )
    return create_app(cfg)


# The schema is read when the module loads, before the test's Redis exists: the app starts on
# a placeholder address and the fixture below points it at the real one. Its lifespan (run
# per operation) still pulses the placeholder: no patience there, or every operation's
# teardown waits out the pulse's 5 s join while it retries a port nobody listens on.
APP = _app("redis://127.0.0.1:1/0", Path("/nonexistent"), redis_patience_s=0.0)
# The app's own document, as it serves it, without serving it (from_asgi would): serving
# runs the lifespan, whose warm-up and pulse threads then ran beside the rest of collection,
# and CPython 3.11's AST state is shared between threads (pytest's assertion rewriting of
# another module failed once with "AST constructor recursion depth mismatch").
schema = schemathesis.openapi.from_dict(json.loads(json.dumps(APP.openapi())))
schema.app = APP  # case.call() goes to the app in this process, as from_asgi binds it
schema.location = "/openapi.json"


@pytest.fixture(autouse=True)
def _real_redis(redis_server: Any, tmp_path: Path) -> None:
    real = _app(redis_server.url, tmp_path)
    APP.state.deps, APP.state.settings = real.state.deps, real.state.settings


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_answer_is_a_server_error_and_no_write_needs_no_token(case: Any) -> None:
    for with_token in (False, True):
        headers = {"Authorization": f"Bearer {TOKEN}"} if with_token else {}
        response = case.call(headers=headers)
        SEEN[f"{response.status_code // 100}xx"] += 1
        text = response.content.decode(errors="replace")  # the agent's wheel is binary
        where = f"{case.method} {case.formatted_path} -> {response.status_code}: {text[:300]}"
        assert response.status_code < 500, where
        assert "Traceback" not in text, where
        if case.method.upper() in WRITES and not with_token:
            assert not 200 <= response.status_code < 300, f"a write without the token: {where}"


@pytest.fixture
def client(redis_server: Any, tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(_app(redis_server.url, tmp_path)) as c:
        yield c


def _write_routes() -> list[tuple[str, str]]:
    spec = _app("redis://127.0.0.1:1/0", Path("/nonexistent")).openapi()
    return sorted(
        (method.upper(), path.replace("{", "").replace("}", ""))
        for path, methods in spec["paths"].items()
        for method in methods
        if method.upper() in WRITES
    )


@pytest.mark.parametrize(("method", "path"), _write_routes())
def test_oversize_bodies_are_refused(client: TestClient, method: str, path: str) -> None:
    if path.startswith(BUNDLES_PATH):
        pytest.skip("a bundle's ceiling is CORRAL_BUNDLE_MAX_BYTES: test_a_bundle_over_its_cap")
    big = b"x" * (MAX_BODY + 1)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    announced = client.request(method, path, content=big, headers=headers)
    assert announced.status_code == 413, announced.text

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body streams
        for _ in range(MAX_BODY // 4096 + 2):
            yield b"y" * 4096

    streamed = client.request(method, path, content=chunks(), headers=headers)
    assert streamed.status_code == 413, streamed.text


def test_a_bundle_over_its_cap_is_refused_and_one_under_the_api_limit_is_kept(
    client: TestClient,
) -> None:
    """Bundles have a ceiling of their own (CORRAL_BUNDLE_MAX_BYTES, 16 MiB), above the 2 MiB
    of every other body: a workdir is larger than a task file."""
    import gzip
    import hashlib

    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/gzip"}
    over = b"x" * (16 * 1024 * 1024 + 1)
    sha = hashlib.sha256(over).hexdigest()
    assert client.put(f"/v1/bundles/{sha}", content=over, headers=headers).status_code == 413
    data = gzip.compress(b"y" * (3 * 1024 * 1024), mtime=0)  # over 2 MiB uncompressed only
    data += b"\0" * (MAX_BODY + 10 - len(data))  # past the general ceiling, under the bundle's
    sha = hashlib.sha256(data).hexdigest()
    kept = client.put(f"/v1/bundles/{sha}", content=data, headers=headers)
    assert kept.status_code == 201, kept.text
    wrong = client.put(f"/v1/bundles/{'0' * 64}", content=data, headers=headers)
    assert wrong.status_code == 422  # the path names another sha256


def test_zz_fuzz_summary() -> None:
    """The counts of the fuzz run above (printed with -s; named to run after it)."""
    errors = SEEN.get("5xx", 0)
    print(f"fuzz: {sum(SEEN.values())} calls, answers {dict(sorted(SEEN.items()))}, {errors} 5xx")
    assert errors == 0
