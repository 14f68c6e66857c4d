"""Launch requests from the user's side: submit, cancel/terminate, view, logs.

The API calls these; so does ``corral.schedule.submit``, the task other Celery applications
send onto the ``schedule`` queue: both submit through :func:`submit_task`, so a document is
checked the same way whichever door it came in by. Work is handed to the workers by task name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.services.providers.base import Provider, node_work_of
from corral.services.providers.registry import ProviderUnavailable
from corral.services.queues import dispatch
from corral.services.runtime import member_fields, typed_task
from corral.services.runtime.deps import Deps, new_id
from corral.services.runtime.planning import clouds_left_out, left_out_text
from corral.services.runtime.pooled.registry import registry_view
from corral.services.state.bundles import scope_of
from corral.services.state.serving import ServiceIndex
from corral.shared.config.detect import check_problems
from corral.shared.config.task import Task
from corral.shared.configio import (
    ConfigError,
    Document,
    Issue,
    format_loc,
    parse_text,
    validate_doc,
)
from corral.shared.identity import stamp_identity
from corral.shared.lifecycle import TERMINAL_REQUEST_STATES, InstanceState, RequestState
from corral.shared.quotas import gpus_asked
from corral.shared.records import ChainStep, Instance, LaunchRequest
from corral.shared.recovery import runs_of, total_cost
from corral.shared.routing import Direct, Refusal, reads_pools, route_with_plan

log = logging.getLogger(__name__)

TASK_NAME = "task"  # the file name issues carry for a task that came as data, not a file
MAX_KEY_LENGTH = 255
# A task is kilobytes; its stored form is capped so aliases that survive the YAML reader's
# limits cannot turn a small body into megabytes in Redis (which runs noeviction).
MAX_STORED_TASK_BYTES = 512 * 1024
# States a cancel ends (CANCELLED): the request has not run, or waits to run again.
_CANCELLABLE = frozenset(
    {RequestState.PENDING, RequestState.PROVISIONING, RequestState.WAITING, RequestState.PREEMPTED}
)


class RequestNotFound(LookupError):
    def __init__(self, request_id: str) -> None:
        super().__init__(f"no launch request {request_id!r}")
        self.request_id = request_id


class Impossible(ValueError):
    """Nothing could ever be planned for this task here (not a passing shortage)."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons) or "no candidate can be planned")
        self.reasons = reasons


class BadKey(ValueError):
    """An idempotency key Corral cannot keep (empty, too long, or with control characters)."""


@dataclass(frozen=True)
class Owner:
    """Who submits and for which project (None, None: the first admin, or the schedule
    queue's door, with no project), and whether it is an admin: a member's task has its
    identity labels set from its owner and its launch parameters checked against its cloud's
    allowlist (:mod:`corral.services.runtime.member_fields`)."""

    user: str | None = None
    project: str | None = None
    admin: bool = True


NO_OWNER = Owner()


def scoped_key(key: str, project: str | None) -> str:
    """An idempotency key as kept: per project, so a key never reaches another project's
    request (the first admin's project-less submissions keep the key as given)."""
    return key if project is None else f"project:{project}:{key}"


@dataclass(frozen=True)
class Submitted:
    """A request accepted by :func:`submit_task`; ``created`` is False for a duplicate (an
    idempotency key that already held this request)."""

    request: LaunchRequest
    created: bool


def task_document(task: Mapping[str, Any] | str, name: str = TASK_NAME) -> Document:
    """A submitted task as a document: a mapping as it is, text (YAML or JSON) parsed with
    its lines; raises ConfigError."""
    if isinstance(task, str):
        return parse_text(task, name)
    if not isinstance(task, Mapping):
        got = type(task).__name__
        raise ConfigError.single(
            name, f"expected a task (a mapping of fields) or its text, not {got}"
        )
    return Document(name=name, data=task)


