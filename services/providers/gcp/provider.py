"""The Google Cloud provider: Compute Engine instances through google-cloud-compute (REST).

Idempotency: every node of an attempt has a name derived from the attempt id and node index,
carries the labels ``corral-request``, ``corral-attempt`` and ``corral-node``, and is inserted
with a ``requestId`` derived the same way (the API answers a repeated requestId with the first
operation and creates nothing). A redelivered attempt lists the zone by its attempt label and
inserts only the nodes it does not find.

Operations are awaited with ``ZoneOperationsClient.wait``, not ``ExtendedOperation.result``:
the latter polls through a client of its own that ignores a custom ``api_endpoint``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import google.auth
from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions

from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    CatalogOfferings,
    Features,
    LaunchSpec,
    ProviderInstance,
)
from corral.services.providers.gcp.errors import from_exception, from_operation, translated
from corral.services.providers.gcp.instance_body import (
    DEFAULT_GPU_IMAGE,
    DEFAULT_IMAGE,
    check_spec,
    has_labels,
    insert_request_id,
    instance_body,
    instance_name,
    label_filter,
    nodes_of,
)
from corral.services.providers.nodes import NodeAgents, NodeBookLogs
from corral.services.state.nodes import NodeBook
from corral.shared.errors import (
    AuthError,
    InvalidRequestError,
    LaunchTimeoutError,
    ProviderError,
    Scope,
)
from corral.shared.ports import port_text
from corral.shared.retry import with_retries

if TYPE_CHECKING:
    from google.cloud import compute_v1
else:  # the SDK loads when first used (see compute_sdk)
    from corral.services.providers.gcp import compute_sdk as compute_v1

log = logging.getLogger("corral.providers.gcp")

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]

# GCE instance status -> Corral's provider state.
STATES: dict[str, str] = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "REPAIRING": "pending",  # GCE is moving it off failed hardware; it comes back RUNNING
    "RUNNING": "running",
    "STOPPING": "terminating",
    "SUSPENDING": "terminating",
    "DEPROVISIONING": "terminating",
    "SUSPENDED": "terminated",
    "TERMINATED": "terminated",  # stopped: a preempted spot VM, or one that shut itself down
}
# Insert/delete outcomes that mean "already as wanted" for Corral's own deterministic names.
ALREADY_EXISTS = frozenset({"alreadyExists", "RESOURCE_ALREADY_EXISTS"})
ALREADY_GONE = frozenset({"notFound", "RESOURCE_NOT_FOUND"})


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class _Api:
    instances: compute_v1.InstancesClient
    operations: compute_v1.ZoneOperationsClient
    project: str
    firewalls: compute_v1.FirewallsClient


class GcpProvider(CatalogOfferings, NodeBookLogs):
    """Google Compute Engine. Thread-safe; clients are built on first use."""

    name = "gcp"
    poll_interval_s: float  # list calls count against the project's API quota (see __init__)

    def __init__(
        self,
        project: str | None = None,
        *,
        api_endpoint: str | None = None,
        credentials: Any = None,
        image: str = DEFAULT_IMAGE,
        gpu_image: str = DEFAULT_GPU_IMAGE,
        operation_timeout_s: float = 300.0,
        call_timeout_s: float = 60.0,
        read_retry_s: float = 10.0,
        teardown_tries: int = 3,
        teardown_backoff_s: float = 1.0,
        credentials_recheck_s: float = 300.0,
        nodes: NodeAgents | None = None,
        log_book: NodeBook | None = None,
        poll_interval_s: float = 2.0,
    ) -> None:
        """``nodes``: boot the node agent on every machine (None: a blind startup-script).
        ``poll_interval_s``: the shortest time between two looks at the machines
        (the registry passes the settings' ``timers.cloud_poll_interval_s``; 2 s as shipped)."""
        self.poll_interval_s = poll_interval_s
        self.project = project
        self._use_agents(nodes, log_book)
        # instances.stop / instances.start (the boot disk is kept); agents register via the API.
        self.features = Features(stop=True, agents_through_api=nodes is not None)
        self.api_endpoint = api_endpoint
        self.image = image
        self.gpu_image = gpu_image
        self.operation_timeout_s = operation_timeout_s
        self.call_timeout_s = call_timeout_s
        self.teardown_tries = teardown_tries
        self.teardown_backoff_s = teardown_backoff_s
        self.credentials_recheck_s = credentials_recheck_s
        self._credentials = credentials
        self.given_credentials = credentials is not None  # (an emulator's anonymous ones)
        self._lock = threading.Lock()
        self._api_cache: _Api | None = None
        self._auth_failure: tuple[float, AuthError] | None = None
        # Reads (get, list) retry a busy API briefly; inserts and deletes are never retried
        # blindly (an insert is retried only by a new attempt, with its own requestId).
        self._read_retry = api_retry.Retry(
            predicate=api_retry.if_exception_type(
                api_exceptions.ServiceUnavailable,
                api_exceptions.TooManyRequests,
                api_exceptions.InternalServerError,
            ),
            initial=0.2,
            maximum=2.0,
            multiplier=2.0,
            timeout=read_retry_s,
        )

    # --- credentials -----------------------------------------------------------------------

    def has_credentials(self) -> bool:
        """Whether credentials and a project were found (the SDK's usual chain)."""
        try:
            self._api()
        except AuthError:
            return False
        return True

    def _api(self) -> _Api:
        """The clients, built once. A failed lookup is remembered for a while, so a process
        without credentials does not probe the metadata server on every call."""
        with self._lock:
            if self._api_cache is not None:
                return self._api_cache
            if self._auth_failure and time.monotonic() < self._auth_failure[0]:
                raise self._auth_failure[1]
            try:
                self._api_cache = self._build_api()
            except AuthError as exc:
                log.info("no usable Google Cloud credentials: %s", exc.message)
                self._auth_failure = (time.monotonic() + self.credentials_recheck_s, exc)
                raise
            return self._api_cache

    def _build_api(self) -> _Api:
        credentials, project = self._credentials, self.project
        if credentials is None:
            try:
                credentials, found_project = google.auth.default(scopes=SCOPES)
            except auth_exceptions.DefaultCredentialsError as exc:
                raise AuthError(
                    f"no Google Cloud credentials found: {exc}", code="DefaultCredentialsError"
                ) from None
            project = project or found_project
        if not project:
            raise AuthError(
                "no Google Cloud project: configure one, or use credentials that name one",
                code="NoProject",
            )
        options = ClientOptions(api_endpoint=self.api_endpoint) if self.api_endpoint else None
        kwargs: dict[str, Any] = {
            "credentials": credentials,
            "transport": "rest",
            "client_options": options,
        }
        return _Api(
            compute_v1.InstancesClient(**kwargs),
            compute_v1.ZoneOperationsClient(**kwargs),
            project,
            compute_v1.FirewallsClient(**kwargs),
        )

    # --- launch ----------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]:
        """Create ``spec.count`` instances in the zone, all or none; idempotent by attempt."""
        check_spec(spec)
        nodes = nodes_of(spec)
        names = [instance_name(spec.attempt_id, node) for node in nodes]
        bodies = [
            instance_body(
                spec,
                node,
                name,
                self.gpu_image if spec.accelerators else self.image,
                self._boot(spec, node),
            )
            for node, name in zip(nodes, names, strict=True)
        ]
        if spec.ports:
            tag = self._open_ports(spec.ports, bodies[0])
            for body in bodies:
                body.tags.items = [*body.tags.items, tag]
        found = {i.name for i in self._list_zone(spec.zone, {TAG_ATTEMPT: spec.attempt_id})}
        todo = [(n, b, nd) for n, b, nd in zip(names, bodies, nodes, strict=True) if n not in found]
        if todo:
            log.info("inserting %d instance(s) in %s for %s", len(todo), spec.zone, spec.attempt_id)
            try:
                self._insert_all(spec, todo)
            except ProviderError as exc:
                self._roll_back(spec.zone, names, exc)
                raise
        got = [self._get(spec.zone, name) for name in names]
        if any(inst is None for inst in got):
            vanished = ProviderError(
                f"an instance of {spec.attempt_id} vanished right after it was created",
                code="InstanceVanished",
            )
            self._roll_back(spec.zone, names, vanished)
            raise vanished
        return self._seen([self._to_instance(inst) for inst in got if inst is not None])

    def _boot(self, spec: LaunchSpec, node: str) -> str | None:
        """The node agent's startup-script for this node, when agents are configured."""
        return None if self.nodes is None else self.nodes.boot_script(spec, int(node))

    def _insert_all(
        self, spec: LaunchSpec, todo: list[tuple[str, compute_v1.Instance, str]]
    ) -> None:
        """Send every insert, then await every operation; raise the first failure."""
        api = self._api()
        deadline = time.monotonic() + self.operation_timeout_s
        ops: list[compute_v1.Operation] = []
        failure: ProviderError | None = None
        for _name, body, node in todo:
            request = compute_v1.InsertInstanceRequest(
                project=api.project,
                zone=spec.zone,
                instance_resource=body,
                request_id=insert_request_id(spec.attempt_id, node),
            )
            try:
                with translated():
                    try:
                        ops.append(
                            api.instances.insert_unary(request=request, timeout=self.call_timeout_s)
                        )
                    except api_exceptions.Conflict:
                        continue  # the name is taken: a concurrent delivery of this attempt
            except ProviderError as exc:
                failure = exc
                break
        for op in ops:
            error = self._wait(spec.zone, op, deadline)
            if error is not None and error.code not in ALREADY_EXISTS:
                failure = failure or error
        if failure is not None:
            raise failure

    def _roll_back(self, zone: str, names: list[str], cause: ProviderError) -> None:
        """A failed attempt keeps nothing. If deleting fails too, say so loudly: the error
        names what is left and fails the request rather than launching more elsewhere."""
        try:
            self._delete_all([(zone, name) for name in names])
        except ProviderError as teardown:
            raise ProviderError(
                f"{cause}; and the rollback failed: {teardown}",
                code="TeardownFailed",
                scope=Scope.REQUEST,
            ) from cause

    def _wait(self, zone: str, op: compute_v1.Operation, deadline: float) -> ProviderError | None:
        """Await a zone operation; its error as a typed error, or None once it succeeded.
        ``wait`` holds the call until the operation is done (up to about two minutes on the
        API's side); a call that runs out of time first is simply made again."""
        api = self._api()
        done = compute_v1.Operation.Status.DONE
        while op.status != done:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return LaunchTimeoutError(
                    f"operation {op.name} in {zone} not done after {self.operation_timeout_s}s",
                    code="OperationTimeout",
                )
            try:
                with translated():
                    op = api.operations.wait(
                        project=api.project,
                        zone=zone,
                        operation=op.name,
                        timeout=max(1.0, min(left_s, self.call_timeout_s)),
                    )
            except LaunchTimeoutError:
                continue
        return from_operation(op)

    # --- describe --------------------------------------------------------------------------
    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]:
        """Corral's instances in every zone of the project, filtered by labels."""
        wanted = {TAG_MANAGED: "true", **(tags or {})}
        api = self._api()
        request = compute_v1.AggregatedListInstancesRequest(
            project=api.project, filter=label_filter(wanted)
        )
        with translated():
            pages = api.instances.aggregated_list(
                request=request, retry=self._read_retry, timeout=self.call_timeout_s
            )
            found = [inst for _scope, scoped in pages for inst in scoped.instances]
        return self._seen([self._to_instance(i) for i in found if has_labels(i, wanted)])

    def _list_zone(self, zone: str, tags: dict[str, str]) -> list[compute_v1.Instance]:
        api = self._api()
        wanted = {TAG_MANAGED: "true", **tags}
        request = compute_v1.ListInstancesRequest(
            project=api.project, zone=zone, filter=label_filter(wanted)
        )
        with translated():
            pages = api.instances.list(
                request=request, retry=self._read_retry, timeout=self.call_timeout_s
            )
            return [inst for inst in pages if has_labels(inst, wanted)]

    def _get(self, zone: str, name: str) -> compute_v1.Instance | None:
        api = self._api()
        with translated():
            try:
                return api.instances.get(
                    project=api.project,
                    zone=zone,
                    instance=name,
                    retry=self._read_retry,
                    timeout=self.call_timeout_s,
                )
            except api_exceptions.NotFound:
                return None

    def _to_instance(self, inst: compute_v1.Instance) -> ProviderInstance:
        zone = _last(inst.zone)
        sched = inst.scheduling
        if sched.provisioning_model == "SPOT" or sched.preemptible:
            market = "spot"
        elif inst.reservation_affinity.consume_reservation_type == "SPECIFIC_RESERVATION":
            market = "reserved"
        else:
            market = "on_demand"
        return ProviderInstance(
            provider_id=f"{zone}/{inst.name}",
            cloud=self.name,
            region=zone.rsplit("-", 1)[0],
            zone=zone,
            instance_type=_last(inst.machine_type),
            market=market,
            state=STATES.get(inst.status, "pending"),
            address=_address(inst),
            tags=dict(inst.labels),
        )

    def _open_ports(self, ports: list[tuple[int, int]], body: compute_v1.Instance) -> str:
        """Open the task's ports (resources.ports) to the world: one firewall rule of Corral's
        per set of ports and network, naming a network tag; returns the tag the machines
        carry. The rule is found again by name, so launches of those ports share it."""
        text = [port_text(r) for r in ports]
        network = body.network_interfaces[0].network if body.network_interfaces else ""
        network = network or "global/networks/default"
        digest = hashlib.sha256(f"{network} {','.join(text)}".encode()).hexdigest()[:12]
        name = f"corral-ports-{digest}"
        api = self._api()
        try:
            api.firewalls.get(project=api.project, firewall=name, timeout=self.call_timeout_s)
            return name
        except api_exceptions.NotFound:
            pass
        except Exception as exc:
            raise from_exception(exc) from exc
        rule = compute_v1.Firewall(
            name=name,
            network=network,
            direction="INGRESS",
            description=f"Corral: TCP {','.join(text)} open (resources.ports)",
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=text)],
            source_ranges=["0.0.0.0/0"],
            target_tags=[name],
        )
        try:
            op = api.firewalls.insert(
                project=api.project, firewall_resource=rule, timeout=self.call_timeout_s
            )
            op.result(timeout=self.operation_timeout_s)  # type: ignore[no-untyped-call]
        except api_exceptions.Conflict:
            pass  # another launch made it meanwhile
        except Exception as exc:
            raise from_exception(exc) from exc
        return name

    def _still_there(self, target: tuple[str, str]) -> bool:
        try:
            return self._get(*target) is not None
        except ProviderError:
            return True  # cannot tell: count it as left

    # --- stop and start ----------------------------------------------------------------------
    def stop(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Stop instances (``instances.stop``); their agents keep their node tokens, and the
        startup script (run on every boot) resumes them after :meth:`start`."""
        if self.nodes is not None:
            self.nodes.pause(provider_ids)
        self._each(provider_ids, zone, "stop_unary")

    def start(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Start stopped instances (``instances.start``)."""
        self._each(provider_ids, zone, "start_unary")

    def _each(self, provider_ids: list[str], zone: str | None, call: str) -> None:
        api = self._api()
        deadline = time.monotonic() + self.operation_timeout_s
        for where, name in _targets(provider_ids, zone):
            with translated():
                op = getattr(api.instances, call)(
                    project=api.project, zone=where, instance=name, timeout=self.call_timeout_s
                )
            failed = self._wait(where, op, deadline)
            if failed is not None:
                raise failed

    # --- terminate -------------------------------------------------------------------------
    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Delete instances (ids are ``zone/name``; a bare name needs ``zone``) and wait until
        they are gone. Idempotent: a missing instance is fine. Failures are retried, then
        raised naming what is left."""
        targets = _targets(provider_ids, zone)
        if self.nodes is not None:
            self.nodes.end(provider_ids)
        self._delete_all(targets)

    def _delete_all(self, targets: list[tuple[str, str]]) -> None:
        """Delete ``targets``, each try deleting what the one before left (shared/retry.py)."""
        left = list(targets)

        def once() -> None:
            nonlocal left
            left, error = self._delete_once(left)
            if error is not None:
                raise _Left(error)

        try:
            with_retries(
                once,
                tries=self.teardown_tries,
                base_s=self.teardown_backoff_s,
                sleep=time.sleep,
                retryable=lambda exc: isinstance(exc, _Left),
            )
            return
        except _Left as failed:
            error = failed.error
        what = ", ".join(f"{z}/{n}" for z, n in left)
        raise type(error)(
            f"could not delete {what} after {self.teardown_tries} tries: {error.message}",
            code=error.code,
            scope=error.scope,
        ) from error

    def _delete_once(
        self, targets: list[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], ProviderError | None]:
        """One delete of each target: (those still there, the last error)."""
        api = self._api()
        deadline = time.monotonic() + self.operation_timeout_s
        left: list[tuple[str, str]] = []
        pending: list[tuple[tuple[str, str], compute_v1.Operation]] = []
        error: ProviderError | None = None
        for zone, name in targets:
            try:
                with translated():
                    try:
                        op = api.instances.delete_unary(
                            project=api.project,
                            zone=zone,
                            instance=name,
                            timeout=self.call_timeout_s,
                        )
                    except api_exceptions.NotFound:
                        continue  # already gone
                pending.append(((zone, name), op))
            except ProviderError as exc:
                left.append((zone, name))
                error = exc
        for target, op in pending:
            try:
                failed = self._wait(target[0], op, deadline)
            except ProviderError as exc:
                failed = exc
            # A delete may outlast our wait (they take a minute): what is gone is gone.
            if failed is not None and failed.code not in ALREADY_GONE and self._still_there(target):
                left.append(target)
                error = failed
        return left, error


def _targets(provider_ids: list[str], zone: str | None) -> list[tuple[str, str]]:
    """(zone, name) of each id (``zone/name``; a bare name is in ``zone``)."""
    targets = []
    for pid in provider_ids:
        where, _, name = pid.rpartition("/")
        if not (where or zone):
            raise InvalidRequestError(f"no zone for instance {pid!r}")
        targets.append((where or str(zone), name))
    return targets


def _address(inst: compute_v1.Instance) -> str | None:
    """The first interface's external (NAT) address, else its internal one."""
    for nic in inst.network_interfaces:
        for access in nic.access_configs:
            if access.nat_i_p:
                return str(access.nat_i_p)
        if nic.network_i_p:
            return str(nic.network_i_p)
    return None


class _Left(Exception):
    """A try of a teardown left instances behind: ``error``, the last reason."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(error.message)
        self.error = error
