"""The client of Corral's HTTP API: one :class:`Client` per API and token.

Where the API is: ``CORRAL_API_URL`` (``settings.api_url``), else the current context of
``<home>/config.yaml`` (:mod:`corral.services.client.contexts`), else the file ``<home>/api-url``
that ``corral up`` writes. The write token: ``CORRAL_API_TOKEN``, else the context's token file,
else ``<home>/api-token``.
Every method returns a typed view (``corral.services.client.views``) or raises one of the
exceptions of ``corral.services.client.errors``.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from corral.services.client.contexts import ContextError, context_token_file, context_url
from corral.services.client.errors import (
    ApiError,
    ApiUnreachable,
    NoApiAddress,
    WaitTimeout,
    api_error,
)
from corral.services.client.views import (
    ENDED_STATES,
    RUNNING,
    ClusterDown,
    ClusterSummary,
    ClusterView,
    CostReportView,
    EventPage,
    EventView,
    Health,
    InstanceRow,
    PoolDeleted,
    PoolView,
    ProjectView,
    RequestView,
    SubmissionView,
    UserView,
    WhyView,
)
from corral.services.client.wire import BadAddress, Http, Response, Unreachable
from corral.services.client_settings import ClientSettings, client_settings

if TYPE_CHECKING:
    import logging

    from pydantic import BaseModel

    from corral.services.settings import Settings

URL_FILE = "api-url"
TOKEN_FILE = "api-token"
DEFAULT_TIMEOUT_S = 30.0  # a fresh API's first submit loads the planner and the catalog
WAIT_POLL_S = 0.25  # `wait` reads the events endpoint about 4 times a second
FOLLOW_INTERVAL_S = 1.0  # `follow_logs` reads the output once a second

ViewT = TypeVar("ViewT", bound="BaseModel")


@dataclass(frozen=True)
class SessionRead:
    """One read of a session: bytes, whether the node's side ended, its code and error."""

    data: bytes
    eof: bool
    exit_code: int | None = None
    error: str | None = None


def _log() -> logging.Logger:
    """The client's logger (logging is loaded when there is something to log)."""
    import logging

    return logging.getLogger("corral.client")


def _seg(ident: str) -> str:
    """An id as one path segment (a stray "/" must not reach another route)."""
    return quote(ident, safe="")


def _read_home_file(path: Path) -> str | None:
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return value or None


def api_url(settings: Settings | ClientSettings) -> str | None:
    """The API's base URL (CORRAL_API_URL, the current context's, ``<home>/api-url``), or
    None when nothing says where it is. Raises ContextError for a broken config file."""
    return (
        settings.api_url or context_url(settings.home) or _read_home_file(settings.file(URL_FILE))
    )


def api_token(settings: Settings | ClientSettings) -> str | None:
    """The write token (CORRAL_API_TOKEN, the current context's token file,
    ``<home>/api-token``), or None when none is configured."""
    return token_and_source(settings)[0]


def token_and_source(settings: Settings | ClientSettings) -> tuple[str | None, str]:
    """The write token and where it was read (``CORRAL_API_TOKEN``, or a file's path), so an
    error can name the one to fix."""
    secret = settings.api_token
    if secret is not None and not isinstance(secret, str):
        secret = secret.get_secret_value()  # Settings' SecretStr
    if secret:
        return str(secret), "CORRAL_API_TOKEN"
    token_file = context_token_file(settings.home) or settings.file(TOKEN_FILE)
    return _read_home_file(token_file), str(token_file)


