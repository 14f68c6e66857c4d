"""Issue #28's CLI habits against a running system (the ``demo`` fixture of
tests/integration/conftest.py: the real API, workers and beat on the packaged local cloud):
one JSON envelope for every list, contexts in <home>/config.yaml, `why` of a direct request,
credential notices only for clouds a task could use, an impossible request naming the clouds
left out. The paths that need no system are in tests/unit/test_cli_new_user.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from corral.services.cli.main import app
from corral.services.providers.registry import credentials_hint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CORRAL = str(Path(sys.executable).parent / "corral")

# Every command with --json that prints a list, with the list's kind and the arguments that
# make it list something. The envelope: {"<kind>": [...], "count": N} (plus what the list is
# about, e.g. the accelerator asked for).
LISTS: dict[str, tuple[str, list[str]]] = {
    "status": ("requests", []),
    "instances": ("instances", []),
    "pools list": ("pools", []),
    "cluster list": ("clusters", []),
    "show-gpus": ("accelerators", []),
    "plan": ("candidates", [str(REPO / "examples" / "workload" / "train-a100.yaml")]),
    "validate": ("files", [str(REPO / "examples" / "workload" / "hello-job.yaml")]),
    "users list": ("users", []),  # the envelope test adds a project and a user first
    "projects list": ("projects", []),
    "cost-report": ("requests", []),  # with its totals beside the list
    "check": ("clouds", []),
    "queue": ("jobs", ["{hello-job}"]),  # a request's id, from the demo
}
# The other commands with --json print one document, not a list (or stream lines); a new
# command with --json must be put in one of the two tables.
NOT_LISTS = {
    # down prints {"requests": [...], "count": N} too, but taking things down is not run here.
    "launch", "logs", "terminate", "down", "stop", "autostop", "start", "why", "version",
    "simulate", "run api", "exec", "cancel",
    "pools apply", "pools delete", "pools resolve", "pools route", "config merge", "config get",
    "cluster up", "cluster down", "cluster status", "cluster demand", "autoscale explain",
    "users add", "users revoke", "projects add", "projects quota",
    "catalog update", "catalog reset",
}  # fmt: skip


def _json_commands(group: Any, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(cmd, "commands"):  # a group (typer may carry its own click)
            found |= _json_commands(cmd, path + " ")
        elif any("--json" in getattr(p, "opts", ()) for p in cmd.params):
            found.add(path)
    return found


def test_every_json_command_is_known_as_a_list_or_not() -> None:
    commands = _json_commands(typer.main.get_group(app))
    unknown = commands - set(LISTS) - NOT_LISTS
    assert not unknown, f"classify these --json commands in LISTS or NOT_LISTS: {unknown}"
    assert set(LISTS) <= commands


def test_every_json_list_prints_one_envelope(demo: Any) -> None:
    if demo.system.cli("projects", "add", "habits").returncode == 0:  # once per module
        assert demo.system.cli("users", "add", "habits", "--project", "habits").returncode == 0
    for command, (kind, spelled) in LISTS.items():
        args = [demo.ids[a[1:-1]] if a.startswith("{") else a for a in spelled]
        done = demo.system.cli(*command.split(), *args, "--json")
        assert done.returncode == 0, (command, done.stderr)
        doc = json.loads(done.stdout)
        lists = [k for k, v in doc.items() if isinstance(v, list) and k != "reasons"]
        assert lists == [kind], (command, sorted(doc))
        assert doc["count"] == len(doc[kind]) > 0, command


def test_a_context_names_the_api_and_its_token_file(demo: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = tmp_path / "token"
    token.write_text(demo.system.token + "\n")
    env = {k: v for k, v in demo.system.env.items() if not k.startswith("CORRAL_") or k == "PATH"}
    env["CORRAL_HOME"] = str(home)

    def corral(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CORRAL, *args], capture_output=True, text=True, env=env, timeout=60)

    assert corral("status", "--json").returncode == 2  # no address anywhere yet
    assert corral("config", "set", "contexts.demo.api_url", demo.system.api_url).returncode == 0
    assert corral("config", "set", "contexts.demo.token_file", str(token)).returncode == 0
    assert corral("config", "set", "contexts.other.api_url", "http://127.0.0.1:9").returncode == 0
    assert corral("config", "use-context", "demo").returncode == 0
    shown = corral("status", "--json")
    assert shown.returncode == 0, shown.stderr
    assert demo.ids["hello-job"] in {r["id"] for r in json.loads(shown.stdout)["requests"]}
    assert corral("config", "use-context", "other").returncode == 0
    assert corral("status").returncode == 1  # nothing answers there


def test_why_of_a_direct_request_names_each_try_and_its_reason(demo: Any) -> None:
    rid = demo.ids["train-a100"]
    found = json.loads(demo.system.cli("why", rid, "--json").stdout)
    assert [t["outcome"] for t in found["tried"]][:2] == ["capacity", "quota"]
    text = demo.system.cli("why", rid).stdout
    assert "tried 1: local/lab-east-a gpu-a100-8 on_demand: capacity: " in text
    assert "tried 2: local/lab-east-b gpu-a100-8 on_demand: quota: " in text


def test_a_local_task_hears_nothing_of_aws_or_gcp_credentials(demo: Any) -> None:
    done = demo.system.cli(
        "launch", str(REPO / "examples" / "workload" / "hello-job.yaml"), "--wait"
    )
    assert done.returncode == 0, done.stderr
    assert "left out" not in done.stdout + done.stderr
    assert "credentials" not in done.stdout + done.stderr


def test_an_impossible_request_names_the_clouds_left_out_and_why(demo: Any, tmp_path: Path) -> None:
    if credentials_hint("aws") or credentials_hint("gcp"):
        pytest.fail("this machine has cloud credentials; the case needs a machine without")
    task = tmp_path / "h100.yaml"
    task.write_text("name: h100\nresources: {accelerators: H100:8}\nrun: echo\n")
    done = demo.system.cli("launch", str(task), "--wait")
    assert done.returncode == 2  # refused at submit: nothing here could ever run it
    assert "impossible: H100:8: no offering on local" in done.stderr
    assert "impossible: aws, gcp left out: no credentials found" in done.stderr
    # The same launch on a cloud left out is told so as it starts.
    gpu = tmp_path / "a100.yaml"
    gpu.write_text("name: a100\nresources: {accelerators: A100:8}\nrun: echo ok\n")
    done = demo.system.cli("launch", str(gpu), "--wait", "--timeout", "60", "--fail-fast")
    assert "aws is left out of the chain: no credentials found" in done.stdout
    assert "gcp is left out of the chain: no credentials found" in done.stdout
    # A task pinned to a cloud without credentials is told why, not only "not enabled here".
    pinned = tmp_path / "on-aws.yaml"
    pinned.write_text("name: on-aws\nresources: {infra: aws, accelerators: A100:8}\nrun: echo\n")
    done = demo.system.cli("launch", str(pinned), "--wait")
    assert done.returncode == 2
    assert "impossible: aws left out: no credentials found" in done.stderr


SKY_FILE = """\
name: flags
resources:
  accelerators: A100:8
