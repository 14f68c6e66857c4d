"""A gone local machine's disk: its folder, its assignments' folders and the bundles copied
beside it go; other machines' stay (services/providers/local/folders.py)."""

from __future__ import annotations

from pathlib import Path

from corral.services.providers.local.folders import remove_folders


def _machine(root: Path, iid: str) -> list[Path]:
    """A machine's folder with a file in it, an assignment's folder, its launch's bundle and
    a job's bundle beside it."""
    home = root / iid
    (home / "work").mkdir(parents=True)
    (home / "work" / "out.txt").write_text("x")
    (root / f"{iid}.a-1").mkdir()
    (root / f"{iid}.bundle").write_bytes(b"b")
    (root / f"{iid}.job-abc.bundle").write_bytes(b"j")
    return [home, root / f"{iid}.a-1", root / f"{iid}.bundle", root / f"{iid}.job-abc.bundle"]


def test_the_machines_named_go_with_everything_beside_them_and_the_others_stay(
    tmp_path: Path,
) -> None:
    gone = _machine(tmp_path, "li-aa") + _machine(tmp_path, "li-bb")
    # "li-aab" starts like "li-aa" but is another machine.
    kept = _machine(tmp_path, "li-aab") + _machine(tmp_path, "li-cc")
    remove_folders(tmp_path, ["li-aa", "li-bb", "li-unknown"])
    assert [p for p in gone if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []


def test_nothing_to_remove_and_no_folder_are_fine(tmp_path: Path) -> None:
    remove_folders(tmp_path, [])
    remove_folders(tmp_path / "never-made", ["li-aa"])