class Client:
    """One API, one token. Use it as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = Http(self.base_url, headers, timeout_s)
        except BadAddress as exc:
            raise NoApiAddress(f"not a valid API address {base_url!r}: {exc}") from None

    @classmethod
    def from_settings(
        cls, settings: Settings | ClientSettings | None = None, **kwargs: Any
    ) -> Client:
        """The API and token the settings name (``CORRAL_API_URL``, ``CORRAL_API_TOKEN``, or
        the files ``corral up`` writes under ``CORRAL_HOME``); without settings, the
        environment's (``corral.services.client_settings``: the settings tree's values, read
        without building it)."""
        settings = settings or client_settings()
        try:
            url, token = api_url(settings), api_token(settings)
        except ContextError as exc:
            raise NoApiAddress(str(exc)) from None
        if url is None:
            raise NoApiAddress(
                "no Corral API address: run `corral up` or set CORRAL_API_URL (or name one in "
                "a context: `corral config set api_url URL`)"
            )
        return cls(url, token, **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- the wire -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except BadAddress as exc:
            raise NoApiAddress(f"not a valid API address {self.base_url!r}: {exc}") from None
        except Unreachable as exc:
            raise ApiUnreachable(f"cannot reach the Corral API at {self.base_url}: {exc}") from None
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except (ValueError, AttributeError):
                detail = response.text.strip() or response.reason_phrase
            raise api_error(response.status_code, detail)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                response.status_code, "the API answered with something not JSON"
            ) from None

    def _view(self, model: type[ViewT], data: Any) -> ViewT:
        from pydantic import ValidationError

        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise ApiError(200, f"the API's answer is not a {model.__name__}: {exc}") from None

    def _get(self, model: type[ViewT], path: str, **kwargs: Any) -> ViewT:
        return self._view(model, self._json("GET", path, **kwargs))

    def _list(self, model: type[ViewT], path: str, field: str, **kwargs: Any) -> list[ViewT]:
        return [self._view(model, item) for item in self._json("GET", path, **kwargs)[field]]

    def _send(
        self, model: type[ViewT], method: str, path: str, body: Any = None, **kw: Any
    ) -> ViewT:
        if body is not None:
            # YAML may hold values JSON lacks (dates); send them as their text.
            kw["content"] = json.dumps(body, default=str)
            kw["headers"] = {"Content-Type": "application/json", **kw.get("headers", {})}
        return self._view(model, self._json(method, path, **kw))

    # ---- requests -----------------------------------------------------------------------------

    def launch(
        self,
        task: Mapping[str, Any] | str | os.PathLike[str],
        *,
        idempotency_key: str | None = None,
        project: str | None = None,
    ) -> RequestView:
        """Submit a task: a mapping (a task file's content), its YAML text, or a task file's
        path (read and checked here, a ``compute_config`` path sent inline). With an
        ``idempotency_key`` a request already created under the key is returned and nothing
        is created; ``project``: the project to submit to (default: the token's user's only
        one). Raises InvalidTask, Impossible, or ConfigError for a file read here."""
        source = "<task>"
        if isinstance(task, os.PathLike):
            from corral.services.client.tasks import read_task_file

            source = str(task)
            read = read_task_file(Path(task))
            for notice in read.notices:
                _log().info("%s: %s", task, notice)
            task = read.data
        if not isinstance(task, str):
            task = self.with_files(dict(task), source=source, project=project)
        body = {"task_yaml": task} if isinstance(task, str) else {"task": dict(task)}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        params = {"project": project} if project is not None else {}
        return self._send(RequestView, "POST", "/v1/requests", body, headers=headers, params=params)

    def with_files(
        self,
        task: dict[str, Any],
        *,
        source: str = "<task>",
        base: Path | None = None,
        max_bytes: int | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """The task with its local workdir and file mounts packed and uploaded (once per
        content and project: the API is asked first; ``project`` as for :meth:`launch`), and
        ``bundle`` saying where they go. Paths are read
        from ``base`` (the current folder); at most ``max_bytes`` gzip'd (None:
        ``corral.shared.bundles.DEFAULT_MAX_BUNDLE_BYTES``). A task without local files is
        returned as is; ConfigError names a source that cannot be packed."""
        from corral.services.client.bundles import needs_bundle

        if not needs_bundle(task) or task.get("bundle"):
            return task
        from corral.services.client.bundles import BundleError, pack
        from corral.shared.bundles import DEFAULT_MAX_BUNDLE_BYTES
        from corral.shared.configio import ConfigError

        limit = DEFAULT_MAX_BUNDLE_BYTES if max_bytes is None else max_bytes
        try:
            data, bundle = pack(task, base or Path.cwd(), limit)
        except BundleError as exc:
            raise ConfigError.single(source, exc.message, loc=exc.field) from None
        params = {"project": project} if project is not None else {}
        try:
            self._call("HEAD", f"/v1/bundles/{bundle.sha256}", params=params)
        except ApiError as exc:
            if exc.status_code != 404:
                raise
            self._call(
                "PUT",
                f"/v1/bundles/{bundle.sha256}",
                content=data,
                headers={"Content-Type": "application/gzip"},
                params=params,
            )
        return {**task, "bundle": bundle.model_dump()}

    def exec(
        self, request_id: str, command: str, *, node: int = 0, interval_s: float = 0.25
    ) -> Iterator[str | int]:
        """Run ``command`` on node ``node`` (the head) of a running request through its agent:
        its output as it comes (strings), then its exit code (an int), last."""
        started = self._json(
            "POST", f"/v1/requests/{_seg(request_id)}/exec", json={"command": command, "node": node}
        )
        yield from self.follow_exec(str(started["id"]), interval_s=interval_s)

    def follow_exec(self, exec_id: str, *, interval_s: float = 0.25) -> Iterator[str | int]:
        """A command's output as it comes (strings), then its exit code (an int), last."""
        offset = 0
        while True:
            seen = self._json("GET", f"/v1/execs/{_seg(exec_id)}", params={"offset": offset})
            if seen["output"]:
                yield str(seen["output"])
            offset = int(seen["offset"])
            if seen["exit_code"] is not None:
                yield int(seen["exit_code"])
                return
            time.sleep(interval_s)

    # --- the job queue: corral exec ID task.yaml, queue, cancel ----------------------------
    def submit_job(self, request_id: str, job: dict[str, Any]) -> dict[str, Any]:
        """Queue a job (``{name, run, envs, num_nodes}``) on a running request; the job."""
        got: dict[str, Any] = self._json("POST", f"/v1/requests/{_seg(request_id)}/jobs", json=job)
        return got

    def jobs(self, request_id: str) -> list[dict[str, Any]]:
        """The request's jobs, job 1 (the launch's run) first."""
        got = self._json("GET", f"/v1/requests/{_seg(request_id)}/jobs")
        return list(got["jobs"])

    def cancel_jobs(
        self, request_id: str, numbers: list[int], *, every: bool = False
    ) -> dict[str, Any]:
        """Cancel jobs by number (``every``: all not ended): ``{cancelled, not_cancelled}``."""
        body = {"jobs": [] if every else numbers, "all": every}
        got: dict[str, Any] = self._json(
            "POST", f"/v1/requests/{_seg(request_id)}/jobs/cancel", json=body
        )
        return got

    # --- sessions: corral attach and port-forward, relayed by the API (docs/attach.md) ------
    def open_session(self, request_id: str, kind: str, *, node: int = 0, **opts: Any) -> str:
        """Open a ``shell`` or ``forward`` session (``port=``) on a running node; its id.
        The node's agent takes it on its next heartbeat."""
        body = {"kind": kind, "node": node, **{k: v for k, v in opts.items() if v is not None}}
        started = self._json("POST", f"/v1/requests/{_seg(request_id)}/sessions", json=body)
        return str(started["id"])

    def session_write(
        self,
        session_id: str,
        data: bytes,
        *,
        eof: bool = False,
        size: tuple[int, int] | None = None,
    ) -> None:
        """Send bytes to the node's side (at most 64 KiB a call), waiting while it is
        behind; ``size``: the terminal's new (rows, cols); ``eof``: this side has ended."""
        params: dict[str, Any] = {"eof": "true"} if eof else {}
        if size:
            params.update(rows=size[0], cols=size[1])
        pause = 0.05
        while True:
            done = self._json(
                "POST",
                f"/v1/sessions/{_seg(session_id)}/input",
                params=params or None,
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            if done.get("ok"):
                return
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def session_read(self, session_id: str, wait_s: float = 10.0) -> SessionRead:
        """What the node's side sent since the last read (waiting up to ``wait_s`` for
        something), and once it ended, its exit code (and an error, if it could not start)."""
        got = self._json(
            "GET", f"/v1/sessions/{_seg(session_id)}/output", params={"wait_s": wait_s}
        )
        return SessionRead(
            base64.b64decode(got.get("data") or ""),
            bool(got.get("eof")),
            got.get("exit_code"),
            got.get("error"),
        )

    def status(self, request_id: str) -> RequestView:
        """One request with its attempts and instances."""
        return self._get(RequestView, f"/v1/requests/{_seg(request_id)}")

    def list_requests(
        self, state: str | None = None, limit: int = 100, project: str | None = None
    ) -> list[RequestView]:
        """Requests, newest first, at most ``limit``; only those in ``state`` (and of
        ``project``) if given. A member or viewer sees its projects' requests only."""
        params: dict[str, Any] = {"limit": limit, **({"state": state.upper()} if state else {})}
        if project is not None:
            params["project"] = project
        return self._list(RequestView, "/v1/requests", "requests", params=params)

    def events(self, request_id: str, after: int = 0) -> EventPage:
        """The request's progress lines after sequence number ``after``, and its state."""
        path = f"/v1/requests/{_seg(request_id)}/events"
        return self._get(EventPage, path, params={"after": after})

    def wait(
        self,
        request_id: str,
        *,
        timeout_s: float | None = None,
        on_event: Callable[[EventView], None] | None = None,
        poll_s: float = WAIT_POLL_S,
    ) -> RequestView:
        """Wait until the request is RUNNING or has ended and return it; ``on_event`` is
        given each progress line once, in order. Raises WaitTimeout after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        after = 0
        while True:
            page = self.events(request_id, after=after)
            for event in page.events:
                if on_event is not None:
                    on_event(event)
                after = max(after, event.seq)
            if page.state == RUNNING or page.state in ENDED_STATES:
                return self.status(request_id)
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(self.status(request_id), float(timeout_s or 0))
            time.sleep(poll_s)

    def logs(self, request_id: str, instance_id: str | None = None) -> str:
        """The output of the request's instances (or one's), each under a ``==>`` header."""
        params = {"instance": instance_id} if instance_id else {}
        return self._call("GET", f"/v1/requests/{_seg(request_id)}/logs", params=params).text

    def follow_logs(
        self,
        request_id: str,
        instance_id: str | None = None,
        *,
        interval_s: float = FOLLOW_INTERVAL_S,
    ) -> Iterator[str]:
        """The output so far, then what is added to it, until the request has ended (that
        last read included). Each instance is followed from its own byte offset, so every line
        comes exactly once whatever the others write; when the request has more than one node,
        each line starts with its node (``(node 1) step 3``)."""
        offsets: dict[str, int] = {}
        nodes: dict[str, int] = {}  # instance -> node index
        path = f"/v1/requests/{_seg(request_id)}/logs/since"
        while True:
            params = {"after": ",".join(f"{i}:{o}" for i, o in offsets.items())}
            if instance_id:
                params["instance"] = instance_id
            page = self._call("GET", path, params=params).json()
            for piece in page["pieces"]:
                nodes[piece["instance"]] = int(piece["node_index"])
            several = len(set(nodes.values())) > 1
            out: list[str] = []
            for piece in page["pieces"]:
                offsets[piece["instance"]] = int(piece["end"])
                text = piece["text"]
                if text and several:
                    tag = f"(node {piece['node_index']}) "
                    text = "".join(tag + line for line in text.splitlines(keepends=True))
                out.append(text)
            yield "".join(out)
            if page["ended"]:
                return
            time.sleep(interval_s)

    def cancel(self, request_id: str) -> RequestView:
        """Cancel a request (a running one has its instances terminated)."""
        return self._send(RequestView, "POST", f"/v1/requests/{_seg(request_id)}/cancel")

    def terminate(self, request_id: str, instance_id: str | None = None) -> RequestView:
        """Cancel a request not running yet, or terminate a running one's instances (or one)."""
        params = {"instance": instance_id} if instance_id else {}
        path = f"/v1/requests/{_seg(request_id)}/terminate"
        return self._send(RequestView, "POST", path, params=params)

    def stop(self, request_id: str) -> RequestView:
        """Stop a running request's machines (their disks kept); Conflict where its cloud
        cannot stop a machine."""
        return self._send(RequestView, "POST", f"/v1/requests/{_seg(request_id)}/stop")

    def start(self, request_id: str) -> RequestView:
        """Start a stopped request's machines again (STARTING, then RUNNING)."""
        return self._send(RequestView, "POST", f"/v1/requests/{_seg(request_id)}/start")

    def autostop(
        self,
        request_id: str,
        idle_minutes: float | None = None,
        *,
        down: bool = False,
        cancel: bool = False,
    ) -> RequestView:
        """Set a running request's autostop (idle minutes, ``down`` to terminate) or cancel
        it; idle time counts from now."""
        body = {"idle_minutes": idle_minutes, "down": down, "cancel": cancel}
        return self._send(RequestView, "POST", f"/v1/requests/{_seg(request_id)}/autostop", body)

    def terminate_instance(self, instance_id: str) -> RequestView:
        """Terminate one instance; returns its request."""
        path = f"/v1/instances/{_seg(instance_id)}/terminate"
        return self._send(RequestView, "POST", path)

    def instances(
        self, request_id: str | None = None, state: str | None = None
    ) -> list[InstanceRow]:
        """Every instance Corral knows (a request's only, or in one state only)."""
        params = {k: v for k, v in (("request", request_id), ("state", state)) if v}
        if "state" in params:
            params["state"] = params["state"].upper()
        return self._list(InstanceRow, "/v1/instances", "instances", params=params)

    def cost_report(self, project: str | None = None, limit: int = 200) -> CostReportView:
        """What the visible requests cost (the newest ``limit``), with totals by user,
        project and cloud (a member sees its projects' requests only)."""
        params: dict[str, Any] = {"limit": limit, **({"project": project} if project else {})}
        return self._get(CostReportView, "/v1/costs", params=params)

    def submission(self, idempotency_key: str) -> SubmissionView | None:
        """What the task submitted under ``idempotency_key`` became (by ``launch`` or onto
        the queue); None while nothing is recorded under it."""
        try:
            return self._get(SubmissionView, f"/v1/submissions/{_seg(idempotency_key)}")
        except ApiError as exc:
            if exc.status_code == 404:
                return None
            raise

    def health(self) -> Health:
        return self._get(Health, "/healthz")

    # ---- pools --------------------------------------------------------------------------------

    def apply_pool(
        self,
        name: str,
        kind: str,
        spec: Mapping[str, Any],
        file_name: str = "pool.yaml",
        cloud: str | None = None,
    ) -> PoolView:
        """Register (or replace) a machine pool file or a master config (``kind``
        ``machine_pool`` or ``master_config``; ``spec`` the file's content as a mapping)."""
        body = {"name": name, "kind": kind, "file_name": file_name, "spec": spec, "cloud": cloud}
        return self._send(PoolView, "POST", "/v1/pools", body)

    def pools(self) -> list[PoolView]:
        return self._list(PoolView, "/v1/pools", "pools")

    def pool(self, name: str) -> PoolView:
        return self._get(PoolView, f"/v1/pools/{_seg(name)}")

    def delete_pool(self, name: str) -> PoolDeleted:
        """Unregister a pool; its machines are terminated (Conflict while workloads use it)."""
        return self._send(PoolDeleted, "DELETE", f"/v1/pools/{_seg(name)}")

    def why(self, request_id: str) -> WhyView:
        """Where a request runs, or why it waits."""
        return self._get(WhyView, f"/v1/requests/{_seg(request_id)}/why")

    # ---- users and projects (admins, but whoami and projects) ---------------------------------

    def whoami(self) -> UserView:
        """The token's user: its name, role and projects."""
        return self._get(UserView, "/v1/whoami")

    def add_user(self, name: str, role: str, projects: list[str]) -> UserView:
        """Add a user; the view's ``token`` is its API token, shown this once."""
        body = {"name": name, "role": role, "projects": projects}
        return self._send(UserView, "POST", "/v1/users", body)

    def users(self) -> list[UserView]:
        return self._list(UserView, "/v1/users", "users")

    def revoke_user(self, name: str) -> UserView:
        """Revoke a user's token, at once."""
        return self._send(UserView, "POST", f"/v1/users/{_seg(name)}/revoke")

    def add_project(self, name: str, quota: Mapping[str, Any] | None = None) -> ProjectView:
        body = {"name": name, "quota": dict(quota or {})}
        return self._send(ProjectView, "POST", "/v1/projects", body)

    def projects(self) -> list[ProjectView]:
        """Projects with their quotas and usage (a member's or viewer's own)."""
        return self._list(ProjectView, "/v1/projects", "projects")

    def set_quota(self, name: str, quota: Mapping[str, Any]) -> ProjectView:
        """Replace a project's quota (``gpus``, ``usd_per_period``, ``period_s``)."""
        return self._send(ProjectView, "PUT", f"/v1/projects/{_seg(name)}/quota", dict(quota))

    # ---- clusters -----------------------------------------------------------------------------

    def create_cluster(
        self,
        cluster_yaml: str,
        file_name: str = "cluster.yaml",
        cloud: str | None = None,
        name: str | None = None,
        mounts: dict[str, Any] | None = None,
    ) -> ClusterSummary:
        """Register a Ray cluster file (its text); the autoscaler starts its head and
        min_workers. ``cloud="local"`` plays an AWS or GCP file on the local cloud. ``mounts``
        are its file mounts packed (:func:`corral.services.client.mounts.pack`)."""
        body = {
            "cluster_yaml": cluster_yaml,
            "file_name": file_name,
            "cloud": cloud,
            "name": name,
            "mounts": mounts,
        }
        return self._send(ClusterSummary, "POST", "/v1/clusters", body)

    def clusters(self) -> list[ClusterSummary]:
        return self._list(ClusterSummary, "/v1/clusters", "clusters")

    def cluster(self, name: str) -> ClusterView:
        """One cluster: its nodes, standing demand and last decisions."""
        return self._get(ClusterView, f"/v1/clusters/{_seg(name)}")

    def set_demand(
        self, name: str, demand_yaml: str, file_name: str = "demand.yaml"
    ) -> ClusterSummary:
        """Replace the cluster's standing demand with a DEMAND file's text (empty: clear)."""
        body = {"demand_yaml": demand_yaml, "file_name": file_name}
        return self._send(ClusterSummary, "PUT", f"/v1/clusters/{_seg(name)}/demand", body)

    def delete_cluster(self, name: str) -> ClusterDown:
        """Take the cluster down: its nodes are terminated, then it is forgotten."""
        return self._send(ClusterDown, "DELETE", f"/v1/clusters/{_seg(name)}")
