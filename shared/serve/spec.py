"""A SkyPilot task's ``service:`` section, read as SkyServe reads it.

SkyServe's service YAML (``docs/source/serving/service-yaml-spec.rst``, ``sky/utils/schemas.py``
``get_service_schema``)::

    service:
      readiness_probe: /health            # or {path, post_data, initial_delay_seconds,
                                          #     timeout_seconds, headers}
      replicas: 2                         # a fixed count; or:
      replica_policy:
        min_replicas: 1
        max_replicas: 3
        target_qps_per_replica: 5         # QPS autoscaling between min and max
        upscale_delay_seconds: 300
        downscale_delay_seconds: 1200
      load_balancing_policy: least_load   # round_robin | least_load | instance_aware_least_load
      ports: 8080                         # the replicas' port (over resources.ports)

Each field is **honoured** (``target_qps_per_replica`` and the delays by
:mod:`.autoscale`), **noticed** (accepted, with a notice saying what Corral does instead:
:func:`service_notices`) or **refused** (``ValueError`` naming the field and what
was expected). ``replicas`` and ``replica_policy`` together are refused, as SkyServe refuses
them. Pure: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ports import parse_ports
from ..readiness import ReadinessProbe, parse_probe

# SkyPilot's names (sky/serve/load_balancing_policies.py); least_load is its default since its
# PR #4439 (round_robin before).
LB_POLICIES = ("round_robin", "least_load", "instance_aware_least_load")
DEFAULT_LB_POLICY = "least_load"
# SkyServe's defaults (sky/serve/constants.py): how long a QPS change must hold before scaling.
DEFAULT_UPSCALE_DELAY_S = 300.0
DEFAULT_DOWNSCALE_DELAY_S = 1200.0
# In each replica's setup and run: SkyServe's replica id (1, 2, ...; a replacement gets the next
# one) and the port this replica serves on (the service's, but on a cloud whose machines share
# one host's network, the local cloud, replica N's is the service's port + N - 1).
REPLICA_ID_ENV = "SKYPILOT_SERVE_REPLICA_ID"
SERVICE_PORT_ENV = "CORRAL_SERVICE_PORT"
MAX_REPLICAS = 64  # a bound on one service's launches (input limits)

_SERVICE_FIELDS = (
    "readiness_probe",
    "replicas",
    "replica_policy",
    "load_balancing_policy",
    "ports",
    "tls",
    "pool",
    "workers",
)
_POLICY_FIELDS = (
    "min_replicas",
    "max_replicas",
    "target_qps_per_replica",
    "upscale_delay_seconds",
    "downscale_delay_seconds",
    "num_overprovision",
    "base_ondemand_fallback_replicas",
    "dynamic_ondemand_fallback",
    "spot_placer",
)
# Accepted, acted on otherwise: the path under ``service`` and what Corral does instead.
_NOTICED = {
    ("replica_policy", "num_overprovision"): (
        "accepted; Corral launches no extra replicas beyond the target"
    ),
    ("replica_policy", "base_ondemand_fallback_replicas"): (
        "accepted; every replica takes the task's own resources (its spot/on-demand order)"
    ),
    ("replica_policy", "dynamic_ondemand_fallback"): (
        "accepted; every replica takes the task's own resources (its spot/on-demand order)"
    ),
    ("replica_policy", "spot_placer"): (
        "accepted; each replica walks the task's own failover chain instead"
    ),
    ("tls",): "accepted; the load balancer is the API's relay, served as the API is (its TLS)",
    ("pool",): "accepted; Corral launches the service's replicas, not a worker pool",
    ("workers",): "accepted; Corral launches the service's replicas, not a worker pool",
}
# A mapping accelerator -> QPS: the balancer weighs replicas by it (instance_aware_least_load);
# the autoscaler cannot know the next replica's accelerator.
_QPS_MAPPING = (
    "a mapping is used as written by instance_aware_least_load; the autoscaler sizes the "
    "service with its smallest value (it cannot know which accelerator a new replica gets)"
)


@dataclass(frozen=True, slots=True)
class ReplicaPolicy:
    """How many replicas a service keeps: at least ``min_replicas``, at most ``max_replicas``."""

    min_replicas: int = 1
    max_replicas: int = 1
    # SkyServe's QPS target: a number, or a mapping accelerator -> QPS
    # (instance_aware_least_load reads the mapping).
    target_qps_per_replica: float | dict[str, float] | None = None
    # How long the wanted count must stay above (below) the target before it moves
    # (QPS autoscaling only: shared/serve/autoscale.py).
    upscale_delay_s: float = DEFAULT_UPSCALE_DELAY_S
    downscale_delay_s: float = DEFAULT_DOWNSCALE_DELAY_S


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """A task's ``service:`` section as Corral acts on it."""

    probe: ReadinessProbe | None = None
    policy: ReplicaPolicy = ReplicaPolicy()
    load_balancing_policy: str = DEFAULT_LB_POLICY
    port: int | None = None  # ``service.ports``: the replicas' port (else resources.ports)
    # ``replicas`` or ``replica_policy`` given: replicas behind Corral's load balancer.
    replicated: bool = False

    def qps_of(self, accelerator: str | None) -> float:
        """The QPS target of a replica with ``accelerator`` (instance_aware_least_load's weight):
        the mapping's entry for it (``A100`` also matches a key ``A100:1``), else a number
        target, else 1.0 (SkyPilot's fallback, also for a target that is not positive)."""
        target = self.policy.target_qps_per_replica
        found: float | None = None
        if isinstance(target, dict):
            if accelerator is not None and accelerator in target:
                found = target[accelerator]
            else:
                found = next((v for k, v in target.items() if k.split(":")[0] == accelerator), None)
        elif target is not None:
            found = float(target)
        return found if found is not None and found > 0 else 1.0


