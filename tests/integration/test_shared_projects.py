"""Two teams on one installation, written as the attacks of issue #47 (items 2 and 3): bob, a
member of team-b, tries to reach what team-a's partition and the admin's cloud identity give.

One installation (API, scheduling and provisioning workers) on the local cloud, the fake
Kubernetes API server the tests own (tests/fakes/k8s_api.py) and AWS (pools registered on it,
nothing launched there: no workload that would reach it is accepted). An admin registers the
pools; alice (team-a) and bob (team-b) are members.

- Item 2: a partition reserved by rule to ``project=teama``. Bob labels his workload
  ``project: teama``: refused (422 naming the label, and `corral launch` exits 2), nothing is
  stored. Without the label his workload is labelled ``project: teamb`` by the server and
  waits; alice's takes the partition.
- Item 3: the admin's pool templates set an instance profile (AWS) and a hostPath volume
  (Kubernetes): accepted. Bob's workload setting them on those pools is refused, naming the
  field; `corral launch` exits 2.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from corral.services.state.store import Store

from fakes.k8s_api import FakeKube, kubeconfig_for
from harness import CORRAL, System, wait_for

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOCAL_POOLS = FIXTURES / "localcloud" / "pools.yaml"
SEED_POOL_K8S = FIXTURES / "pools" / "seed-pool-kubernetes.yaml"
CONTEXT = "lab"
TEAM_POOL = "team-pool"  # local: one machine, team-a's by rule
AWS_POOL = "aws-pool"
K8S_POOL = "k8s-pool"
ADMIN_PROFILE = {"Arn": "arn:aws:iam::123456789012:instance-profile/corral-admin"}


def team_pool() -> dict[str, Any]:
    rule = {"selector": "project=teama", "priority": 5}
    return {
        "kind": "ANYSCALE_MANAGED",
        "machine_types": [
            {
                "machine_type": "cpu",
                "launch_templates": [{"instance_type": "cpu-2"}],
                "partitions": [{"name": "teama", "size": 1, "rules": [rule]}],
            }
        ],
    }


def aws_pool() -> dict[str, Any]:
    template = {
        "instance_type": "m5.2xlarge",
        "advanced_instance_config": {"IamInstanceProfile": ADMIN_PROFILE},
    }
    machine = {
        "machine_type": "cpu",
        "launch_templates": [template],
        "partitions": [{"name": "any", "size": 1}],
    }
    return {"kind": "ANYSCALE_MANAGED", "machine_types": [machine]}


def k8s_pool() -> dict[str, Any]:
    """The seed's Kubernetes pool with the host's root mounted by the admin's template."""
    pool: dict[str, Any] = yaml.safe_load(SEED_POOL_K8S.read_text())
    spec = pool["machine_types"][0]["launch_templates"][0]["advanced_instance_config"]["spec"]
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    return pool


def compute(pool: str, machine_type: str = "cpu", config: dict[str, Any] | None = None) -> Any:
    group: dict[str, Any] = {
        "instance_type": machine_type,
        "flags": {"cloud_deployment": {"machine_pool": pool}},
    }
    if config is not None:
        group["advanced_instance_config"] = config
    return {"worker_nodes": [group]}