def validate_task(doc: Document) -> Task:
    """The task, with the cross-field checks ``corral validate`` makes; raises ConfigError."""
    if not isinstance(doc.data, Mapping):
        raise ConfigError.single(doc.name, "expected a mapping of fields (a task file)", "", 1)
    task = validate_doc(Task, doc)
    check_problems(task, doc)
    if missing := task.unset_secrets():
        message = "no value given: launch with `--secret {0}` (or --secret {0}=VALUE)"
        raise ConfigError([doc.issue(("secrets", n), message.format(n)) for n in missing])
    config = task.compute_config
    if isinstance(config, str):
        message = (
            "a file path, which Corral cannot read on its side; send the compute config inline"
        )
        raise doc.error(("compute_config",), message)
    if config is not None and (found := config.problems()):
        raise ConfigError([doc.issue(("compute_config", *path), msg) for path, msg in found])
    return task


def check_key(key: Any) -> str:
    """``key`` if Corral can keep it as an idempotency key; raises BadKey."""
    if not isinstance(key, str) or not key:
        raise BadKey("an idempotency key must be a non-empty string")
    if len(key) > MAX_KEY_LENGTH:
        raise BadKey(f"an idempotency key is at most {MAX_KEY_LENGTH} characters, not {len(key)}")
    if not key.isprintable():
        raise BadKey("an idempotency key must not hold control characters")
    return key


def refusal_of(exc: ConfigError | Impossible) -> dict[str, Any]:
    """A refused document as the API answers it (its 422 detail) and a submission records it."""
    if isinstance(exc, Impossible):
        return {"error": "impossible", "reasons": exc.reasons}
    return {"error": "invalid task", "issues": [i.as_dict() for i in exc.issues]}


def submit_task(
    deps: Deps,
    task: Mapping[str, Any] | str,
    *,
    idempotency_key: str | None = None,
    owner: Owner = NO_OWNER,
) -> Submitted:
    """Check a submitted task (a mapping, or its YAML/JSON text) as ``POST /v1/requests``
    does, route it and store it PENDING: the one path of the API and of
    ``corral.schedule.submit``. Raises ConfigError (invalid), Impossible, BadKey.

    With an idempotency key, a request already created under it is returned (``created``
    False) and nothing is written; a refusal is recorded under the key, so whoever sent it
    can read it (``GET /v1/submissions/<key>``)."""
    key = None if idempotency_key is None else check_key(idempotency_key)
    if key is not None:
        key = scoped_key(key, owner.project)
    if key is not None and (held := _held(deps, key)) is not None:
        return held
    try:
        doc = task_document(task)
        checked = owned(validate_task(doc), doc, owner)
        _check_bundle(deps, checked, doc, owner)
        return _accept(deps, checked, key, owner)
    except (ConfigError, Impossible) as exc:
        if key is not None:
            deps.store.refuse_keyed(key, refusal_of(exc), deps.now())
        raise


def owned(task: Task, doc: Document, owner: Owner) -> Task:
    """The task with its identity labels (``project``, ``user``) set from its owner; a task
    naming other values is refused, naming the label (:mod:`corral.shared.identity`)."""
    if owner.user is None and owner.project is None:
        return task  # the schedule queue's door: nobody to name
    server = {"project": owner.project, "user": owner.user}
    labels, problems = stamp_identity(task.labels, server, trusted=owner.admin)
    if problems:
        raise ConfigError([doc.issue(path, message) for path, message in problems])
    task.labels = labels
    return task


def _check_bundle(deps: Deps, task: Task, doc: Document, owner: Owner) -> None:
    """A task's bundle must be kept for its project: a sha256 another project uploaded is
    unknown here (bundles are per project, services/state/bundles.py)."""
    if task.bundle is None:
        return
    if not deps.bundles.has(scope_of(owner.project), task.bundle.sha256):
        where = f"project {owner.project!r}" if owner.project else "the project-less scope"
        raise doc.error(
            ("bundle", "sha256"),
            f"no bundle {task.bundle.sha256} is kept for {where}; upload it first "
            "(PUT /v1/bundles/SHA256?project=..., as corral launch does)",
        )


def _held(deps: Deps, key: str) -> Submitted | None:
    """The request a key holds already (a duplicate: counted, nothing else written)."""
    found = deps.store.submission(key)
    if found is None or found.request_id is None:
        return None
    deps.store.count_submission(key)
    stored = deps.store.get_request(found.request_id)
    assert stored is not None  # created in the same script as the key's record
    admit_if_pending(deps, stored)
    return Submitted(stored, created=False)


