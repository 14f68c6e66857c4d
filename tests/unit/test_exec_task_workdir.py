"""`corral exec ID task.yaml` reads the task's workdir as `sky exec` does: a local folder is
kept for upload (the job runs in its own copy); a git workdir, which exec does not clone, is
noticed on stderr, never silently dropped; file_mounts and setup stay noticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.services.cli.jobs_cmd import job_from_file


def test_a_local_workdir_is_kept_for_upload_and_file_mounts_are_noticed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "t.yaml"
    task.write_text(
        f"workdir: {tmp_path}\nfile_mounts: {{/data: {tmp_path}}}\nsetup: echo s\nrun: ls\n"
    )
    job = job_from_file(task, None, None, None, None, False)
    assert job["workdir"] == str(tmp_path) and job["run"] == "ls"
    err = capsys.readouterr().err
    assert "file_mounts are not copied by exec" in err and "setup is not run by exec" in err
    assert "not cloned by exec" not in err


def test_a_git_workdir_is_noticed_not_synced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "t.yaml"
    task.write_text("workdir: {url: 'https://github.com/o/r.git', ref: main}\nrun: ls\n")
    job = job_from_file(task, None, None, None, None, False)
    assert "workdir" not in job
    assert "a git workdir is not cloned by exec" in capsys.readouterr().err
