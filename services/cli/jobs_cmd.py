"""``corral exec ID -- CMD`` (a command on a node, at once, through its agent), and a running
request's job queue: ``corral exec ID task.yaml``, ``corral queue ID`` and ``corral cancel ID
JOB...``, as SkyPilot's ``sky exec CLUSTER task.yaml``, ``sky queue`` and ``sky cancel``
(shared/jobs.py).

``exec`` with a task file queues the file's ``run`` (with its ``envs`` and ``secrets``, and the
``--env`` / ``--secret`` / ``--num-nodes`` flags merged over them as ``launch`` merges them) on
the request's first ``num_nodes`` nodes, behind what runs there; it follows the job's output
on the head and exits with the job's exit code (``--detach``: prints the job and returns).
As ``sky exec``, it syncs the task's local ``workdir`` (packed and uploaded as ``launch``
uploads it, for the request's project) and runs no ``setup`` and copies no ``file_mounts``:
those, and ``resources``, are noticed, not acted on. The job runs in its own copy of the
workdir on each node, ``~/sky_workdir-job-<N>`` (services/agent/job_files.py says why not in
``~/sky_workdir`` as SkyPilot does); a task without a workdir runs in the launch's.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from corral.services.cli.api_access import api_client, complete_request_id, fail
from corral.services.cli.output import (
    EXIT_INPUT,
    command_text,
    data_row,
    notice,
    out,
    print_json,
    print_list,
    write_output,
)
from corral.services.cli.overrides_opt import ENV_HELP, SECRET_HELP

JOB_FIELDS = ("name", "run", "envs", "secrets", "num_nodes", "workdir")
NOTICED = {
    "setup": "setup is not run by exec (as `sky exec`): the nodes keep the launch's",
    "workdir": "a git workdir is not cloned by exec: the job runs in the launch's workdir",
    "file_mounts": "file_mounts are not copied by exec: the nodes keep the launch's",
    "resources": "resources: the job runs on the request's nodes as they were launched",
}
REQUEST_ID = typer.Argument(..., help="The request's id.", autocompletion=complete_request_id)
JSON_OPT = typer.Option(False, "--json", help="Machine-readable output.")


EXEC_REQUEST_ID = typer.Argument(..., help="A request id.", autocompletion=complete_request_id)


def register(app: typer.Typer) -> None:
    """Add ``corral exec``, ``corral queue`` and ``corral cancel`` to ``app``."""
    app.command(
        "exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )(exec_)
    app.command("queue")(queue)
    app.command("cancel")(cancel)


def exec_(
    ctx: typer.Context,
    request_id: str = EXEC_REQUEST_ID,
    node: int = typer.Option(0, "--node", min=0, help="The node's index (0: the head)."),
    detach: bool = typer.Option(
        False, "--detach", help="A task file: print the queued job and return (also -d)."
    ),
    name: str | None = typer.Option(None, "--name", help="A task file: the job's name."),
    env: list[str] | None = typer.Option(None, "--env", help="A task file: " + ENV_HELP),
    secret: list[str] | None = typer.Option(None, "--secret", help="A task file: " + SECRET_HELP),
    num_nodes: int | None = typer.Option(
        None, "--num-nodes", min=1, help="A task file: run it on the first N nodes."
    ),
    as_json: bool = typer.Option(False, "--json", help="A task file: the job as JSON."),
) -> None:
    """Run a command on a running request's node through its agent, after `--`: its output
    as it comes, and its exit code as this command's (`corral exec ID -- nvidia-smi`). Given
    a task file (`corral exec ID task.yaml`), queue its run as a job on the request's nodes,
    behind what runs there (as `sky exec`): see `corral queue` and `corral cancel`."""
    command = list(ctx.args)
    if not command:
        fail("expected a command after --, or a task file: corral exec ID -- CMD",
             EXIT_INPUT, as_json)  # fmt: skip
    if is_task_file(command[0]):
        rest = [a for a in command[1:] if a != "-d"]
        if rest:
            fail(f"unexpected {' '.join(rest)!r} after the task file", EXIT_INPUT, as_json)
        file = Path(command[0])
        job = job_from_file(file, env, secret, num_nodes, name, as_json)
        exec_task(request_id, file, job, detach or len(command) > 1, as_json)
        return
    if env or secret or num_nodes or name or detach or as_json:
        said = "--env, --secret, --num-nodes, --name, --detach and --json go with a task file"
        fail(f"{said} (corral exec ID task.yaml); a command takes its own", EXIT_INPUT, as_json)
    with api_client(False) as client:
        code = write_output(client.exec(request_id, command_text(command), node=node))
    raise typer.Exit(code)


def is_task_file(arg: str) -> bool:
    """The argument names an existing YAML file: a task to queue (SkyPilot's entrypoint
    rule), else it is a command."""
    path = Path(arg)
    return path.suffix.lower() in (".yaml", ".yml") and path.is_file()


def job_from_file(
    file: Path, env: list[str] | None, secret: list[str] | None, num_nodes: int | None,
    name: str | None, as_json: bool,
) -> dict[str, Any]:  # fmt: skip
    """The job to queue: the task file read and checked (exit 2 naming FILE:LINE on a
    mistake), the flags merged over it; the fields exec does not act on noticed."""
    from corral.services.cli.launch_cmd import _task_for_api, _with_flags
    from corral.services.cli.overrides_opt import LaunchFlags

    flags = LaunchFlags(env=env, secret=secret, num_nodes=num_nodes)
    data = _with_flags(_task_for_api(file, as_json), file, flags, as_json)
    for key in data:
        if key not in JOB_FIELDS and data[key] not in (None, {}, []):
            notice(f"{file}: {NOTICED.get(key, f'{key}: not used by exec (a launch field)')}")
    workdir = data.get("workdir")
    if workdir not in (None, "", {}) and not isinstance(workdir, str):
        notice(f"{file}: {NOTICED['workdir']}")
    run = data.get("run")
    if not isinstance(run, str) or not run.strip():
        fail(f"{file}: run: exec queues the task's run, and this task has none", EXIT_INPUT,
             as_json)  # fmt: skip
    envs = {str(k): str(v) for k, v in (data.get("envs") or {}).items() if v is not None}
    secrets = data.get("secrets") or {}
    if isinstance(secrets, list):
        secrets = dict.fromkeys(secrets)
    for key, value in secrets.items():
        if value is None:
            fail(f"{file}: secrets.{key}: no value; give it in the file or as --secret {key}",
                 EXIT_INPUT, as_json)  # fmt: skip
        envs[str(key)] = str(value)
    return {
        "name": name or data.get("name"),
        "run": run,
        "envs": envs,
        "num_nodes": int(data.get("num_nodes") or 1),
        **({"workdir": workdir} if isinstance(workdir, str) and workdir else {}),
    }


def exec_task(
    request_id: str, file: Path, job: dict[str, Any], detach: bool, as_json: bool
) -> None:
    """Queue the job; follow its head's output to its end unless detached."""
    with api_client(as_json, source=str(file)) as client:
        workdir = job.pop("workdir", None)
        if workdir is not None:
            job["bundle"] = _upload_workdir(client, request_id, file, workdir)
        got = client.submit_job(request_id, job)
        if as_json and detach:
            print_json(got)
            return
        if not as_json:
            said = "queued" if got["state"] == "PENDING" else str(got["state"]).lower()
            out.print(f"job {got['id']} on request {request_id}: {said}", markup=False)
        if detach:
            out.print(f"follow it with `corral queue {request_id}`", markup=False)
            return
        write_output(client.follow_exec(got["execs"][0]), shown=not as_json)
        final = _ended(client, request_id, int(got["id"]))
    if as_json:
        print_json(final)
    elif final["state"] != "SUCCEEDED":
        out.print(f"job {final['id']}: {final['state']}" + _code(final), markup=False)
    code = final.get("exit_code")
    raise typer.Exit(code if isinstance(code, int) and code else _state_code(final["state"]))