def admit_if_pending(deps: Deps, req: LaunchRequest) -> None:
    """Hand a still PENDING request to scheduling again: the first submitter may have died
    between storing it and publishing it (admission is idempotent)."""
    if req.state == RequestState.PENDING:
        dispatch.admit(req.id, settings=deps.settings, cloud=first_cloud(req))


def _accept(deps: Deps, task: Task, key: str | None, owner: Owner) -> Submitted:
    if key is None:
        return Submitted(submit(deps, task, owner=owner), created=True)
    req = _new_request(deps, task, owner=owner)
    accepted = f"accepted: {_name(task)} (idempotency key {key!r})"
    holder = deps.store.create_keyed_request(req, key, accepted)
    created = holder == req.id
    stored = deps.store.get_request(holder)
    assert stored is not None
    if created:
        _index_service(deps, task, stored)
        dispatch.admit(stored.id, settings=deps.settings, cloud=first_cloud(stored))
    else:  # another submission under the key won the race
        admit_if_pending(deps, stored)
    return Submitted(stored, created=created)


def submit_queued(deps: Deps, task: Any, idempotency_key: Any) -> dict[str, Any]:
    """``corral.schedule.submit``: :func:`submit_task` for a producer that cannot wait for an
    answer; the outcome, also readable through the API under the key, is returned for logs."""
    try:
        key = check_key(idempotency_key)  # required here: the key is how the outcome is read
        done = submit_task(deps, task, idempotency_key=key)
    except BadKey as exc:
        # No key, no place to record the outcome: the message is dropped, loudly.
        log.warning("corral.schedule.submit: task dropped, %s", exc)
        return {"refused": {"error": "invalid idempotency key", "reasons": [str(exc)]}}
    except (ConfigError, Impossible) as exc:
        return {"idempotency_key": idempotency_key, "refused": refusal_of(exc)}
    return {
        "idempotency_key": idempotency_key,
        "request_id": done.request.id,
        "created": done.created,
    }


def submit(
    deps: Deps, task: Task, *, request_id: str | None = None, owner: Owner = NO_OWNER
) -> LaunchRequest:
    """Accept a launch request: route it (:func:`corral.shared.routing.route`), refuse the
    impossible, store it PENDING with its route, hand it to scheduling."""
    req = _new_request(deps, task, request_id, owner)
    if deps.store.create_request(req, event=f"accepted: {_name(task)}"):
        stored: LaunchRequest | None = req  # as written: no need to read it back
        typed_task.remember(req, task)  # checked here: the steps after this one parse nothing
    else:
        stored = deps.store.get_request(req.id)  # the id was taken: what it holds
    assert stored is not None
    _index_service(deps, task, stored)
    dispatch.admit(stored.id, settings=deps.settings, cloud=first_cloud(stored))
    return stored


def _index_service(deps: Deps, task: Task, req: LaunchRequest) -> None:
    """A service with replicas enters the serving pass's index (runtime/serving.py) before it
    is admitted: its replicas launch beside it."""
    spec = task.service_spec()
    if spec is not None and spec.replicated:
        ServiceIndex(deps.redis, prefix=deps.settings.prefix).add(req.id)


def first_cloud(req: LaunchRequest) -> str | None:
    """The cloud a request is admitted on: its first step's, for a direct request whose chain
    was planned at submit (admission there runs the first attempt in the same task); None
    (the schedule queue) for the rest."""
    if isinstance(req.route, Direct) and req.chain:
        return req.chain[0].cloud
    return None


def _name(task: Task) -> str:
    return task.name or "unnamed task"


