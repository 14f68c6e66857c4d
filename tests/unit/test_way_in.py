"""Issue 24, a way in: which file_mounts sources the node copies and which are refused (pure),
and the node's end of an attach session on a pty (the agent's ShellPeer, a real bash)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.services.agent.bundle import mount_path
from corral.services.agent.sessions import ShellPeer, Where
from corral.shared.bundles import BundleMount, check_target, node_copied, remote_source_problem
from corral.shared.config.task import Task


def test_s3_sources_are_copied_by_the_node_and_other_stores_are_refused() -> None:
    assert remote_source_problem("./data") is None
    assert remote_source_problem("s3://bucket") is None
    assert remote_source_problem("s3://bucket/some/prefix") is None
    assert "expected s3://BUCKET" in str(remote_source_problem("s3:///key"))
    assert "gs:// sources are not supported yet" in str(remote_source_problem("gs://b/k"))
    assert "r2:// sources are not supported yet" in str(remote_source_problem("r2://b/k"))
    assert "storage mapping" in str(remote_source_problem({"name": "x", "mode": "MOUNT"}))
    mounts = {"/b": "s3://bkt/b", "/a": "./local", "~/c": "s3://bkt/c.bin"}
    assert node_copied(mounts) == [
        {"target": "/b", "source": "s3://bkt/b"},
        {"target": "~/c", "source": "s3://bkt/c.bin"},
    ]


def test_a_task_naming_a_store_not_supported_is_refused_naming_its_target() -> None:
    Task.model_validate({"file_mounts": {"/data": "s3://bucket/x"}, "run": "true"})
    with pytest.raises(ValueError, match="/data: gs:// sources are not supported yet"):
        Task.model_validate({"file_mounts": {"/data": "gs://bucket/x"}, "run": "true"})


def test_a_relative_mount_target_is_under_the_workdir_as_skypilot_reads_it(tmp_path: Path) -> None:
    """SkyPilot's examples/using_file_mounts.yaml: "Relative paths are under ~/sky_workdir/ —
    the remote workdir" (its `relative_dir` and `./dotslash_relative_dir`). Climbing out is
    refused as before, and two spellings of one place are one target too many."""
    task = Task.model_validate(
        {"file_mounts": {"relative_dir": "./a", "./dotslash/x.bin": "s3://bkt/x"}, "run": "true"}
    )
    assert task.file_mounts == {
        "~/sky_workdir/relative_dir": "./a",
        "~/sky_workdir/dotslash/x.bin": "s3://bkt/x",
    }
    assert check_target("/data") == "/data" and check_target("~/d") == "~/d"
    assert BundleMount(target="out/", member="mounts/0", is_dir=True).target == (
        "~/sky_workdir/out"
    )
    with pytest.raises(ValueError, match="may not climb"):
        check_target("data/../../etc")
    with pytest.raises(ValueError, match="the same place as another target"):
        Task.model_validate({"file_mounts": {"d": "./a", "~/sky_workdir/d": "./b"}})
    # On the node: under the machine's own workdir (the local cloud's jail as well).
    home = tmp_path / "machine"
    target = check_target("./dotslash/x.bin")
    assert mount_path(home, target, jail=True) == home / "sky_workdir" / "dotslash" / "x.bin"


def test_an_attach_shell_on_a_pty_has_the_size_asked_follows_a_resize_and_exits_with_its_code() -> (
    None
):
    peer = ShellPeer(
        {"id": "x-1", "kind": "shell", "tty": True, "rows": 33, "cols": 101},
        Where(None, {"PATH": "/usr/bin:/bin", "PS1": "$ "}),
    )
    peer.write(b"test -t 0 && echo is-a-tty; stty size\n")
    seen = b""
    deadline = time.monotonic() + 20
    while b"33 101" not in seen and time.monotonic() < deadline:
        seen += peer.read()
    peer.resize(20, 90)
    peer.write(b"stty size; exit 5\n")
    while time.monotonic() < deadline:
        data = peer.read()
        if not data:
            break
        seen += data
    assert peer.wait() == 5
    assert b"is-a-tty" in seen and b"33 101" in seen and b"20 90" in seen, seen
