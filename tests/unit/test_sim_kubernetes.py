"""Kubernetes in the simulator (issue #48, item 3): a scenario may name a ``kubernetes`` cloud,
played as the provider behaves (services/providers/kubernetes/, docs/kubernetes.md): pods as
machines, offerings its node shapes priced 0, a ResourceQuota refusing one resource in one
namespace, a pod no node holds failing as FailedScheduling so the chain moves on."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

import pytest

from corral.shared.blocking import is_blocked
from corral.shared.configio import ConfigError
from corral.shared.errors import CapacityError, QuotaError, Scope
from corral.shared.placement import Ask, Block, Placement
from corral.shared.planner import plan
from corral.shared.sim.cloud import SimCloud, SimInstance
from corral.shared.sim.engine import Sim, SimTimers
from corral.shared.sim.pods import PodAsk
from corral.shared.sim.run import make_policy, run_policy
from corral.shared.sim.scenario import Scenario, load_scenario
from corral.shared.sim.workload import Workload, load_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"
T4 = "8CPU--32GB--T4:1"
CPU = "16CPU--64GB"

# One context: two T4 nodes and two CPU nodes, namespace team-a (first) with a quota of one
# GPU; AWS behind it with T4 and CPU machines.
CLUSTER = """\
seed: 1
duration: 6h
clouds:
  kubernetes:
    boot: 20s
    call: 1s
    schedule_wait: 10s
    scheduler: 1s
    contexts:
      lab:
        namespaces:
          team-a: {quota: {requests.nvidia.com/gpu: 1}}
          default: {}
        nodes:
          - {count: 2, cpus: 16, memory_gib: 64}
          - {count: %(t4_nodes)d, cpus: 8, memory_gib: 32, accelerator: T4, gpus: 1}
  aws:
    boot: 90s
    call: 2s
    instance_types:
      g4dn.2xlarge: {accelerators: {T4: 1}, vcpus: 8, memory_gib: 32, price_usd_per_hour: 0.75}
      m5.4xlarge: {vcpus: 16, memory_gib: 64, price_usd_per_hour: 0.77}
    regions:
      us-east-1:
        zones:
          us-east-1a: {capacity: {g4dn.2xlarge: {on_demand: 4}, m5.4xlarge: {on_demand: 4}}}
"""


def _scenario(tmp_path: Path, t4_nodes: int = 2) -> Scenario:
    (tmp_path / "s.yaml").write_text(CLUSTER % {"t4_nodes": t4_nodes})
    return load_scenario(tmp_path / "s.yaml")


def _files(tmp_path: Path, workload: str, t4_nodes: int = 2) -> tuple[Scenario, Workload]:
    (tmp_path / "w.yaml").write_text(workload)
    return _scenario(tmp_path, t4_nodes), load_workload(tmp_path / "w.yaml")


def _launches(scenario: Scenario, workload: Workload) -> list[Placement]:
    """Corral's day over the scenario; the place of every machine launched, in order."""
    return [place for _, place in _launched_at(scenario, workload)]


def _launched_at(scenario: Scenario, workload: Workload) -> list[tuple[float, Placement]]:
    """Corral's day over the scenario; when and where every machine was launched."""
    sim = Sim(scenario, workload.arrivals, SimTimers())
    out: list[tuple[float, Placement]] = []
    launched = sim.launched

    def record(inst: SimInstance) -> None:
        out.append((sim.now, inst.place))
        launched(inst)

    sim.launched = record  # type: ignore[method-assign]
    sim.run(make_policy("corral", workload))
    return out