def _new_request(
    deps: Deps, task: Task, request_id: str | None = None, owner: Owner = NO_OWNER
) -> LaunchRequest:
    """A PENDING request for ``task`` with its route; raises Impossible (nothing stored)."""
    # The pools are read only for a task that can go to one: a Redis command less per launch.
    decided, planned = route_with_plan(task, registry_view(deps, pools=reads_pools(task)))
    if isinstance(decided, Refusal):
        reasons = list(decided.reasons)
        # The planner's reasons (not a pool's): no offering on the clouds asked, or a pinned
        # cloud that cannot launch here. Either way, say which clouds were left out and why.
        planned_out = any(
            "no offering on" in r or "is not among the clouds enabled here" in r for r in reasons
        )
        left_out = clouds_left_out(deps, task) if planned_out else {}
        if left_out:  # "no offering on local" is not "no offering anywhere": say who was not asked
            reasons.append(left_out_text(left_out))
        raise Impossible(reasons)
    # A direct route carries the chain planned here: admission takes it as it is.
    chain = [ChainStep.of(c) for c in planned.candidates] if planned is not None else []
    if not owner.admin and (refused := member_fields.refusals(deps, task, decided, chain)):
        raise ConfigError([Issue(TASK_NAME, None, format_loc(p), m) for p, m in refused])
    now = deps.now()
    stored_task = task.model_dump(mode="json", exclude_none=True, by_alias=True)
    size = len(json.dumps(stored_task, separators=(",", ":")))
    if size > MAX_STORED_TASK_BYTES:
        raise ConfigError.single(
            TASK_NAME,
            f"the task is {size} bytes once read (aliases expanded); "
            f"at most {MAX_STORED_TASK_BYTES} are kept",
        )
    req = LaunchRequest(
        id=request_id or new_id("r"),
        task=stored_task,
        state=RequestState.PENDING,
        created_at=now,
        updated_at=now,
        labels=dict(task.labels),
        priority=task.priority,
        route=decided,
        chain=chain,
        next_step=-1,
        user=owner.user,
        project=owner.project,
        gpus=gpus_asked(task),
    )
    req.history.append(_first_transition(now))
    return req


def _first_transition(now: float) -> Any:
    from corral.shared.records import Transition

    return Transition(from_state=None, to_state=RequestState.PENDING, at=now, reason="submitted")


def cancel(deps: Deps, request_id: str, *, instance_id: str | None = None) -> LaunchRequest:
    """Stop a request: before it runs it is CANCELLED; a running one has its instances
    terminated (the provisioning worker marks it TERMINATED). Finished ones stay as they are."""
    req = deps.store.get_request(request_id)
    if req is None:
        raise RequestNotFound(request_id)
    if instance_id is not None:
        dispatch.terminate(
            request_id, instance_id, "terminated by the user", settings=deps.settings
        )
        return req
    now = deps.now()

    def to_cancelled(r: LaunchRequest) -> bool:
        if r.state in _CANCELLABLE:
            r.move(RequestState.CANCELLED, now, "cancelled by the user")
            return True
        return False

    updated = deps.store.update_request(request_id, to_cancelled)
    assert updated is not None
    if updated.state == RequestState.CANCELLED and req.state != RequestState.CANCELLED:
        deps.store.append_event(request_id, "state: CANCELLED (cancelled by the user)", now)
    if updated.state not in TERMINAL_REQUEST_STATES or updated.state == RequestState.CANCELLED:
        # Running: terminate its machines. Cancelled: a launch may be in flight; terminating
        # by request finds whatever it created, so nothing leaks.
        dispatch.terminate(request_id, None, "terminated by the user", settings=deps.settings)
    return updated


def public_view(
    deps: Deps, request_id: str, created: LaunchRequest | None = None
) -> dict[str, Any] | None:
    """The request as the API shows it, with its runs (one per launch that came up: the first,
    then each relaunch after a loss and each restart of a failed job) and their summed cost.
    ``created``: the request as this call just created it, shown as it was written (no read:
    it had no instances then)."""
    req = created if created is not None else deps.store.get_request(request_id)
    if req is None:
        return None
    instances = [] if created is not None else deps.store.list_instances(request_id=request_id)
    runs = runs_of(instances, deps.now())
    cost = total_cost(runs)
    return {
        **req.to_public(instances),
        "relaunches": req.recoveries,
        "restarts": req.restarts,
        "runs": [r.to_public() for r in runs],
        "cost_usd": None if cost is None else round(cost, 6),
        "ready": readiness(deps, req, instances),
    }


