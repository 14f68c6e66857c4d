"""Ray's cluster launcher on a node, as a plan: which commands run, in which order, with which
variables, in which container; and the bash script that carries the plan out on the machine.

Ray's launcher (``ray up``; its ``NodeUpdater``) brings a node up in this order, and so does
the script written here:

1. ``initialization_commands`` (on the machine itself, never in the container);
2. with a ``docker`` section: the image pulled (``pull_before_run``) and the container started
   (``run_options``; the host's network, as Ray starts it);
3. ``file_mounts`` and ``cluster_synced_files`` copied into place (an archive carried in the
   script, its sha256 checked before anything is unpacked);
4. the setup commands: ``setup_commands`` then ``head_setup_commands`` on the head; on a
   worker, its node type's own ``worker_setup_commands`` alone when it has them (they replace
   both top-level lists, as Ray's schema says), else ``setup_commands`` then the top-level
   ``worker_setup_commands``;
5. ``head_start_ray_commands`` on the head, ``worker_start_ray_commands`` on a worker.

Every command runs in a shell of its own (Ray runs each over a fresh SSH session) with Ray's
launcher variables set: ``RAY_HEAD_IP``, ``RAY_CLOUD_INSTANCE_ID`` (Corral's node id: how the
head's report maps a Ray node to a Corral machine), ``RAY_NODE_TYPE_NAME``,
``RAY_OVERRIDE_RESOURCES`` and ``RAY_OVERRIDE_LABELS`` (the node type's ``resources`` and
``labels``). Each command is announced in the node's log; the first that fails stops the script
with its exit code after a line naming it (:data:`FAILED_MARK`), which ``cluster status`` shows.

Pure: the script is text, written from the cluster file and the values handed in.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, Field

from ..config.cluster import Cluster
from .resources import docker_settings, initialization_commands, node_type_entries, setup_commands

# The label every cluster node's launch request carries (its value: the cluster's name).
CLUSTER_LABEL = "corral-cluster"
MARK = "[corral-launcher]"
FAILED_MARK = f"{MARK} FAILED"
CONTAINER_DEFAULT = "ray_container"  # Ray's default container_name
MAX_MOUNTS_BYTES = 1024 * 1024  # the file mounts' archive (gzip), carried in the node's script


class Mounts(BaseModel):
    """``file_mounts`` and ``cluster_synced_files`` packed where ``cluster up`` ran: a gzip'd
    tar whose members ``m0``, ``m1``, ... go to ``targets[0]``, ``targets[1]``, ..."""

    archive_b64: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    targets: list[str]
    size_bytes: int = Field(ge=0, le=MAX_MOUNTS_BYTES)


class NodeLaunch(BaseModel):
    """What one node runs, phase by phase, and in which container (``docker`` empty: none)."""

    node_type: str
    head: bool
    initialization: list[str]
    setup: list[str]
    start_ray: list[str]
    docker: dict[str, Any]
    env: dict[str, str]


def runs_ray(cluster: Cluster) -> bool:
    """Whether the file starts Ray (it has start commands): its nodes are Ray nodes, whose
    idleness and demand Ray reports, and whose workers wait for the head's address."""
    return bool(cluster.head_start_ray_commands or cluster.worker_start_ray_commands)


def launcher_env(
    cluster: Cluster, node_type: str, *, head: bool, node_id: str, head_ip: str | None
) -> dict[str, str]:
    """Ray's launcher variables for one node's commands."""
    spec = next((nt for name, nt, _path in node_type_entries(cluster) if name == node_type), None)
    env = {"RAY_CLOUD_INSTANCE_ID": node_id, "RAY_NODE_TYPE_NAME": node_type}
    if head_ip:
        env["RAY_HEAD_IP"] = head_ip
    if spec is not None and spec.resources is not None:
        env["RAY_OVERRIDE_RESOURCES"] = json.dumps(spec.resources, sort_keys=True)
    if spec is not None and spec.labels:
        env["RAY_OVERRIDE_LABELS"] = json.dumps(spec.labels, sort_keys=True)
    return env