def _upload_workdir(client: Any, request_id: str, file: Path, workdir: str) -> Any:
    """The task's workdir packed and uploaded as launch does it (read from the current
    folder, at most CORRAL_BUNDLE_MAX_BYTES, once per content), for the request's project:
    the job's bundle. A workdir that cannot be packed exits 2 naming the file and field."""
    from corral.services.cli.launch_cmd import _bundle_max_bytes

    project = client.status(request_id).project
    task = client.with_files(
        {"workdir": workdir}, source=str(file), max_bytes=_bundle_max_bytes(), project=project
    )
    return task["bundle"]


def _ended(client: Any, request_id: str, number: int, wait_s: float = 30.0) -> dict[str, Any]:
    """The job once every node's command has ended (the head's is over already)."""
    deadline = time.monotonic() + wait_s
    while True:
        job = next(j for j in client.jobs(request_id) if j["id"] == number)
        if job["state"] not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
            return dict(job)
        time.sleep(0.25)


def _state_code(state: str) -> int:
    return {"SUCCEEDED": 0, "PENDING": 3, "RUNNING": 3}.get(state, 1)


def _code(job: dict[str, Any]) -> str:
    return "" if job.get("exit_code") is None else f" ({job['exit_code']})"


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def _duration(job: dict[str, Any]) -> str:
    start, end = job.get("started_at"), job.get("ended_at")
    if start is None:
        return "-"
    seconds = (end if end is not None else time.time()) - start
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def queue(request_id: str = REQUEST_ID, as_json: bool = JSON_OPT) -> None:
    """A request's job queue, as `sky queue`: job 1 is the launch's run, then the jobs
    `corral exec ID task.yaml` queued, each with its state and exit code."""
    with api_client(as_json) as client:
        jobs = client.jobs(request_id)
    if as_json:
        print_list("jobs", jobs, request_id=request_id)
        return
    print_queue(request_id, jobs)