def readiness(deps: Deps, req: LaunchRequest, instances: Sequence[Instance]) -> bool | None:
    """Whether a service with a readiness probe (``service.readiness_probe``) answers it: its
    head node's agent probes it and says so with each heartbeat. None without a probe (or
    without ports); False until the probe passes, and while the request is not RUNNING."""
    service = req.task.get("service")
    resources = req.task.get("resources")
    probe = service.get("readiness_probe") if isinstance(service, dict) else None
    if not probe or not isinstance(resources, dict) or not resources.get("ports"):
        return None
    if req.state != RequestState.RUNNING:
        return False
    head = next(
        (i for i in instances if i.state is InstanceState.RUNNING and i.node_index == 0), None
    )
    if head is None or not head.provider_id:
        return False
    work = node_work_of(deps.provider(head.cloud))
    beat = work.report(head.provider_id) if work is not None else None
    return bool(beat and beat.get("ready") is True)


@dataclass(frozen=True)
class LogPiece:
    """New output of one instance: ``text`` is the bytes [offset, end) of its log, whole lines
    only while the instance runs (so a follower never prints half a line, or half a
    character); ``end`` is where the next read starts."""

    instance: str
    node_index: int
    offset: int
    end: int
    text: str


def read_log_pieces(
    deps: Deps,
    request_id: str,
    offsets: dict[str, int],
    *,
    instance_id: str | None = None,
    max_bytes: int = 256_000,
) -> list[LogPiece]:
    """What each of the request's instances (or one) wrote from its offset in ``offsets``
    (0 for an instance not named there): the one read a follower repeats, so each line is
    given exactly once, whatever the other instances write meanwhile."""
    pieces: list[LogPiece] = []
    for record, inst, provider, pid, assignment in _log_sources(deps, request_id, instance_id):
        offset = max(0, offsets.get(inst.id, 0))
        if assignment is not None:
            start, data = provider.read_assignment_log_since(pid, assignment, offset)
        else:
            start, data = provider.read_log_since(pid, inst.attempt_id, inst.node_index, offset)
        data = data[:max_bytes]
        if not (inst.is_terminal or record.is_terminal):
            if b"\n" in data:
                data = data[: data.rindex(b"\n") + 1]  # a running instance's last line may grow
            elif len(data) < max_bytes:
                data = b""  # half a line: it comes once it is whole
        pieces.append(
            LogPiece(
                inst.id,
                inst.node_index,
                start,
                start + len(data),
                data.decode("utf-8", errors="replace"),
            )
        )
    return pieces


def read_logs(
    deps: Deps, request_id: str, *, instance_id: str | None = None, tail_bytes: int = 256_000
) -> str:
    """The output of the request's instances, as each one's cloud keeps it (the local cloud's
    agents' log files, what cloud machines' agents shipped to the node book)."""
    parts: list[str] = []
    for _, inst, provider, pid, assignment in _log_sources(deps, request_id, instance_id):
        if assignment is not None:
            data = provider.read_assignment_log(pid, assignment, tail_bytes)
        else:
            data = provider.read_log(pid, inst.attempt_id, inst.node_index, tail_bytes)
        if data:
            text = data.decode("utf-8", errors="replace")
            parts.append(f"==> {inst.id} ({inst.provider_id}) <==\n{text}")
    return "\n".join(parts)


def _log_sources(
    deps: Deps, request_id: str, instance_id: str | None
) -> Iterator[tuple[LaunchRequest, Instance, Provider, str, str | None]]:
    """The request's instances (or one) whose output their cloud can read, each with the
    request, its cloud's provider, its provider id and, for a pool assignment, the
    assignment's id: it is read from its own stream, never the machine's log, which holds
    what other projects' assignments ran there before (issue #47 item 1)."""
    record = deps.store.get_request(request_id)
    if record is None:
        raise RequestNotFound(request_id)
    pooled = not isinstance(record.route, Direct)  # its instances are assignments
    for inst in deps.store.list_instances(request_id=request_id):
        pid, assignment = inst.provider_id, inst.attempt_id if pooled else None
        if (instance_id and inst.id != instance_id) or not pid or (pooled and not assignment):
            continue
        try:
            provider = deps.provider(inst.cloud)
        except ProviderUnavailable:
            continue
        yield record, inst, provider, pid, assignment
