"""A small client of Corral's HTTP API: what the CLI talks to.

Where the API is: ``CORRAL_API_URL`` (``settings.api_url``), else the file ``<home>/api-url``
that ``corral up`` writes. The write token: ``CORRAL_API_TOKEN``, else ``<home>/api-token``.
Failures come out as three exceptions a caller can map to exit codes: :class:`NoApiAddress`,
:class:`ApiUnreachable` and :class:`ApiError` (the API answered with an error status). None
of their messages carries the token.

While Redis is away the API answers 503: a read, or a submit (which carries an
``Idempotency-Key``, so a retry can never launch twice), is sent again with backoff for up to
``retry_s`` before the 503 is reported.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from corral.services.settings import Settings

URL_FILE = "api-url"
TOKEN_FILE = "api-token"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_RETRY_S = 30.0  # how long a safe call is retried while the API says Redis is away


class NoApiAddress(LookupError):
    """Neither CORRAL_API_URL nor <home>/api-url says where the API is (or it is malformed)."""


class ApiUnreachable(ConnectionError):
    """Nothing answered at the API's address (refused, timed out, reset)."""


class ApiError(Exception):
    """The API answered with an error status; ``detail`` is its JSON ``detail`` (or text)."""

    def __init__(self, status_code: int, detail: Any) -> None:
        self.status_code = status_code
        self.detail = detail
        super().__init__(f"HTTP {status_code}: {describe_detail(detail)}")


def describe_detail(detail: Any) -> str:
    """An API error's ``detail`` in one line."""
    if isinstance(detail, dict):
        if detail.get("reasons"):
            return f"{detail.get('error', 'refused')}: " + "; ".join(map(str, detail["reasons"]))
        if detail.get("issues"):
            return f"{detail.get('error', 'invalid')} ({len(detail['issues'])} issues)"
        return str(detail.get("error") or detail)
    if isinstance(detail, list):  # FastAPI's own validation errors
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)


def _seg(ident: str) -> str:
    """An id as one path segment (a stray "/" must not reach another route)."""
    return quote(ident, safe="")


def _read_home_file(path: Path) -> str | None:
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return value or None


def api_url(settings: Settings) -> str | None:
    """The API's base URL, or None when nothing says where it is."""
    return settings.api_url or _read_home_file(settings.file(URL_FILE))


def api_token(settings: Settings) -> str | None:
    """The write token, or None when none is configured."""
    if settings.api_token is not None and settings.api_token.get_secret_value():
        return str(settings.api_token.get_secret_value())
    return _read_home_file(settings.file(TOKEN_FILE))


