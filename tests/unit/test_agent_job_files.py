"""A queued job's own workdir (``corral exec ID task.yaml`` with a ``workdir``): the agent
unpacks it into ``~/sky_workdir-job-N`` when the job starts, runs the job there, and leaves
the launch's workdir alone; a bundle that cannot be put in place fails that job only (its
reason said), and the next job runs at once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from corral.services.agent.execs import Execs
from corral.services.agent.job_files import job_workdir
from corral.services.agent.sessions import Where
from corral.services.client.bundles import pack


class BundleLink:
    """A node's link with a job queue and the jobs' bundles by sha256."""

    def __init__(self, jobs: list[dict[str, Any]], bundles: dict[str, bytes]) -> None:
        self.jobs = jobs
        self.bundles = bundles
        self.output: dict[str, bytes] = {}
        self.codes: dict[str, int] = {}
        self.errors: dict[str, str | None] = {}

    def take_execs(self) -> list[dict[str, Any]]:
        return []

    def take_job(self) -> dict[str, Any] | None:
        return self.jobs.pop(0) if self.jobs else None

    def fetch_job_bundle(self, item: dict[str, Any]) -> bytes:
        return self.bundles[item["bundle"]["sha256"]]

    def exec_output(self, xid: str, piece: bytes) -> None:
        self.output[xid] = self.output.get(xid, b"") + piece

    def exec_done(self, xid: str, code: int, error: str | None = None) -> None:
        self.codes[xid] = code
        self.errors[xid] = error


def _bundle(folder: Path) -> tuple[bytes, dict[str, Any]]:
    data, bundle = pack({"workdir": str(folder)}, folder, 1024 * 1024)
    return data, bundle.model_dump()


def _job(xid: str, number: int, run: str, bundle: dict[str, Any] | None) -> dict[str, Any]:
    item = {"id": xid, "kind": "job", "job": number, "run": run, "num_nodes": 1}
    return {**item, "bundle": bundle} if bundle else item


def _run(execs: Execs, link: BundleLink, where: Any, until: set[str]) -> None:
    deadline = time.monotonic() + 10
    while not until <= link.codes.keys() and time.monotonic() < deadline:
        execs.step(link, where, True)
        time.sleep(0.02)
    assert until <= link.codes.keys(), link.codes


def test_a_job_runs_in_its_own_unpacked_workdir_and_the_launchs_is_left_alone(
    tmp_path: Path,
) -> None:
    home, source = tmp_path / "home", tmp_path / "src"
    launch = home / "sky_workdir"
    launch.mkdir(parents=True)
    (launch / "keep.txt").write_text("launch\n")
    (source / "sub").mkdir(parents=True)
    (source / "keep.txt").write_text("job\n")
    (source / "sub" / "go.sh").write_text("echo ran in $PWD; cat keep.txt; exit 4\n")
    data, bundle = _bundle(source)
    link = BundleLink(
        [_job("j2", 2, "bash sub/go.sh", bundle), _job("j3", 3, "cat keep.txt", None)],
        {bundle["sha256"]: data},
    )
    env = {**os.environ, "HOME": str(home)}
    execs = Execs()
    try:
        _run(execs, link, lambda _i: Where(str(launch), env), {"j2", "j3"})
    finally:
        execs.stop_all()
    own = job_workdir(home, 2)
    assert own == home / "sky_workdir-job-2" and (own / "sub" / "go.sh").is_file()
    assert link.codes == {"j2": 4, "j3": 0}
    assert link.output["j2"] == f"ran in {own}\njob\n".encode()
    assert link.output["j3"] == b"launch\n"  # no workdir of its own: the launch's, as it was
    assert sorted(p.name for p in launch.iterdir()) == ["keep.txt"]


def test_a_bundle_that_cannot_be_put_in_place_fails_its_job_and_the_next_runs_at_once(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.txt").write_text("a\n")
    data, bundle = _bundle(source)
    link = BundleLink(
        [_job("j2", 2, "true", bundle), _job("j3", 3, "echo next", None)],
        {bundle["sha256"]: data[:-8] + b"tampered"},  # not the bytes the job names
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    execs = Execs()
    try:
        execs.step(link, lambda _i: Where(None, env), True)
        assert execs.job == "j3" and not link.jobs  # taken in the same step
        _run(execs, link, lambda _i: Where(None, env), {"j2", "j3"})
    finally:
        execs.stop_all()
    assert link.codes == {"j2": 1, "j3": 0}
    assert "checksum" in str(link.errors["j2"]) and b"checksum" in link.output["j2"]
    assert not job_workdir(tmp_path / "home", 2).exists()


def test_a_job_with_a_workdir_on_a_container_node_is_refused_saying_so(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    data, bundle = _bundle(source)
    link = BundleLink([_job("j2", 2, "true", bundle)], {bundle["sha256"]: data})

    def docker(argv: list[str], _stdin: bool, _tty: bool) -> list[str]:
        return ["docker", "exec", "c", *argv]

    execs = Execs()
    env = {**os.environ, "HOME": str(tmp_path)}
    execs.step(link, lambda _i: Where(None, env, docker), True)
    execs.stop_all()
    assert link.codes == {"j2": 1} and "container" in str(link.errors["j2"])