def print_queue(request_id: str, jobs: list[dict[str, Any]]) -> None:
    """The queue as a table; names and reasons printed as written (never read as markup)."""
    from corral.services.cli.requests_cmd import _show, _table

    if not jobs:
        out.print(f"request {request_id} has no jobs (a service's nodes run none yet)",
                  markup=False)  # fmt: skip
        return
    table = _table("ID", "NAME", "SUBMITTED", "STARTED", "DURATION", "STATE", "EXIT")
    for job in jobs:
        code = job.get("exit_code")
        data_row(
            table, str(job["id"]), job.get("name") or "-", _when(job["submitted_at"]),
            _when(job.get("started_at")), _duration(job), job["state"],
            "-" if code is None else str(code),
        )  # fmt: skip
    _show(table)


def cancel(
    request_id: str = REQUEST_ID,
    job_ids: list[int] | None = typer.Argument(None, help="Job numbers (corral queue ID)."),
    every: bool = typer.Option(False, "--all", "-a", help="Every job that has not ended."),
    as_json: bool = JSON_OPT,
) -> None:
    """Cancel jobs of a request, as `sky cancel`: a pending one never runs, a running one's
    processes are killed on every node (SIGTERM, then SIGKILL). Job 1 is the launch's run:
    cancelling it ends the run; the jobs queued behind it still run."""
    if bool(job_ids) == every:
        fail("give job numbers, or --all (not both)", EXIT_INPUT, as_json)
    with api_client(as_json) as client:
        got = client.cancel_jobs(request_id, list(job_ids or []), every=every)
    if as_json:
        print_json(got)
    else:
        for job in got["cancelled"]:
            out.print(f"job {job['id']} of request {request_id}: CANCELLED", markup=False)
        for item in got["not_cancelled"]:
            notice(f"job {item['id']}: {item['reason']}")
        if every and not got["cancelled"] and not got["not_cancelled"]:
            out.print(f"request {request_id} has no job to cancel", markup=False)
    if got["not_cancelled"] and not got["cancelled"]:
        raise typer.Exit(1)