class Client:
    """One API, one token; every method returns the decoded JSON (logs: text)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        retry_s: float = DEFAULT_RETRY_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_s = retry_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.Client(
                base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport
            )
        except (httpx.InvalidURL, ValueError) as exc:
            raise NoApiAddress(f"not a valid API address {base_url!r}: {exc}") from None

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> Client:
        url = api_url(settings)
        if url is None:
            raise NoApiAddress("no Corral API address: run `corral up` or set CORRAL_API_URL")
        return cls(url, api_token(settings), **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; a safe one (a read, or a write with an idempotency key) is sent again
        while the API answers 503 (its Redis is away), with backoff, for ``retry_s``."""
        safe = method == "GET" or "Idempotency-Key" in (kwargs.get("headers") or {})
        deadline = time.monotonic() + self.retry_s
        wait_s = 0.2
        while True:
            try:
                return self._call_once(method, path, **kwargs)
            except ApiError as exc:
                if not safe or exc.status_code != 503 or time.monotonic() + wait_s > deadline:
                    raise
            time.sleep(wait_s)
            wait_s = min(wait_s * 2, 2.0)

    def _call_once(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.UnsupportedProtocol as exc:
            raise NoApiAddress(f"not a valid API address {self.base_url!r}: {exc}") from None
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise ApiUnreachable(
                f"cannot reach the Corral API at {self.base_url}: {reason}"
            ) from None
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except (ValueError, AttributeError):
                detail = response.text.strip() or response.reason_phrase
            raise ApiError(response.status_code, detail)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                response.status_code, "the API answered with something not JSON"
            ) from None

    # Requests.
    def submit(self, task: dict[str, Any]) -> dict[str, Any]:
        """Submit a task (its file's content as a mapping); returns the request's view."""
        # YAML may hold values JSON lacks (dates); send them as their text.
        body = json.dumps({"task": task}, default=str)
        # A fresh key per submit: a retry of this call finds the request it made.
        headers = {"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex}
        result: dict[str, Any] = self._json("POST", "/v1/requests", content=body, headers=headers)
        return result

    def get_request(self, request_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/requests/{_seg(request_id)}")
        return result

    def list_requests(self, state: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if state:
            params["state"] = state
        result: list[dict[str, Any]] = self._json("GET", "/v1/requests", params=params)["requests"]
        return result

    def events(self, request_id: str, after: int = 0) -> dict[str, Any]:
        """``{"request_id", "state", "events": [{"seq", "at", "text"}]}`` after ``after``."""
        result: dict[str, Any] = self._json(
            "GET", f"/v1/requests/{_seg(request_id)}/events", params={"after": after}
        )
        return result

    def logs(self, request_id: str, instance_id: str | None = None) -> str:
        params = {"instance": instance_id} if instance_id else {}
        return self._call("GET", f"/v1/requests/{_seg(request_id)}/logs", params=params).text

    def cancel(self, request_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("POST", f"/v1/requests/{_seg(request_id)}/cancel")
        return result

    def terminate(self, request_id: str, instance_id: str | None = None) -> dict[str, Any]:
        params = {"instance": instance_id} if instance_id else {}
        result: dict[str, Any] = self._json(
            "POST", f"/v1/requests/{_seg(request_id)}/terminate", params=params
        )
        return result

    # Instances and health.
    def terminate_instance(self, instance_id: str) -> dict[str, Any]:
        """Terminate one instance; returns its request's view."""
        result: dict[str, Any] = self._json("POST", f"/v1/instances/{_seg(instance_id)}/terminate")
        return result

    def list_instances(
        self, request_id: str | None = None, state: str | None = None
    ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("request", request_id), ("state", state)) if v}
        result: list[dict[str, Any]] = self._json("GET", "/v1/instances", params=params)[
            "instances"
        ]
        return result

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/healthz")
        return result

    # Clusters.
    def create_cluster(
        self, cluster_yaml: str, file_name: str, cloud: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        """Register a cluster file (its text); the autoscaler starts its head and minimums."""
        body = {"cluster_yaml": cluster_yaml, "file_name": file_name, "cloud": cloud, "name": name}
        result: dict[str, Any] = self._json("POST", "/v1/clusters", json=body)
        return result

    def list_clusters(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._json("GET", "/v1/clusters")["clusters"]
        return result

    def get_cluster(self, name: str) -> dict[str, Any]:
        """``{"nodes", "demand", "last_decision", ...}`` of one cluster."""
        result: dict[str, Any] = self._json("GET", f"/v1/clusters/{_seg(name)}")
        return result

    def set_demand(self, name: str, demand_yaml: str, file_name: str) -> dict[str, Any]:
        """Replace the cluster's standing demand with a DEMAND file's text (empty: clear)."""
        body = {"demand_yaml": demand_yaml, "file_name": file_name}
        result: dict[str, Any] = self._json("PUT", f"/v1/clusters/{_seg(name)}/demand", json=body)
        return result

    def delete_cluster(self, name: str) -> dict[str, Any]:
        """Take the cluster down: its nodes are terminated, then it is forgotten."""
        result: dict[str, Any] = self._json("DELETE", f"/v1/clusters/{_seg(name)}")
        return result

    # Pools.
    def apply_pool(
        self,
        name: str,
        kind: str,
        spec: dict[str, Any],
        file_name: str,
        cloud: str | None = None,
    ) -> dict[str, Any]:
        """Register (or replace) a machine pool file or a master config (its content as a
        mapping); returns the pool's view with ``replaced``."""
        body = {"name": name, "kind": kind, "file_name": file_name, "spec": spec, "cloud": cloud}
        headers = {"Content-Type": "application/json"}
        # YAML may hold values JSON lacks (dates); send them as their text.
        content = json.dumps(body, default=str)
        result: dict[str, Any] = self._json("POST", "/v1/pools", content=content, headers=headers)
        return result

    def list_pools(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._json("GET", "/v1/pools")["pools"]
        return result

    def get_pool(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/pools/{_seg(name)}")
        return result

    def delete_pool(self, name: str) -> dict[str, Any]:
        """Unregister a pool; its machines are terminated (refused while workloads use it)."""
        result: dict[str, Any] = self._json("DELETE", f"/v1/pools/{_seg(name)}")
        return result

    def why(self, request_id: str) -> dict[str, Any]:
        """``{"id", "state", "pool", "code", "reason", ...}``: why a request waits."""
        result: dict[str, Any] = self._json("GET", f"/v1/requests/{_seg(request_id)}/why")
        return result