def _count(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_REPLICAS:
        raise ValueError(
            f"expected {name} a whole number from {low} to {MAX_REPLICAS}, got {value!r}"
        )
    return value


def _seconds(value: object, name: str) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or value < 0
    ):
        raise ValueError(f"expected {name} a number of seconds >= 0, got {value!r}")


def _qps(value: object) -> float | dict[str, float] | None:
    name = "service.replica_policy.target_qps_per_replica"
    if value is None:
        return None
    if isinstance(value, dict):
        if not value or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for k, v in value.items()
        ):
            raise ValueError(f"expected {name} a mapping of accelerator names to numbers > 0")
        return {k: float(v) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"expected {name} a number > 0, or a mapping accelerator -> number")
    return float(value)


def _unknown(value: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(
            f"unknown {where} field(s) {', '.join(unknown)}; expected {', '.join(known)}"
        )


def _policy(value: dict[str, Any]) -> ReplicaPolicy:
    if "replicas" in value and "replica_policy" in value:
        raise ValueError(
            "service.replicas and service.replica_policy cannot both be set (replicas is "
            "replica_policy.min_replicas = max_replicas); keep one"
        )
    if "replicas" in value:
        n = _count(value["replicas"], "service.replicas", 1)
        return ReplicaPolicy(min_replicas=n, max_replicas=n)
    raw = value.get("replica_policy")
    if raw is None:
        return ReplicaPolicy()
    if not isinstance(raw, dict):
        raise ValueError(f"expected service.replica_policy a mapping, got {raw!r}")
    _unknown(raw, _POLICY_FIELDS, "service.replica_policy")
    if "min_replicas" not in raw:
        raise ValueError("service.replica_policy.min_replicas is required (SkyServe's too)")
    low = _count(raw["min_replicas"], "service.replica_policy.min_replicas", 0)
    high = raw.get("max_replicas")
    qps = _qps(raw.get("target_qps_per_replica"))
    for key in ("upscale_delay_seconds", "downscale_delay_seconds"):
        _seconds(raw.get(key), f"service.replica_policy.{key}")
    if high is None:
        if qps is not None:  # SkyServe: autoscaling needs both bounds
            raise ValueError(
                "service.replica_policy.max_replicas is required with target_qps_per_replica"
            )
        high = low
    high = _count(high, "service.replica_policy.max_replicas", 1)
    if high < low:
        raise ValueError(
            f"service.replica_policy.max_replicas ({high}) is below min_replicas ({low})"
        )
    up, down = raw.get("upscale_delay_seconds"), raw.get("downscale_delay_seconds")
    return ReplicaPolicy(
        min_replicas=low,
        max_replicas=high,
        target_qps_per_replica=qps,
        upscale_delay_s=DEFAULT_UPSCALE_DELAY_S if up is None else float(up),
        downscale_delay_s=DEFAULT_DOWNSCALE_DELAY_S if down is None else float(down),
    )


def parse_service(value: object) -> ServiceSpec | None:
    """``service:`` as Corral acts on it (None when absent); raises ValueError naming the field
    and what was expected."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(
            f"expected service a mapping (readiness_probe, replicas, ...), got {value!r}"
        )
    _unknown(value, _SERVICE_FIELDS, "service")
    lb = value.get("load_balancing_policy")
    if lb is not None and lb not in LB_POLICIES:
        raise ValueError(
            f"expected service.load_balancing_policy one of {', '.join(LB_POLICIES)}, got {lb!r}"
        )
    port = None
    if value.get("ports") is not None:
        ranges = parse_ports(value["ports"])
        if len(ranges) != 1 or ranges[0][0] != ranges[0][1]:
            raise ValueError(f"expected service.ports one port, got {value['ports']!r}")
        port = ranges[0][0]
    return ServiceSpec(
        probe=parse_probe(value.get("readiness_probe")),
        policy=_policy(value),
        load_balancing_policy=lb or DEFAULT_LB_POLICY,
        port=port,
        replicated="replicas" in value or "replica_policy" in value,
    )


def service_notices(value: object) -> list[tuple[tuple[str, ...], str]]:
    """The fields of ``service:`` Corral accepts and acts on otherwise: (path under
    ``service``, what it does instead), in the file's order."""
    if not isinstance(value, dict):
        return []
    out: list[tuple[tuple[str, ...], str]] = []
    for key, item in value.items():
        if (key,) in _NOTICED:
            out.append(((key,), _NOTICED[(key,)]))
        elif key == "replica_policy" and isinstance(item, dict):
            for sub, part in item.items():
                if (key, sub) in _NOTICED:
                    out.append(((key, sub), _NOTICED[(key, sub)]))
                elif sub == "target_qps_per_replica" and isinstance(part, dict):
                    out.append(((key, sub), _QPS_MAPPING))
    return out