envs:
  MODEL_NAME: from-the-file
secrets:
  HF_TOKEN: null
run: |
  [ "$HF_TOKEN" = "hf-not-a-real-token" ] && token=ok || token=wrong
  echo "model=$MODEL_NAME token=$token nodes=$CORRAL_NUM_NODES"
"""
FLAGS = ["--gpus", "L4:1", "--env", "MODEL_NAME=llama", "--secret", "HF_TOKEN", "--num-nodes", "2"]


def test_skypilot_launch_flags_plan_and_launch_merged(demo: Any, tmp_path: Path) -> None:
    """SkyPilot's documented usage of its own examples (`--gpus L4:1 --secret HF_TOKEN --env
    MODEL_NAME=...`), on the local cloud: plan shows the merged task (the secret's value never),
    and the launch runs it on two L4 nodes with the env and the secret."""
    from harness import run_cli

    task = tmp_path / "flags.yaml"
    task.write_text(SKY_FILE)
    env = {**demo.system.env, "CORRAL_API_URL": demo.system.api_url}
    with_secret = {**env, "HF_TOKEN": "hf-not-a-real-token"}

    planned = run_cli(["plan", str(task), *FLAGS], with_secret, 60)
    assert planned.returncode == 0, planned.stderr
    said = "With --env MODEL_NAME=llama --secret HF_TOKEN=<hidden> --gpus L4:1 --num-nodes 2:"
    assert said in planned.stdout
    assert "num_nodes: 2" in planned.stdout and "accelerators L4:1" in planned.stdout
    assert "gpu-l4-1" in planned.stdout and "gpu-a100-8" not in planned.stdout
    assert "hf-not-a-real-token" not in planned.stdout + planned.stderr
    as_json = json.loads(run_cli(["plan", str(task), *FLAGS, "--json"], with_secret, 60).stdout)
    assert as_json["task"]["secrets"] == {"HF_TOKEN": "<hidden>"}
    assert as_json["task"]["num_nodes"] == 2 and as_json["count"] == len(as_json["candidates"])

    dry = run_cli(["launch", str(task), *FLAGS, "--dryrun"], with_secret, 60)
    assert dry.returncode == 0 and "dry run: nothing launched" in dry.stdout, dry.stderr

    # The secret named without a value, from a shell that does not have it: exit 2, by name.
    missing = run_cli(["launch", str(task), *FLAGS], env, 60)
    assert missing.returncode == 2
    assert "--secret HF_TOKEN: HF_TOKEN is not set" in missing.stderr
    unset = run_cli(["launch", str(task), "--gpus", "L4:1"], env, 60)
    assert unset.returncode == 2 and "secrets.HF_TOKEN: no value given" in unset.stderr

    launched = run_cli(["launch", str(task), *FLAGS, "-y"], with_secret, 180)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert launched.stdout.count("model=llama token=ok nodes=2") == 2, launched.stdout
    assert "hf-not-a-real-token" not in launched.stdout + launched.stderr
    rid = launched.stdout.splitlines()[0].strip()
    shown = json.loads(demo.system.cli("status", rid, "--json").stdout)
    assert {i["instance_type"] for i in shown["instances"]} == {"gpu-l4-1"}
    assert len(shown["instances"]) == 2


def test_status_ip_and_endpoint_print_one_answer_for_scripts(demo: Any, tmp_path: Path) -> None:
    """SkyPilot's `sky status --ip` / `--endpoint PORT`: the head's address, a port's endpoint."""
    task = tmp_path / "svc.yaml"
    task.write_text(
        "name: ports\nworkload_type: service\n"
        "resources: {cloud: local, instance_type: cpu-2, ports: [18080, 18081]}\n"
    )
    launched = demo.system.cli("launch", str(task), "--wait")
    assert launched.returncode == 0, launched.stderr
    rid = launched.stdout.splitlines()[0].strip()
    try:
        ip = demo.system.cli("status", rid, "--ip")
        assert ip.returncode == 0 and ip.stdout.strip() == "127.0.0.1", ip.stderr
        one = demo.system.cli("status", rid, "--endpoint", "18081")
        assert one.returncode == 0 and one.stdout.strip().endswith(":18081"), one.stderr
        every = demo.system.cli("status", rid, "--endpoints").stdout.split()
        assert every == ["127.0.0.1:18080-18081"]  # a range of ports, as the API shows it
        none = demo.system.cli("status", rid, "--endpoint", "9")
        assert none.returncode == 1 and "no endpoint for port 9" in none.stderr
        both = demo.system.cli("status", rid, "--ip", "--endpoints")
        assert both.returncode == 2
        as_json = json.loads(demo.system.cli("status", rid, "--ip", "--json").stdout)
        assert as_json == {"id": rid, "ip": "127.0.0.1"}
    finally:
        demo.system.cli("terminate", rid)


def test_cost_report_sums_by_user_project_and_cloud_and_a_member_sees_their_own(
    demo: Any, tmp_path: Path
) -> None:
    """SkyPilot's `sky cost-report`: each request's spend over its runs, totals by user,
    project and cloud; a member of another project sees none of it."""
    from harness import run_cli

    report = json.loads(demo.system.cli("cost-report", "--json").stdout)
    lines = {line["id"]: line for line in report["requests"]}
    hello = lines[demo.ids["hello-job"]]
    assert hello["runs"] == 1 and hello["clouds"] == ["local"] and hello["cost_usd"] > 0
    assert report["count"] == len(report["requests"]) >= 3
    priced = sum(line["cost_usd"] or 0 for line in report["requests"])
    assert report["totals"]["total_usd"] == pytest.approx(priced, rel=1e-3, abs=1e-5)
    assert report["totals"]["by_cloud"]["local"] == pytest.approx(priced, rel=1e-3, abs=1e-5)
    table = demo.system.cli("cost-report")
    assert table.returncode == 0 and "By cloud" in table.stdout and "Total: $" in table.stdout

    demo.system.cli("projects", "add", "costs-other")
    token_file = tmp_path / "member-token"
    added = demo.system.cli(
        "users", "add", "costs-member", "--project", "costs-other", "--token-file", str(token_file)
    )
    assert added.returncode == 0, added.stderr
    member = {
        **demo.system.env,
        "CORRAL_API_URL": demo.system.api_url,
        "CORRAL_API_TOKEN": token_file.read_text().strip(),
    }
    theirs = json.loads(run_cli(["cost-report", "--json"], member, 60).stdout)
    assert theirs["count"] == 0 and theirs["totals"]["total_usd"] == 0


def test_autostop_set_on_a_running_service_and_cancelled(demo: Any, tmp_path: Path) -> None:
    """SkyPilot's `sky autostop ID -i N [--down] | --cancel` on what already runs: idle time
    counts from the command; the local cloud cannot stop a machine, so it is terminated."""
    import time

    task = tmp_path / "idle.yaml"
    task.write_text(
        "name: idle\nworkload_type: service\nresources: {cloud: local, instance_type: cpu-2}\n"
    )
    ids = []
    for _ in range(2):
        launched = demo.system.cli("launch", str(task), "--wait")
        assert launched.returncode == 0, launched.stderr
        ids.append(launched.stdout.splitlines()[0].strip())
    going, kept = ids
    try:
        done = demo.system.cli("autostop", kept, "-i", "0.1")  # 6 s
        assert done.returncode == 0 and "stopped after 0.1 idle minutes" in done.stdout
        cancelled = demo.system.cli("autostop", kept, "--cancel")
        assert cancelled.returncode == 0 and "autostop cancelled" in cancelled.stdout

        done = demo.system.cli("autostop", going, "-i", "0.02", "--down")  # 1.2 s
        assert done.returncode == 0, done.stderr
        demo.system.wait_state(going, {"TERMINATED"}, 60)
        why = demo.system.cli("status", going, "--json")
        assert json.loads(why.stdout)["state"] == "TERMINATED"
        time.sleep(8)  # past the cancelled policy's 6 s
        assert json.loads(demo.system.cli("status", kept, "--json").stdout)["state"] == "RUNNING"

        ended = demo.system.cli("autostop", going, "-i", "1")
        assert ended.returncode == 2 and "has ended (TERMINATED)" in ended.stderr
        both = demo.system.cli("autostop", kept, "-i", "1", "--cancel")
        assert both.returncode == 2
    finally:
        demo.system.cli("terminate", kept)


def test_exec_queue_and_cancel_keep_the_habits(demo: Any, tmp_path: Path) -> None:
    """Issue #49's commands: exit 2 for the input's mistakes (a task file's FILE:LINE, an
    unknown request or job, flags that go with a task file given with a command), the one
    --json envelope for queue, one document for exec and cancel."""
    hello = demo.ids["hello-job"]
    queue = json.loads(demo.system.cli("queue", hello, "--json").stdout)
    assert queue["count"] == 1 and queue["jobs"][0]["id"] == 1
    assert queue["jobs"][0]["state"] == "SUCCEEDED" and queue["jobs"][0]["exit_code"] == 0
    table = demo.system.cli("queue", hello)
    assert table.returncode == 0 and "SUCCEEDED" in table.stdout
    assert demo.system.cli("queue", "r-nope").returncode == 2

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nrun: echo hi\nnum_nodez: 2\n")
    wrong = demo.system.cli("exec", demo.ids["web-service"], str(bad))
    assert wrong.returncode == 2 and f"{bad}:3" in wrong.stderr, wrong.stderr
    assert "Traceback" not in wrong.stderr
    no_run = tmp_path / "no-run.yaml"
    no_run.write_text("name: quiet\n")
    said = demo.system.cli("exec", demo.ids["web-service"], str(no_run), "--json")
    assert said.returncode == 2 and "run: exec queues the task's run" in said.stderr
    ended = demo.system.cli("exec", hello, str(no_run.with_name("ok.yaml")))
    assert ended.returncode != 0  # not a file: a command, on a request that has ended
    flags = demo.system.cli("exec", hello, "--env", "A=1", "--", "true")
    assert flags.returncode == 2 and "go with a task file" in flags.stderr

    assert demo.system.cli("cancel", hello).returncode == 2  # no job, no --all
    assert demo.system.cli("cancel", hello, "1", "--all").returncode == 2
    refused = demo.system.cli("cancel", hello, "1", "--json")
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["not_cancelled"][0]["id"] == 1
    assert demo.system.cli("cancel", hello, "7").returncode == 2

    # A service's nodes run exec'd jobs too: numbered from 1 (it has no run of its own).
    job = tmp_path / "on-service.yaml"
    job.write_text("name: on-service\nrun: echo served; exit 4\n")
    ran = demo.system.cli("exec", demo.ids["web-service"], str(job))
    assert ran.returncode == 4 and "served" in ran.stdout, ran.stderr
    doc = json.loads(demo.system.cli("queue", demo.ids["web-service"], "--json").stdout)
    assert [(j["id"], j["state"], j["exit_code"]) for j in doc["jobs"]][-1][1:] == ("FAILED", 4)