# Ray's examples start the head with ``--autoscaling-config=~/ray_bootstrap_config.yaml``, a file
# Ray's launcher writes so that the head runs Ray's own autoscaler. Corral is the cluster's
# autoscaler: the flag is dropped (the head's monitor then only reports, as with no config).
_AUTOSCALING_CONFIG = re.compile(r"\s+--autoscaling-config(?:=|\s+)\S+")


def without_ray_autoscaler(command: str) -> str:
    """A head start command without ``--autoscaling-config`` (unchanged when it has none)."""
    return _AUTOSCALING_CONFIG.sub("", command)


def drops_ray_autoscaler(cluster: Cluster) -> bool:
    """Whether the head's start commands name Ray's autoscaling config (dropped at launch)."""
    return any(without_ray_autoscaler(c) != c for c in cluster.head_start_ray_commands or [])


def node_launch(
    cluster: Cluster, node_type: str, *, head: bool, node_id: str, head_ip: str | None
) -> NodeLaunch:
    """The plan of one node (KeyError for a node type the file lacks)."""
    start = cluster.head_start_ray_commands if head else cluster.worker_start_ray_commands
    start_ray = [without_ray_autoscaler(c) for c in start or []] if head else list(start or [])
    return NodeLaunch(
        node_type=node_type,
        head=head,
        initialization=initialization_commands(cluster, node_type),
        setup=setup_commands(cluster, node_type, head=head),
        start_ray=start_ray,
        docker=docker_settings(cluster, node_type, head=head),
        env=launcher_env(cluster, node_type, head=head, node_id=node_id, head_ip=head_ip),
    )


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def launcher_script(plan: NodeLaunch, mounts: Mounts | None = None) -> str | None:
    """The bash script that brings the node up (None when there is nothing to run)."""
    if not (plan.initialization or plan.setup or plan.start_ray or mounts or plan.docker):
        return None
    q = shlex.quote
    lines = [
        f"# Written by Corral: Ray's launcher steps for a {'head' if plan.head else 'worker'} "
        f"of type {plan.node_type}",
        *(f"export {k}={q(v)}" for k, v in sorted(plan.env.items())),
        "_corral_container=",
        "_corral_fail() {",
        f'  echo "{FAILED_MARK} $1 command $2 exited $3: $4" >&2',
        '  exit "$3"',
        "}",
        "_corral_step() {",
        # The time (epoch s) goes in the line too: what the node's steps took is read back.
        f'  echo "{MARK} $1 $2 at $(date +%s.%N): $3" >&2',
        '  if [ -n "$_corral_container" ] && [ "$1" != initialization ]; then',
        "    docker exec "
        + " ".join(f"-e {k}" for k in sorted(plan.env))
        + ' "$_corral_container" '
        'bash -c "$3"',
        "  else",
        '    bash -c "$3"',
        "  fi",
        "  _corral_code=$?",
        '  [ "$_corral_code" -eq 0 ] || _corral_fail "$1" "$2" "$_corral_code" "$3"',
        "}",
    ]
    lines += _steps("initialization", plan.initialization)
    if plan.docker:
        lines += _docker_lines(plan)
    if mounts is not None:
        lines += _mount_lines(mounts, bool(plan.docker))
    lines += _steps("setup", plan.setup)
    lines += _steps("start_ray", plan.start_ray)
    lines.append(f'echo "{MARK} node up at $(date +%s.%N)" >&2')
    return "\n".join(lines) + "\n"


def _steps(phase: str, commands: list[str]) -> list[str]:
    return [f"_corral_step {phase} {i + 1} {shlex.quote(c)}" for i, c in enumerate(commands)]


