"""Kubernetes: a machine is a pod, through the official Python client.

A launch creates one pod per node (``restartPolicy: Never``; names from the attempt id, so a
second delivery finds the first's pods), then watches the scheduler for a few seconds: pods
bound to nodes are the launch's machines; a pod the scheduler calls Unschedulable
(``FailedScheduling: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu``) fails the launch
as a capacity error for that shape in the namespace, its pods deleted, so the chain moves on.
A ResourceQuota's ``exceeded quota`` is a quota error for the resource it names in the
namespace (``<namespace>:requests.nvidia.com/gpu``); 429 is retried in place, then
throttling. Terminate deletes the pods.

With node agents (``CORRAL_NODE_API_URL``), the pod's container runs the agent's boot script
(the image needs Python 3.8+; the defaults have it); without, it runs setup then run and the
pod's exit code is the job's.

Regions are kubeconfig contexts (``in-cluster``: the cluster Corral runs in), zones their
namespaces; see ``pods.py``. Offerings are listed live from the nodes (:meth:`offerings`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import urllib3

from corral.services.providers.base import (
    TAG_MANAGED,
    TAG_NODE,
    Features,
    LaunchSpec,
    ProviderInstance,
    blind_boot_lines,
    check_env_names,
    zones_from,
)
from corral.services.providers.kubernetes.pods import (
    ACCELERATOR_LABELS,
    DEFAULT_GPU_IMAGE,
    DEFAULT_IMAGE,
    GPU,
    TAGS_ANNOTATION,
    TYPE_ANNOTATION,
    accelerator_name,
    label_selector,
    pod_manifest,
    pod_name,
    pod_state,
)
from corral.services.providers.nodes import NodeAgents, NodeBookLogs
from corral.shared.autoscaler.kube_pods import quantity
from corral.shared.catalog.offering import Offering as CatalogOffering
from corral.shared.errors import (
    AuthError,
    CapacityError,
    InvalidRequestError,
    ProviderError,
    QuotaError,
    Scope,
    ThrottledError,
)
from corral.shared.pod_shapes import shape_name, shape_offerings
from corral.shared.quota_families import k8s_family
from corral.shared.retry import with_retries

log = logging.getLogger("corral.providers.kubernetes")

IN_CLUSTER = "in-cluster"
_GIB = 2**30


@dataclass(frozen=True)
class Offering:
    """One node shape of a context, as the nodes report it (no price: the cluster is yours)."""

    region: str  # the context
    instance_type: str  # 8CPU--32GB--T4:1
    cpus: float
    memory_gib: float
    accelerator: str | None
    accelerator_count: int
    nodes: int  # how many nodes have this shape
    selector: dict[str, str] | None  # the node label that names its GPU kind


class KubernetesProvider(NodeBookLogs):
    """Pods on one or more kubeconfig contexts. Thread-safe; clients built on first use."""

    name = "kubernetes"
    poll_interval_s: float  # every look lists pods on the API server (see __init__)

    def __init__(
        self,
        *,
        contexts: Sequence[str] | None = None,
        namespaces: Sequence[str] = ("default",),
        kubeconfig: str | None = None,
        image: str = DEFAULT_IMAGE,
        gpu_image: str = DEFAULT_GPU_IMAGE,
        schedule_wait_s: float = 10.0,
        throttle_retries: int = 3,
        nodes: NodeAgents | None = None,
        log_book: Any = None,
        poll_interval_s: float = 2.0,
    ) -> None:
        """``contexts``: the kubeconfig contexts Corral launches in (None: the current one, or
        ``in-cluster`` inside a pod). ``schedule_wait_s``: how long a launch waits for the
        scheduler before an Unschedulable pod counts as no capacity. ``poll_interval_s``: the
        shortest time between two looks at the pods (the registry passes the settings'
        ``timers.cloud_poll_interval_s``; 2 s as shipped)."""
        self.poll_interval_s = poll_interval_s
        self.kubeconfig = kubeconfig
        self._contexts = tuple(contexts) if contexts else None
        self.namespaces = tuple(namespaces)
        self.image, self.gpu_image = image, gpu_image
        self.schedule_wait_s = schedule_wait_s
        self.throttle_retries = throttle_retries
        self.nodes = nodes
        self.node_work = nodes
        # A pod cannot be stopped and started again (it is deleted); agents register via the API.
        self.features = Features(agents_through_api=nodes is not None)
        self.log_book = log_book  # what the pods' agents shipped of their output
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}

    # --- where --------------------------------------------------------------------------------
    def contexts(self) -> tuple[str, ...]:
        if self._contexts is not None:
            return self._contexts
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return (IN_CLUSTER,)
        from kubernetes import config

        try:
            _all, current = config.list_kube_config_contexts(config_file=self.kubeconfig)
        except Exception:
            return ()
        return (str(current["name"]),) if current else ()

    def regions(self) -> tuple[str, ...]:
        return self.contexts()

    def zones(self, region: str) -> tuple[str, ...]:
        """A context's zones: the namespaces Corral may use there."""
        return self.namespaces

    def has_credentials(self) -> bool:
        """Whether a context is configured (a kubeconfig, or a service account in a pod)."""
        return bool(self.contexts())

    def _core(self, context: str) -> Any:
        from kubernetes import client, config

        with self._lock:
            if context not in self._clients:
                if context == IN_CLUSTER:
                    cfg = client.Configuration()
                    config.load_incluster_config(client_configuration=cfg)
                    api = client.ApiClient(cfg)
                else:
                    try:
                        api = config.new_client_from_config(
                            config_file=self.kubeconfig, context=context
                        )
                    except Exception as exc:
                        raise AuthError(
                            f"kubeconfig context {context!r}: {exc}", code="KubeConfig"
                        ) from None
                self._clients[context] = client.CoreV1Api(api)
            return self._clients[context]

    def _call(self, context: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """One API call, its JSON answer as a dict; 429 retried in place with backoff."""
        from kubernetes.client.exceptions import ApiException

        core = self._core(context)

        def once() -> Any:
            answer = getattr(core, method)(*args, _preload_content=False, **kwargs)
            return json.loads(answer.data or b"{}")

        try:
            return with_retries(
                once,
                tries=self.throttle_retries + 1,
                base_s=0.2,
                cap_s=2.0,
                sleep=time.sleep,
                retryable=lambda exc: isinstance(exc, ApiException) and exc.status == 429,
            )
        except ApiException as exc:
            raise _typed(exc) from exc
        except (OSError, ValueError, urllib3.exceptions.HTTPError) as exc:
            raise ProviderError(
                f"{context}: {exc}", code="Unreachable", scope=Scope.REGION
            ) from None

    # --- what it has --------------------------------------------------------------------------
    def offerings_of(self, context: str) -> list[Offering]:
        """The node shapes of a context, read from its nodes' allocatable resources and labels."""
        nodes = self._call(context, "list_node").get("items", [])
        shapes: dict[str, Offering] = {}
        for node in nodes:
            alloc = (node.get("status") or {}).get("allocatable") or {}
            labels = (node.get("metadata") or {}).get("labels") or {}
            cpus = float(int(quantity(alloc.get("cpu", 0))))
            memory = float(int(quantity(alloc.get("memory", 0)) / _GIB))
            count = int(quantity(alloc.get(GPU, 0)))
            accelerator, selector = None, None
            for key in ACCELERATOR_LABELS:
                if key in labels and (name := accelerator_name(key, labels[key])):
                    accelerator, selector = name, {key: labels[key]}
                    break
            if count and accelerator is None:
                accelerator = "GPU"  # GPUs of a kind no label names
            itype = shape_name(cpus, memory, accelerator, count)
            seen = shapes.get(itype)
            n = seen.nodes + 1 if seen else 1
            shapes[itype] = Offering(
                context, itype, cpus, memory, accelerator if count else None, count, n, selector
            )
        return sorted(shapes.values(), key=lambda o: (o.accelerator_count, o.cpus, o.memory_gib))

    # --- the port: what the planner and the logs read ---------------------------------------
    def offerings(self) -> Sequence[CatalogOffering]:
        """Every node shape of every context, once per namespace (Corral's zones), priced 0
        (``shape_offerings``, the simulator's too)."""
        out: list[CatalogOffering] = []
        for context in self.contexts():
            try:
                shapes = self.offerings_of(context)
            except ProviderError as exc:
                log.warning("kubernetes context %s: nodes not listed: %s", context, exc)
                continue
            for shape in shapes:
                out += shape_offerings(
                    self.name,
                    context,
                    self.namespaces,
                    shape.instance_type,
                    cpus=shape.cpus,
                    memory_gib=shape.memory_gib,
                    accelerator=shape.accelerator,
                    accelerator_count=shape.accelerator_count,
                )
        return out

    def zones_of(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        return zones_from(self.offerings(), instance_type)

    # --- launch -------------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]:
        """``spec.count`` pods in the namespace ``spec.zone`` of the context ``spec.region``,
        all scheduled or none; idempotent by attempt id."""
        if spec.cloud != self.name:
            raise InvalidRequestError(f"cloud {spec.cloud!r} sent to the Kubernetes provider")
        check_env_names(spec.envs)
        context, namespace = spec.region, spec.zone
        ranks = self._ranks(spec)
        selector = self._selector(context, spec) if spec.accelerators else None
        image = spec.image_id or (self.gpu_image if spec.accelerators else self.image)
        created: list[str] = []
        for rank in ranks:
            pod = pod_manifest(
                spec,
                rank,
                namespace=namespace,
                script=self._script(spec, rank),
                image=image,
                accelerator_selector=selector,
            )
            try:
                self._call(context, "create_namespaced_pod", namespace, pod)
            except _AlreadyExists:
                pass  # this attempt's pod, from an earlier delivery
            except ProviderError as exc:
                self._delete(context, namespace, created)
                if isinstance(exc, QuotaError) and exc.family and ":" not in exc.family:
                    exc.family = k8s_family(namespace, exc.family)  # the namespace's quota
                raise
            created.append(pod["metadata"]["name"])
        pods = self._await_scheduling(context, namespace, created, spec)
        return self._seen([self._to_instance(context, p) for p in pods])

    def _ranks(self, spec: LaunchSpec) -> list[int]:
        if spec.count == 1:  # one node, maybe one replacing a given node of its request
            return [int(spec.tags.get(TAG_NODE, "0"))]
        return list(range(spec.count))

    def _script(self, spec: LaunchSpec, rank: int) -> str:
        if self.nodes is not None:
            return self.nodes.boot_script(spec, rank)
        envs = {**dict(sorted(spec.envs.items())), "CORRAL_NODE_RANK": str(rank)}
        lines = ["set -e", *blind_boot_lines(spec, envs, str(rank))]
        if not spec.run:
            lines.append("exec sleep infinity")  # a service: up until terminated
        return "\n".join(lines)

    def _selector(self, context: str, spec: LaunchSpec) -> dict[str, str] | None:
        """The node label of the accelerator the launch asks for, as the nodes spell it."""
        wanted = next(iter(spec.accelerators))
        for offer in self.offerings_of(context):
            if offer.accelerator == wanted and offer.selector:
                return offer.selector
        return None

    def _await_scheduling(
        self, context: str, namespace: str, names: list[str], spec: LaunchSpec
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self.schedule_wait_s
        while True:
            pods = [self._read(context, namespace, n) for n in names]
            found = [p for p in pods if p is not None]
            stuck = [why for p in found if (why := pod_state(p)[2])]
            if stuck or (len(found) == len(names) and all(_bound(p) for p in found)):
                break
            if time.monotonic() >= deadline:
                stuck = [f"not scheduled within {self.schedule_wait_s:g} s"]
                break
            time.sleep(min(0.5, self.schedule_wait_s / 10))
        if not stuck:
            return found
        detail = self._scheduling_events(context, namespace, names) or stuck[0]
        self._delete(context, namespace, names)
        # This shape (and market) in this namespace of the context: the cluster's other shapes
        # (its CPU nodes, when no GPU node can hold the pod) are still worth a try.
        raise CapacityError(
            f"{context}/{namespace}: {spec.instance_type} cannot be scheduled: {detail}",
            code="FailedScheduling",
        )

    def _scheduling_events(self, context: str, namespace: str, names: list[str]) -> str | None:
        for name in names:
            events = self._call(
                context,
                "list_namespaced_event",
                namespace,
                field_selector=f"involvedObject.name={name}",
            ).get("items", [])
            for event in reversed(events):
                if event.get("reason") == "FailedScheduling":
                    return f"FailedScheduling: {event.get('message')}"
        return None

    def _read(self, context: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            pod: dict[str, Any] = self._call(context, "read_namespaced_pod", name, namespace)
            return pod
        except _NotFound:
            return None

    # --- describe -----------------------------------------------------------------------------
    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]:
        """Corral's pods (labelled ``corral-managed``) carrying every tag given, in every
        context and namespace Corral uses."""
        wanted = {**(tags or {}), TAG_MANAGED: "true"}
        found: list[ProviderInstance] = []
        for context in self.contexts():
            for namespace in self.namespaces:
                pods = self._call(
                    context,
                    "list_namespaced_pod",
                    namespace,
                    label_selector=label_selector(wanted),
                ).get("items", [])
                found += [self._to_instance(context, p) for p in pods]
        return self._seen(found)

    def _to_instance(self, context: str, pod: dict[str, Any]) -> ProviderInstance:
        meta = pod.get("metadata") or {}
        notes = meta.get("annotations") or {}
        tags = json.loads(notes.get(TAGS_ANNOTATION) or "{}")
        state, exit_code, _why = pod_state(pod)
        status = pod.get("status") or {}
        return ProviderInstance(
            provider_id=f"{context}/{meta.get('namespace')}/{meta.get('name')}",
            cloud=self.name,
            region=context,
            zone=str(meta.get("namespace")),
            instance_type=str(notes.get(TYPE_ANNOTATION, "")),
            market="on_demand",
            state=state,
            address=status.get("podIP") or None,
            tags={str(k): str(v) for k, v in tags.items()},
            exit_code=exit_code,
        )

    # --- terminate ----------------------------------------------------------------------------
    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Delete the pods (gone already is fine)."""
        for pid in provider_ids:
            context, namespace, name = _split(pid)
            self._delete(context, namespace, [name])
        if self.nodes is not None:
            self.nodes.end(provider_ids)

    def _delete(self, context: str, namespace: str, names: list[str]) -> None:
        for name in names:
            try:
                self._call(
                    context, "delete_namespaced_pod", name, namespace, grace_period_seconds=10
                )
            except _NotFound:
                continue

    def pod_of(self, attempt_id: str, rank: int) -> str:
        """The name of node ``rank``'s pod of an attempt."""
        return pod_name(attempt_id, rank)


class _NotFound(ProviderError):
    pass


class _AlreadyExists(ProviderError):
    pass


# "exceeded quota: q, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4,
# limited: requests.nvidia.com/gpu=4" (the quota admission's words): the resource it limits.
_QUOTA_LIMITED_RE = re.compile(r"limited: ([A-Za-z0-9./_-]+)=")


def _typed(exc: Any) -> ProviderError:
    """An ApiException as Corral's error, decided by status and the Status body's reason."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    message = str(body.get("message") or exc.reason or exc)
    reason = str(body.get("reason") or "")
    if exc.status == 404:
        return _NotFound(message, code="NotFound")
    if exc.status == 409 and reason == "AlreadyExists":
        return _AlreadyExists(message, code="AlreadyExists")
    if exc.status == 403 and "exceeded quota" in message:
        # A ResourceQuota limits each resource of the namespace apart: the one the refusal
        # names is the family it blocks (qualified by the namespace at the launch); one it
        # does not name blocks this shape in the namespace, as before.
        found = _QUOTA_LIMITED_RE.search(message)
        if found is None:
            return QuotaError(message, code="ExceededQuota", scope=Scope.ZONE)
        return QuotaError(message, code="ExceededQuota", scope=Scope.FAMILY, family=found[1])
    if exc.status == 429:
        return ThrottledError(message, code="TooManyRequests")
    if exc.status in (401, 403):
        return AuthError(message, code=reason or "Forbidden")
    if exc.status in (400, 422):
        return InvalidRequestError(message, code=reason or "Invalid")
    return ProviderError(message, code=reason or str(exc.status), scope=Scope.REGION)


def _bound(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _split(provider_id: str) -> tuple[str, str, str]:
    context, namespace, name = provider_id.rsplit("/", 2)
    return context, namespace, name