def test_its_offerings_are_its_node_shapes_per_namespace_priced_0(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    kube = [o for o in scenario.catalog().offerings if o.cloud == "kubernetes"]
    assert [(o.instance_type, o.region, o.zone) for o in kube] == [
        (CPU, "lab", "team-a"),
        (CPU, "lab", "default"),
        (T4, "lab", "team-a"),
        (T4, "lab", "default"),
    ]
    assert {o.price_usd_per_hour for o in kube} == {0.0}
    assert {o.spot_price_usd_per_hour for o in kube} == {None}  # on demand only
    # The planner tries the cluster (its nodes are paid for) before any VM, as the runtime's.
    task = load_workload_task(tmp_path, "{accelerators: T4:1}")
    chain = plan(task, scenario.catalog(), clouds=tuple(scenario.clouds)).candidates
    assert [(c.cloud, c.zone, c.instance_type) for c in chain] == [
        ("kubernetes", "team-a", T4),
        ("kubernetes", "default", T4),
        ("aws", "us-east-1a", "g4dn.2xlarge"),
    ]


def load_workload_task(tmp_path: Path, resources: str) -> object:
    (tmp_path / "one.yaml").write_text(
        f"arrivals:\n  - {{at: 0s, count: 1, duration: 1h, task: {{resources: {resources}}}}}\n"
    )
    task = load_workload(tmp_path / "one.yaml").arrivals[0].task
    assert task is not None
    return task


def test_a_request_fits_on_kubernetes_as_a_pod(tmp_path: Path) -> None:
    work = (
        "arrivals:\n  - {at: 0s, count: 1, duration: 1h, task: {resources: {accelerators: T4:1}}}\n"
    )
    scenario, workload = _files(tmp_path, work)
    assert _launches(scenario, workload) == [
        Placement("kubernetes", "lab", "team-a", T4, "on_demand")
    ]
    figures = run_policy(scenario, workload, "corral").figures
    assert figures["completed"] == 1 and figures["total_cost_usd"] == 0.0
    assert figures["time_to_capacity_s"]["p50"] == pytest.approx(20.0)  # the pod's boot

    cloud = SimCloud(scenario)
    pod = cloud.launch(Placement("kubernetes", "lab", "default", CPU, "on_demand"), 0.0, "p", 0)
    assert (pod.price_usd_per_hour, pod.up_at, pod.preempt_at) == (0.0, 20.0, None)


def test_a_quota_refusal_blocks_only_that_resource_in_that_namespace(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    cloud = SimCloud(scenario)
    t4_team = Placement("kubernetes", "lab", "team-a", T4, "on_demand")
    cloud.launch(t4_team, 0.0, "first", 1)
    with pytest.raises(QuotaError) as refused:
        cloud.launch(t4_team, 0.0, "second", 1)
    assert (refused.value.scope, refused.value.family) == (
        Scope.FAMILY,
        "team-a:requests.nvidia.com/gpu",
    )
    assert "exceeded quota" in str(refused.value)
    block = Block.for_error(refused.value, t4_team)
    assert block is not None
    cpu_team = Placement("kubernetes", "lab", "team-a", CPU, "on_demand")
    t4_default = Placement("kubernetes", "lab", "default", T4, "on_demand")
    t4 = Ask(accelerator="T4")  # what a T4 request's candidates carry
    assert is_blocked(t4_team, [block], t4) is not None
    assert is_blocked(cpu_team, [block]) is None and is_blocked(t4_default, [block], t4) is None
    # The cloud agrees: a CPU pod in team-a and a GPU pod in default still launch.
    assert cloud.launch(cpu_team, 0.0, "cpu", 0).place == cpu_team
    assert cloud.launch(t4_default, 0.0, "t4", 1).place == t4_default
    assert cloud.free(t4_team, 0.0) == 0  # the quota, though the nodes have no T4 left anyway

    # Through Corral's policy: two T4 jobs and a CPU job; the second T4 pod goes to default,
    # the CPU pod stays in team-a, nothing reaches AWS.
    work = """\
arrivals:
  - {at: 0s, count: 2, every: 5s, duration: 1h, task: {name: t4, resources: {accelerators: T4:1}}}
  - {at: 20s, count: 1, duration: 1h, task: {name: cpu, resources: {cpus: 16, memory: 64}}}
"""
    scenario, workload = _files(tmp_path, work)
    assert _launches(scenario, workload) == [
        t4_team,
        t4_default,
        cpu_team,
    ]


def test_an_unschedulable_pod_fails_over_to_a_cloud_vm(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, t4_nodes=1)
    cloud = SimCloud(scenario)
    t4_default = Placement("kubernetes", "lab", "default", T4, "on_demand")
    cloud.launch(t4_default, 0.0, "only", 1)
    with pytest.raises(CapacityError) as stuck:
        cloud.launch_all(t4_default, 0.0, ["a", "b"], 1)
    assert stuck.value.code == "FailedScheduling" and stuck.value.scope == Scope.ZONE
    assert "0/3 nodes are available" in str(stuck.value)
    assert "Insufficient nvidia.com/gpu" in str(stuck.value)
    # Known at the scheduler's verdict, after the pods were created: not the call's time alone.
    assert cloud.refused_after_s(t4_default, stuck.value) == pytest.approx(1.0 + 1.0)

    # Two T4 jobs, one T4 node: the second is refused by team-a's quota (one GPU), goes on to
    # default, where no node holds its pod, and on to EC2.
    work = "arrivals:\n  - {at: 0s, count: 2, every: 5s, duration: 1h, task: {resources: %s}}\n"
    work %= "{accelerators: T4:1}"
    scenario, workload = _files(tmp_path, work, t4_nodes=1)
    assert _launched_at(scenario, workload) == [
        (0.0, Placement("kubernetes", "lab", "team-a", T4, "on_demand")),
        # arrived at 5 s; team-a's quota refuses it at once (the call, 1 s), default's
        # scheduler calls its pod Unschedulable (the call and the scheduler's verdict, 2 s)
        (5.0 + 1.0 + 2.0, Placement("aws", "us-east-1", "us-east-1a", "g4dn.2xlarge", "on_demand")),
    ]
    figures = run_policy(scenario, workload, "corral").figures
    assert figures["completed"] == 2 and figures["failed"] == 0
    assert figures["total_cost_usd"] == pytest.approx(0.75, rel=0.05)  # one hour of EC2


def test_a_pod_the_scheduler_does_not_answer_in_time_fails_the_launch(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    spec = scenario.clouds["kubernetes"]
    slow = scenario.model_copy(
        update={
            "clouds": {
                **scenario.clouds,
                "kubernetes": spec.model_copy(update={"scheduler_s": 30.0}),
            }
        }
    )
    cloud = SimCloud(slow)
    place = Placement("kubernetes", "lab", "default", CPU, "on_demand")
    with pytest.raises(CapacityError, match="not scheduled within 10 s"):
        cloud.launch(place, 0.0, "slow", 0)
    assert cloud.free(place, 0.0) == 2  # its pod was deleted: both CPU nodes free
    assert cloud.refused_after_s(place, CapacityError("x")) == pytest.approx(1.0 + 10.0)


def test_the_provider_and_the_simulator_ask_the_same_of_a_pod(tmp_path: Path) -> None:
    """The provider's manifest and the simulated pod come from one function; the day's
    decisions on a kubernetes cloud are the runtime's own functions (entered by identity)."""
    from corral.services.providers.base import LaunchSpec
    from corral.services.providers.kubernetes import pods as provider_pods
    from corral.shared import failover_plan, planner, pod_shapes

    assert provider_pods.shape_resources is pod_shapes.shape_resources
    spec = LaunchSpec(
        request_id="r", attempt_id="a", cloud="kubernetes", region="lab", zone="team-a",
        instance_type=T4, market="on_demand", count=1, accelerators={"T4": 1},
    )  # fmt: skip
    manifest = provider_pods.pod_manifest(spec, 0, namespace="team-a", script="", image="i")
    resources = manifest["spec"]["containers"][0]["resources"]
    assert PodAsk.of(T4, 1).usage == pod_shapes.quota_usage(resources)

    wanted = {
        f.__code__: name
        for name, f in {
            "plan": planner.plan,
            "plan_step": failover_plan.plan_step,
            "for_error": Block.for_error.__func__,  # type: ignore[attr-defined]
            "shape_resources": pod_shapes.shape_resources,
        }.items()
    }
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in wanted:
            seen.add(wanted[frame.f_code])

    work = "arrivals:\n  - {at: 0s, count: 3, every: 1s, duration: 1h, task: {resources: %s}}\n"
    scenario, workload = _files(tmp_path, work % "{accelerators: T4:1}")
    sys.setprofile(profile)
    try:
        run_policy(scenario, workload, "corral")
    finally:
        sys.setprofile(None)
    assert seen == set(wanted.values())


def test_the_provider_and_the_simulator_offer_a_node_shape_by_one_function(
    tmp_path: Path,
) -> None:
    """``pod_shapes.shape_offerings``: a shape once per namespace, the context its region,
    priced 0, on demand only; the provider's offerings of the scenario's nodes (as its node
    listing reports them) are the simulator's catalog rows of that cloud, one for one."""
    from corral.services.providers.kubernetes.provider import KubernetesProvider
    from corral.services.providers.kubernetes.provider import Offering as NodeShape
    from corral.shared.pod_shapes import shape_offerings

    offered = shape_offerings(
        "kubernetes", "lab", ("team-a", "default"), T4,
        cpus=8, memory_gib=32, accelerator="T4", accelerator_count=1,
    )  # fmt: skip
    assert [(o.cloud, o.region, o.zone) for o in offered] == [
        ("kubernetes", "lab", "team-a"),
        ("kubernetes", "lab", "default"),
    ]
    assert {
        (o.instance_type, o.vcpus, o.memory_gib, o.accelerator, o.accelerator_count)
        for o in offered
    } == {(T4, 8, 32, "T4", 1)}
    assert {(o.price_usd_per_hour, o.spot_price_usd_per_hour) for o in offered} == {(0.0, None)}

    scenario = _scenario(tmp_path)
    played = [o for o in scenario.catalog().offerings if o.cloud == "kubernetes"]
    groups = scenario.clouds["kubernetes"].contexts["lab"].shapes()  # type: ignore[union-attr]

    class Listed(KubernetesProvider):
        def offerings_of(self, context: str) -> list[NodeShape]:
            return [
                NodeShape(context, name, g.cpus, g.memory_gib, g.accelerator, g.gpus, g.count, None)
                for name, g in groups.items()
            ]

    listed = Listed(contexts=["lab"], namespaces=["team-a", "default"]).offerings()
    assert len(played) == 4
    assert list(listed) == played


@pytest.mark.parametrize(
    ("swap", "expected"),
    [
        # the two clouds' bodies swapped: each is written as the other is played
        (
            ("kubernetes", "aws"),
            [
                (4, "clouds.aws: aws is played as machines: expected instance_types and regions"),
                (17, "clouds.kubernetes: kubernetes is played as pods: expected contexts"),
            ],
        ),
        (("requests.nvidia.com/gpu: 1", "limits.cpu: 4"), [(12, "'limits.cpu': expected a")]),
        (("accelerator: T4, gpus: 1", "accelerator: T4"), [(16, "gpus: expected the number")]),
    ],
)
def test_a_wrong_kubernetes_cloud_is_named_with_its_line(
    tmp_path: Path, swap: tuple[str, str], expected: list[tuple[int, str]]
) -> None:
    text = CLUSTER % {"t4_nodes": 2}
    one, other = swap
    if one == "kubernetes":
        text = text.replace("  kubernetes:", "  TMP:").replace("  aws:", "  kubernetes:")
        text = text.replace("  TMP:", "  aws:")
    else:
        text = text.replace(one, other, 1)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as bad:
        load_scenario(path)
    found = [(i.line, f"{i.loc}: {i.message}") for i in bad.value.issues]
    for line, message in expected:
        assert any(n == line and message in m for n, m in found), found


def test_the_example_day_runs_pods_first_and_vms_after() -> None:
    scenario = load_scenario(EXAMPLES / "kubernetes-scenario.yaml")
    workload = load_workload(EXAMPLES / "kubernetes-workload.yaml")
    places = _launches(scenario, workload)
    clouds = {p.cloud for p in places}
    assert clouds == {"kubernetes", "aws"}
    assert places[0].cloud == "kubernetes"
    assert {p.zone for p in places if p.cloud == "kubernetes"} == {"team-a", "default"}
    first = run_policy(scenario, workload, "corral").figures
    again = run_policy(scenario, workload, "corral").figures
    assert first == again and first["failed"] == 0
