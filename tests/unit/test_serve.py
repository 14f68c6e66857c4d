"""SkyServe's service section, replica count and load-balancing policies (shared/serve/).

Cases translated from SkyPilot's tests name their source: ``tests/unit_tests/test_sky/serve/
test_load_balancing_policies.py`` (LB), ``tests/unit_tests/test_sky/serve/
test_autoscalers.py`` (``TestSelectNonterminalReplicasToScaleDown``, the scale-down order),
``tests/unit_tests/test_sky/serve/test_serve_autoscaling.py`` (the request-rate hysteresis).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from corral.shared.config.task import Task
from corral.shared.serve.autoscale import Scaling, desired_replicas, scale
from corral.shared.serve.balance import Backend, Balancer, choose, normalized_load, policy_name
from corral.shared.serve.replicas import Replica, ReplicaPlan, plan_replicas, target_count
from corral.shared.serve.spec import (
    DEFAULT_LB_POLICY,
    LB_POLICIES,
    ReplicaPolicy,
    ServiceSpec,
    parse_service,
    service_notices,
)

R1, R2 = "http://replica1:8000", "http://replica2:8000"


# --------------------------------------------------------------------------- the section
def test_replicas_is_a_fixed_count_and_replica_policy_its_bounds() -> None:
    spec = parse_service({"replicas": 3})
    assert spec is not None and spec.replicated
    assert (spec.policy.min_replicas, spec.policy.max_replicas) == (3, 3)
    spec = parse_service({"replica_policy": {"min_replicas": 1, "max_replicas": 4}})
    assert spec is not None and (spec.policy.min_replicas, spec.policy.max_replicas) == (1, 4)
    only_probe = parse_service({"readiness_probe": "/health"})
    assert only_probe is not None and not only_probe.replicated
    assert only_probe.probe is not None and only_probe.probe.path == "/health"


@pytest.mark.parametrize(
    ("service", "message"),
    [
        ({"replicas": 2, "replica_policy": {"min_replicas": 1}}, "cannot both be set"),
        ({"replicas": 0}, "service.replicas a whole number from 1"),
        ({"replicas": "two"}, "service.replicas a whole number"),
        ({"replica_policy": {"max_replicas": 2}}, "min_replicas is required"),
        ({"replica_policy": {"min_replicas": 3, "max_replicas": 2}}, "below min_replicas"),
        (
            {"replica_policy": {"min_replicas": 1, "target_qps_per_replica": 2}},
            "max_replicas is required with target_qps_per_replica",
        ),
        ({"replica_policy": {"min_replicas": 1, "min_replica": 2}}, "unknown"),
        ({"load_balancing_policy": "random"}, "one of round_robin, least_load"),
        ({"replicaz": 2}, "unknown service field(s) replicaz"),
        ({"ports": "8000-8010"}, "service.ports one port"),
    ],
)
def test_a_wrong_service_field_is_refused_naming_it(service: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_service(service)


def test_the_policies_are_skypilots_and_least_load_is_the_default() -> None:
    # test_load_balancing_policies.py TestPolicyRegistry::test_lb_policies_contains_* and
    # ::test_default_policy_is_least_load; TestLoadBalancingPolicy::test_make_policy_with_*
    assert set(LB_POLICIES) == {"round_robin", "least_load", "instance_aware_least_load"}
    assert DEFAULT_LB_POLICY == "least_load"
    assert policy_name(None) == "least_load"
    assert policy_name("round_robin") == "round_robin"
    with pytest.raises(ValueError, match="unknown load balancing policy"):
        policy_name("invalid_policy")
    spec = parse_service({"replicas": 2})
    assert spec is not None and spec.load_balancing_policy == "least_load"


def test_noticed_fields_say_what_corral_does_instead() -> None:
    notes = dict(
        service_notices(
            {
                "replica_policy": {
                    "min_replicas": 1,
                    "max_replicas": 3,
                    "target_qps_per_replica": {"A100": 4, "L4": 1},
                    "upscale_delay_seconds": 10,
                    "num_overprovision": 1,
                },
                "tls": {"keyfile": "k", "certfile": "c"},
            }
        )
    )
    assert "smallest value" in notes[("replica_policy", "target_qps_per_replica")]
    assert "no extra replicas" in notes[("replica_policy", "num_overprovision")]
    assert ("tls",) in notes
    # Honoured: no notice.
    assert ("replica_policy", "min_replicas") not in notes
    assert ("replica_policy", "upscale_delay_seconds") not in notes
    number = {"replica_policy": {"min_replicas": 1, "max_replicas": 2, "target_qps_per_replica": 2}}
    assert service_notices(number) == []


def test_validate_prints_the_notice_and_refuses_both_counts_with_file_and_line(
    tmp_path: Path,
) -> None:
    task = tmp_path / "svc.yaml"
    task.write_text(
        "resources: {cloud: local, ports: 8080}\n"
        "service:\n"
        "  replica_policy: {min_replicas: 1, max_replicas: 2, num_overprovision: 1}\n"
        "run: python3 -m http.server 8080\n"
    )
    cli = [sys.executable, "-m", "corral.services.cli.main", "validate", str(task)]
    ok = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert f"{task}:3: service.replica_policy.num_overprovision" in ok.stdout + ok.stderr
    task.write_text(
        "resources: {cloud: local, ports: 8080}\n"
        "service:\n"
        "  replicas: 2\n"
        "  replica_policy: {min_replicas: 1}\n"
    )
    bad = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert f"{task}:3" in bad.stderr + bad.stdout or f"{task}:2" in bad.stderr + bad.stdout
    assert "cannot both be set" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr


def test_a_replicated_service_needs_a_port_and_service_ports_opens_its_own() -> None:
    task = Task.model_validate({"service": {"replicas": 2}, "run": "true"})
    assert any("need a port" in text for _, text in task.problems())
    task = Task.model_validate(
        {"resources": {"ports": 9000}, "service": {"replicas": 2, "ports": 8081}}
    )
    assert task.service_port() == 8081
    assert task.problems() == []
    assert "8081" in [str(p) for p in task.resources.ports]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- replica count
def test_the_count_kept_is_min_replicas() -> None:
    assert target_count(ReplicaPolicy(min_replicas=2, max_replicas=5)) == 2
    assert target_count(ReplicaPolicy(min_replicas=3, max_replicas=3)) == 3


def test_missing_replicas_are_launched_with_the_next_ids() -> None:
    plan = plan_replicas(ReplicaPolicy(2, 2), [Replica(1, "ready", pinned=True)], now=0)
    assert plan == ReplicaPlan(target=2, launch=(2,))
    # An ended replica is replaced by a new id, never its own again.
    plan = plan_replicas(
        ReplicaPolicy(2, 2), [Replica(1, "ready", pinned=True), Replica(2, "ended")], now=0
    )
    assert plan.launch == (3,)


def test_a_replica_failing_its_probe_is_retired_after_the_grace_and_replaced() -> None:
    replicas = [Replica(1, "ready", pinned=True), Replica(2, "not_ready", not_ready_since=100)]
    early = plan_replicas(ReplicaPolicy(2, 2), replicas, now=105, grace_s=10)
    assert early == ReplicaPlan(target=2)  # a probe failing briefly: out of rotation only
    late = plan_replicas(ReplicaPolicy(2, 2), replicas, now=111, grace_s=10)
    assert [rid for rid, _ in late.retire] == [2]
    assert late.launch == (3,)


def test_the_services_own_replica_is_never_retired_but_another_takes_its_place() -> None:
    failing = [Replica(1, "not_ready", not_ready_since=0, pinned=True), Replica(2, "ready")]
    plan = plan_replicas(ReplicaPolicy(2, 2), failing, now=60, grace_s=10)
    assert plan.retire == () and plan.launch == (3,)
    # Once it answers again, the surplus goes: the newest first.
    back = [Replica(1, "ready", pinned=True), Replica(2, "ready"), Replica(3, "ready")]
    plan = plan_replicas(ReplicaPolicy(2, 2), back, now=70)
    assert [rid for rid, _ in plan.retire] == [3] and plan.launch == ()


def test_scale_down_takes_the_newest_first_on_equal_status() -> None:
    # test_autoscalers.py TestSelectNonterminalReplicasToScaleDown::
    # test_select_replicas_with_same_job_counts: equal status -> replica id descending [3, 2].
    replicas = [Replica(1, "ready", pinned=True), Replica(2, "ready"), Replica(3, "ready")]
    plan = plan_replicas(ReplicaPolicy(1, 1), replicas, now=0)
    assert [rid for rid, _ in plan.retire] == [3, 2]


def test_scale_down_takes_a_replica_not_ready_yet_before_a_ready_one() -> None:
    # test_autoscalers.py TestSelectNonterminalReplicasToScaleDown::
    # test_select_replicas_with_status_priority: PROVISIONING goes before READY.
    replicas = [Replica(1, "ready", pinned=True), Replica(2, "launching"), Replica(3, "ready")]
    plan = plan_replicas(ReplicaPolicy(2, 2), replicas, now=0)
    assert [rid for rid, _ in plan.retire] == [2]


# --------------------------------------------------------------------------- QPS autoscaling
QPS5 = ReplicaPolicy(1, 5, 5.0, upscale_delay_s=40, downscale_delay_s=40)


def test_the_wanted_count_is_skyserves_formula() -> None:
    # docs/source/serving/autoscaling.rst: min(max, max(min, ceil(qps / target_qps_per_replica)))
    policy = ReplicaPolicy(2, 10, 2.5)
    assert desired_replicas(policy, 0) == 2
    assert desired_replicas(policy, 10) == 4
    assert desired_replicas(policy, 10.1) == 5
    assert desired_replicas(policy, 1000) == 10
    assert scale(ReplicaPolicy(2, 2), None, 1000, 0) == Scaling(target=2)  # no QPS target


def test_scale_down_waits_for_its_delay() -> None:
    # test_serve_autoscaling.py::test_request_rate_hysteresis_delays_scale_down: target 2,
    # 300 requests in the 60 s window (5 QPS, one replica's worth): the first look keeps 2,
    # the one a delay later takes 1.
    first = scale(QPS5, Scaling(target=2), 300 / 60, now=100)
    assert first == Scaling(target=2, below_since=100)
    assert scale(QPS5, first, 300 / 60, now=139).target == 2
    assert scale(QPS5, first, 300 / 60, now=140) == Scaling(target=1)


def test_scale_up_waits_for_its_delay() -> None:
    # test_serve_autoscaling.py::test_request_rate_hysteresis_delays_scale_up: target 1,
    # 301 requests (just over one replica's 5 QPS): the first look keeps 1, a delay later 2.
    first = scale(QPS5, Scaling(target=1), 301 / 60, now=100)
    assert first == Scaling(target=1, above_since=100)
    assert scale(QPS5, first, 301 / 60, now=140) == Scaling(target=2)


def test_a_burst_that_passes_before_the_delay_scales_nothing() -> None:
    first = scale(QPS5, Scaling(target=1), 20, now=0)
    calm = scale(QPS5, first, 4, now=30)  # back within one replica: the wait starts over
    assert calm == Scaling(target=1)
    assert scale(QPS5, calm, 20, now=45) == Scaling(target=1, above_since=45)


def test_no_traffic_with_min_zero_scales_to_zero() -> None:
    # test_serve_autoscaling.py::test_scale_to_zero_uses_faster_decision_interval: min 0,
    # no requests: the target is 0 (Corral keeps replica 1, the service's own request:
    # docs/services.md).
    policy = ReplicaPolicy(0, 3, 5.0, upscale_delay_s=0, downscale_delay_s=0)
    assert scale(policy, Scaling(target=1), 0, now=0).target == 0


def test_the_plan_follows_the_autoscalers_target() -> None:
    replicas = [Replica(1, "ready", pinned=True)]
    assert plan_replicas(QPS5, replicas, 0, target=3).launch == (2, 3)


# --------------------------------------------------------------------------- the balancer
def test_round_robin_takes_the_replicas_in_turn_and_wraps() -> None:
    # test_load_balancing_policies.py TestRoundRobinPolicy::test_select_replica_round_robin
    lb = Balancer(policy="round_robin")
    lb.set_ready([Backend(1, R1), Backend(2, R2)])
    assert [lb.pick().url for _ in range(3)] == [R1, R2, R1]  # type: ignore[union-attr]


def test_round_robin_keeps_its_turn_for_the_same_set() -> None:
    # TestRoundRobinPolicy::test_set_ready_replicas_same_set (and ::test_set_ready_replicas:
    # a new set starts at 0)
    lb = Balancer(policy="round_robin")
    lb.set_ready([Backend(1, R1), Backend(2, R2)])
    assert lb.turn == 0
    lb.turn = 1
    lb.set_ready([Backend(1, R1), Backend(2, R2)])
    assert lb.turn == 1
    lb.set_ready([Backend(2, R2)])
    assert lb.turn == 0


@pytest.mark.parametrize("policy", LB_POLICIES)
def test_no_ready_replica_selects_none(policy: str) -> None:
    # TestRoundRobinPolicy / TestLeastLoadPolicy / TestInstanceAwareLeastLoadPolicy::
    # test_select_replica_empty
    assert Balancer(policy=policy).pick() is None
    assert choose(policy, []) is None


def test_least_load_takes_the_replica_with_fewest_in_flight() -> None:
    # TestLeastLoadPolicy::test_select_replica_least_load
    ready = [Backend(1, R1), Backend(2, R2)]
    assert choose("least_load", ready, loads={R1: 5, R2: 2}) == Backend(2, R2)


def test_least_load_counts_requests_until_done() -> None:
    # TestLeastLoadPolicy::test_pre_execute_hook_increments_load / ::test_post_execute_hook_*
    lb = Balancer(policy="least_load")
    lb.set_ready([Backend(1, R1), Backend(2, R2)])
    first = lb.pick()
    assert first is not None and lb.loads[first.url] == 1
    second = lb.pick()
    assert second is not None and second.url != first.url  # the idle one
    lb.done(first)
    assert lb.loads[first.url] == 0


def test_least_load_forgets_replicas_no_longer_ready() -> None:
    # TestLeastLoadPolicy::test_set_ready_replicas_removes_old (and ::test_set_ready_replicas)
    lb = Balancer(policy="least_load")
    lb.set_ready([Backend(1, R1)])
    lb.loads[R1] = 5
    lb.set_ready([Backend(2, R2)])
    assert R1 not in lb.loads and lb.loads[R2] == 0


def test_instance_aware_least_load_divides_by_the_accelerators_qps() -> None:
    # TestInstanceAwareLeastLoadPolicy::test_select_replica_by_normalized_load
    spec = ServiceSpec(policy=ReplicaPolicy(1, 2, {"A100": 10.0, "H100": 20.0}))
    ready = [Backend(1, R1, "A100"), Backend(2, R2, "H100")]
    loads = {R1: 5, R2: 8}  # 0.5 and 0.4
    assert choose("instance_aware_least_load", ready, loads=loads, spec=spec) == ready[1]
    assert choose("least_load", ready, loads=loads, spec=spec) == ready[0]  # raw counts


def test_instance_aware_qps_matching() -> None:
    # TestInstanceAwareLeastLoadPolicy::test_get_target_qps_direct_match, ::_base_name_match,
    # ::_fallback, ::test_get_normalized_load, ::test_get_normalized_load_zero_qps
    assert ServiceSpec(policy=ReplicaPolicy(1, 2, {"A100": 10.0})).qps_of("A100") == 10.0
    assert ServiceSpec(policy=ReplicaPolicy(1, 2, {"A100:1": 10.0})).qps_of("A100") == 10.0
    assert ServiceSpec(policy=ReplicaPolicy(1, 2, {"A100": 10.0})).qps_of("unknown_gpu") == 1.0
    spec = ServiceSpec(policy=ReplicaPolicy(1, 2, {"A100": 10.0}))
    assert normalized_load(Backend(1, R1, "A100"), {R1: 5}, spec) == 0.5
    zero = ServiceSpec(policy=ReplicaPolicy(1, 2, {"A100": 0.0}))
    assert normalized_load(Backend(1, R1, "A100"), {R1: 5}, zero) == 5.0


def test_a_replica_that_just_failed_is_skipped() -> None:
    lb = Balancer(policy="round_robin")
    lb.set_ready([Backend(1, R1), Backend(2, R2)])
    chosen = lb.pick(skip=frozenset({R1}))
    assert chosen is not None and chosen.url == R2
    assert lb.pick(skip=frozenset({R1, R2})) is None


def test_the_shipped_example_validates() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "service-replicas.yaml"
    cli = [sys.executable, "-m", "corral.services.cli.main", "validate", str(example)]
    done = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "notice" not in done.stdout + done.stderr  # every field it sets is honoured


def test_plan_says_how_many_replicas_go_down_the_chain() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "service-replicas.yaml"
    cli = [sys.executable, "-m", "corral.services.cli.main", "plan", str(example)]
    done = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A service of 2 replicas" in done.stdout
    assert "(round_robin)" in done.stdout