class Teams:
    def __init__(self, system: System) -> None:
        self.system = system
        self.tokens: dict[str, str] = {}

    def http(self, who: str) -> httpx.Client:
        token = self.system.token if who == "admin" else self.tokens[who]
        return httpx.Client(
            base_url=self.system.api_url, timeout=60, headers={"Authorization": f"Bearer {token}"}
        )

    def post_task(self, who: str, task: dict[str, Any]) -> httpx.Response:
        with self.http(who) as c:
            return c.post("/v1/requests", json={"task": task})

    def launch(self, who: str, task: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
        path = tmp / f"{task['name']}.yaml"
        path.write_text(yaml.safe_dump(task))
        env = {
            **self.system.env,
            "CORRAL_API_URL": self.system.api_url,
            "CORRAL_API_TOKEN": self.tokens[who],
        }
        return subprocess.run(
            [CORRAL, "launch", "-d", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def apply(self, name: str, spec: dict[str, Any], cloud: str) -> httpx.Response:
        body = {
            "name": name,
            "kind": "machine_pool",
            "spec": spec,
            "file_name": f"{name}.yaml",
            "cloud": cloud,
        }
        with self.http("admin") as c:
            return c.post("/v1/pools", json=body)


@pytest.fixture(scope="module")
def teams(make_module_system: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    tmp = tmp_path_factory.mktemp("teams")
    with FakeKube() as kube:
        kube.add_node("node-a", cpu="4", memory="16Gi", labels={"corral.dev/pool": "ml"})
        env = {
            "CORRAL_CLOUDS": json.dumps(["local", "kubernetes", "aws"]),
            "CORRAL_KUBECONFIG": str(kubeconfig_for(kube.url, tmp / "kubeconfig", CONTEXT)),
            "CORRAL_KUBERNETES_CONTEXTS": json.dumps([CONTEXT]),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        system: System = make_module_system(
            LOCAL_POOLS, env=env, MIN_RUNTIME_S="1", POOL_REBALANCE_INTERVAL_S="0.5"
        )
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_beat()
        teams = Teams(system)
        with teams.http("admin") as c:
            for project in ("teama", "teamb"):
                assert c.post("/v1/projects", json={"name": project}).status_code == 201
            for name, project in (("alice", "teama"), ("bob", "teamb")):
                body = {"name": name, "role": "member", "projects": [project]}
                made = c.post("/v1/users", json=body)
                assert made.status_code == 201, made.text
                teams.tokens[name] = made.json()["token"]
        yield teams


def test_a_spoofed_project_label_is_refused_and_never_reaches_the_other_teams_partition(
    teams: Teams, tmp_path: Path
) -> None:
    applied = teams.apply(TEAM_POOL, team_pool(), "local")
    assert applied.status_code == 201, applied.text
    spoofed = {
        "name": "bob-as-teama",
        "labels": {"project": "teama"},
        "compute_config": compute(TEAM_POOL),
        "run": "sleep 60",
    }
    refused = teams.post_task("bob", spoofed)
    assert refused.status_code == 422, refused.text
    [issue] = refused.json()["detail"]["issues"]
    assert issue["field"] == "labels.project" and "'teamb'" in issue["message"]
    spoofed_user = {**spoofed, "labels": {"user": "alice"}}
    refused = teams.post_task("bob", spoofed_user)
    assert refused.status_code == 422 and "labels.user" in refused.text
    done = teams.launch("bob", spoofed, tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "labels.project" in done.stderr
    with teams.http("bob") as c:
        assert c.get("/v1/requests").json()["requests"] == []  # nothing was stored
    # Without the label, the server names his project: the rule for teama does not match.
    honest = teams.post_task("bob", {**spoofed, "name": "bob", "labels": {"team": "b"}})
    assert honest.status_code == 201, honest.text
    bob_id = honest.json()["id"]
    stored = Store(redis.Redis.from_url(teams.system.env["CORRAL_REDIS_URL"])).get_request(bob_id)
    assert stored is not None
    assert stored.labels == {"team": "b", "project": "teamb", "user": "bob"}
    assert stored.task["labels"] == stored.labels  # what the pool's scheduler reads
    alice = teams.post_task("alice", {**spoofed, "name": "alice", "labels": {}})
    assert alice.status_code == 201, alice.text
    alice_id = alice.json()["id"]
    system = teams.system
    system.wait_state(alice_id, {"RUNNING"}, timeout_s=90)
    why = system.get(f"/v1/requests/{bob_id}/why").json()
    assert system.request(bob_id)["state"] != "RUNNING"
    assert "no rule matches" in json.dumps(why), why
    for rid in (bob_id, alice_id):
        with teams.http("admin") as c:
            c.post(f"/v1/requests/{rid}/cancel")
    wait_for(
        lambda: all(
            system.request(r)["state"] in {"CANCELLED", "TERMINATED"} for r in (bob_id, alice_id)
        ),
        60,
        "both workloads ended",
    )


def test_a_members_instance_profile_and_host_path_are_refused_an_admins_template_sets_them(
    teams: Teams, tmp_path: Path
) -> None:
    # The admin's pool templates carry the instance profile and the host's root.
    for name, spec, cloud in ((AWS_POOL, aws_pool(), "aws"), (K8S_POOL, k8s_pool(), "kubernetes")):
        applied = teams.apply(name, spec, cloud)
        assert applied.status_code == 201, applied.text
    with teams.http("admin") as c:
        stored = c.get(f"/v1/pools/{K8S_POOL}").json()
    assert stored["cloud"] == "kubernetes"
    profile = {
        "name": "bob-profile",
        "compute_config": compute(AWS_POOL, config={"IamInstanceProfile": ADMIN_PROFILE}),
        "run": "aws s3 ls",
    }
    refused = teams.post_task("bob", profile)
    assert refused.status_code == 422, refused.text
    [issue] = refused.json()["detail"]["issues"]
    assert (
        issue["field"]
        == "compute_config.worker_nodes[0].advanced_instance_config.IamInstanceProfile"
    )
    assert "identity" in issue["message"]
    host = {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
    root = {
        "name": "bob-root",
        "compute_config": compute(K8S_POOL, "cpu-pod", host),
        "run": "ls /host",
    }
    refused = teams.post_task("bob", root)
    assert refused.status_code == 422, refused.text
    [issue] = refused.json()["detail"]["issues"]
    assert issue["field"].endswith("advanced_instance_config.spec.volumes[0].hostPath")
    secret = {"spec": {"volumes": [{"name": "s", "secret": {"secretName": "corral"}}]}}
    refused = teams.post_task(
        "bob", {**root, "compute_config": compute(K8S_POOL, "cpu-pod", secret)}
    )
    assert refused.status_code == 422 and "volumes[0].secret" in refused.text
    done = teams.launch("bob", root, tmp_path)
    assert done.returncode == 2 and "hostPath" in done.stderr, (done.stdout, done.stderr)
    # A task pinned to a cloud is checked there too.
    direct = {
        "name": "bob-direct",
        "resources": {"cloud": "aws", "instance_type": "m5.2xlarge"},
        "advanced_instance_config": {"MetadataOptions": {"HttpTokens": "optional"}},
        "run": "true",
    }
    refused = teams.post_task("bob", direct)
    assert refused.status_code == 422 and "advanced_instance_config.MetadataOptions" in refused.text
    with teams.http("bob") as c:
        names = {r["name"] for r in c.get("/v1/requests").json()["requests"]}
    assert not names & {"bob-profile", "bob-root", "bob-direct"}  # none was stored


def test_a_tasks_envs_may_not_steer_the_node_agent(teams: Teams) -> None:
    """Issue #47 item 7: CORRAL_* in a task's envs (the agent's readiness probe, a node's rank)
    are refused for everyone, naming the variable; nothing is stored."""
    task = {
        "name": "bob-probe",
        "resources": {"cloud": "local", "instance_type": "cpu-2"},
        "envs": {"CORRAL_READINESS_PROBE": '{"path": "file:///etc/passwd"}'},
        "run": "true",
    }
    for who in ("bob", "admin"):
        refused = teams.post_task(who, task)
        assert refused.status_code == 422, refused.text
        [issue] = refused.json()["detail"]["issues"]
        assert issue["field"] == "envs.CORRAL_READINESS_PROBE"