def _docker_lines(plan: NodeLaunch) -> list[str]:
    """Start the node's container (Ray's way: detached, the host's network, a long-lived
    shell); a machine without docker fails here, never silently runs on the host."""
    q = shlex.quote
    docker = plan.docker
    image = str(docker["image"])
    name = _SAFE_NAME.sub("-", str(docker.get("container_name") or CONTAINER_DEFAULT))
    name = f"{name}-{_SAFE_NAME.sub('-', plan.env['RAY_CLOUD_INSTANCE_ID'])}"
    options = " ".join(q(o) for o in docker.get("run_options", []))
    out = [
        "if ! command -v docker >/dev/null 2>&1; then",
        f'  echo "{FAILED_MARK} docker: the file has a docker section (image {image}) '
        'but this machine has no docker" >&2',
        "  exit 127",
        "fi",
    ]
    if docker.get("pull_before_run", True):
        out.append(f"_corral_step docker pull {q('docker pull ' + q(image))}")
    run = f"docker run -d --name {name} --network host {options} {q(image)} sleep infinity"
    out.append(f"_corral_step docker run {q(' '.join(run.split()))}")
    out.append(f"_corral_container={name}")
    return out


def _mount_lines(mounts: Mounts, docker: bool) -> list[str]:
    """Unpack the archive after checking its sha256; copy each member to its target (``~``
    is the node's home), and into the container too when there is one."""
    q = shlex.quote
    out = [
        f'echo "{MARK} file_mounts: {len(mounts.targets)} paths, {mounts.size_bytes} bytes" >&2',
        "_corral_dir=$(mktemp -d)",
        f"base64 -d > \"$_corral_dir/a.tgz\" <<'CORRAL_MOUNTS_END'\n{mounts.archive_b64}\n"
        "CORRAL_MOUNTS_END",
        "_corral_sum=$(sha256sum \"$_corral_dir/a.tgz\" | cut -d' ' -f1)",
        f'if [ "$_corral_sum" != {mounts.sha256} ]; then',
        f'  echo "{FAILED_MARK} file_mounts: sha256 $_corral_sum, expected {mounts.sha256}" >&2',
        "  exit 65",
        "fi",
        'tar -xzf "$_corral_dir/a.tgz" -C "$_corral_dir" || exit 65',
    ]
    for i, target in enumerate(mounts.targets):
        dest = '"$HOME"' + q(target[1:]) if target.startswith("~") else q(target)
        # Once more if the copy fails: nodes sharing a filesystem (the local cloud's, an NFS
        # home) copy one target at once, and a cp that found no file may meet the other's
        # ("cannot create regular file: File exists"; seen once in CI).
        copy = f'rm -rf {dest} && cp -a "$_corral_dir/m{i}" {dest}'
        out += [
            f'mkdir -p "$(dirname {dest})" && {{ {copy} || {{ sleep 0.2; {copy}; }}; }}'
            f" || _corral_fail file_mounts {i + 1} $? {q(target)}"
        ]
        if docker:
            out.append(
                f'docker exec "$_corral_container" mkdir -p "$(dirname {dest})" && '
                f'docker cp "$_corral_dir/m{i}" "$_corral_container":{dest}'
                f" || _corral_fail file_mounts {i + 1} $? {q(target)}"
            )
    out.append('rm -rf "$_corral_dir"')
    return out


def failed_step(log_tail: str) -> str | None:
    """The launcher's failure line in a node's log (the last one), without its mark."""
    found = [line for line in log_tail.splitlines() if line.startswith(FAILED_MARK)]
    return found[-1][len(FAILED_MARK) :].strip() if found else None


_STEP = re.compile(r"^\[corral-launcher\] (\S+) (\S+) at ([0-9.]+)")


def step_times(log: str) -> list[tuple[str, float]]:
    """``(phase, epoch s)`` of every step the node's log announces, in order (``node up``
    last when the node came up)."""
    out = []
    for line in log.splitlines():
        found = _STEP.match(line)
        if found:
            phase = "node up" if found.group(1) == "node" else found.group(1)
            out.append((phase, float(found.group(3))))
    return out
