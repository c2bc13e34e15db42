"""What ``tik-agent export`` does to ``--out``: it adds its wheel and nothing else.

Earlier wheels (other versions, other commits) and every other file stay as they
were; a file of the new wheel's name is kept when it holds the same bytes (an
export is reproducible), refused with exit 2 when it holds others, and replaced
only with ``--force``.  A failed export leaves no partial file and no folder it
made.  The placement is tested on stand-in wheel files (no build); the CLI on the
shared run's real exports.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from exportutil import git_rev, shared_run, shared_wheel
from tik_agent.cli import run as cli
from tik_agent.errors import UsageError
from tik_agent.export import builder, wheel_certificate
from tik_agent.run.lineage import open_run

NEW = "tik_kernel_rmsnorm-0.2-py3-none-any.whl"


@pytest.fixture(scope="module")
def run_dir() -> Path:
    return shared_run()


@pytest.fixture(scope="module")
def wheel() -> Path:
    return shared_wheel()


def listing(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` (hidden ones included) with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def built(tmp_path) -> Path:
    """A stand-in for the build's output: a wheel file of the rmsnorm distribution."""
    (tmp_path / "build").mkdir()
    path = tmp_path / "build" / NEW
    path.write_bytes(b"the new build")
    return path


@pytest.fixture
def out(tmp_path) -> Path:
    folder = tmp_path / "dist"
    folder.mkdir()
    return folder


@pytest.fixture
def logged(caplog):
    """The builder's log records."""
    caplog.set_level(logging.INFO, logger="tik_agent")
    return caplog


# --------------------------------------------------------------------------- placement


def test_earlier_wheels_of_the_distribution_and_other_files_stay(built, out):
    # The earlier behaviour removed every other wheel of the same distribution.
    mine = {"tik_kernel_rmsnorm-0.1.0+gabc-py3-none-any.whl": b"an earlier export",
            "tik_kernel_rmsnorm-0.1-py3-none-any.whl": b"another version", "notes.txt": b"mine"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    placed = builder._place(built, out)
    assert placed == (out / NEW).resolve()
    assert listing(out) == {**mine, NEW: b"the new build"}


def test_a_file_of_the_same_name_with_other_bytes_is_refused_and_left_alone(built, out):
    (out / NEW).write_bytes(b"the user's file")
    before = listing(out)
    with pytest.raises(UsageError, match=rf"--out: .*{NEW} already exists with other bytes.*--force"):
        builder._place(built, out)
    assert listing(out) == before


def test_force_overwrites_that_one_file_and_says_so(built, out, logged):
    (out / NEW).write_bytes(b"the user's file")
    (out / "tik_kernel_rmsnorm-0.1-py3-none-any.whl").write_bytes(b"another version")
    builder._place(built, out, force=True)
    assert listing(out) == {NEW: b"the new build", "tik_kernel_rmsnorm-0.1-py3-none-any.whl": b"another version"}
    assert f"{out / NEW}: overwritten (--force)" in logged.text


def test_a_file_with_the_same_bytes_is_kept_as_it_is(built, out, logged):
    shutil.copy2(built, out / NEW)
    before = (out / NEW).stat()
    builder._place(built, out)
    after = (out / NEW).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert listing(out) == {NEW: b"the new build"}
    assert "already there with the same bytes; kept" in logged.text


def test_a_directory_of_the_wheels_name_is_refused_even_with_force(built, out):
    (out / NEW).mkdir()
    (out / NEW / "inside").write_bytes(b"mine")
    with pytest.raises(UsageError, match="is a directory"):
        builder._place(built, out, force=True)
    assert (out / NEW / "inside").read_bytes() == b"mine"


def test_the_copy_never_takes_a_name_the_user_has(built, out):
    # The earlier staging name was fixed (.<wheel>.tmp), so a file of that name was lost.
    (out / f".{NEW}.tmp").write_bytes(b"mine")
    builder._place(built, out)
    assert listing(out) == {f".{NEW}.tmp": b"mine", NEW: b"the new build"}


def test_a_failed_copy_leaves_no_partial_file(built, out, monkeypatch):
    (out / "keep.whl").write_bytes(b"mine")

    def disk_full(src, dst):
        Path(dst).write_bytes(b"half a wh")
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(builder.shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        builder._place(built, out)
    assert listing(out) == {"keep.whl": b"mine"}


def test_the_placed_wheel_is_readable_like_the_build(built, out):
    os.chmod(built, 0o644)
    builder._place(built, out)
    assert (out / NEW).stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- the CLI, on real exports


def test_a_failed_export_leaves_no_folder_it_made(tmp_path, capsys):
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "kept").mkdir()
    for target in (tmp_path / "new" / "dist", tmp_path / "kept" / "dist"):
        assert cli(["export", str(tmp_path / "not-a-run"), "--out", str(target)]) == 2
        assert "not a tik-agent run" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "not-a-run"]
    assert not list((tmp_path / "kept").iterdir())


@pytest.mark.slow
def test_exports_of_two_commits_and_versions_both_stay(run_dir, tmp_path, capsys):
    out = tmp_path / "dist"
    assert cli(["export", str(run_dir), "--out", str(out)]) == 0
    (first,) = out.glob("*.whl")
    first_bytes = first.read_bytes()
    assert cli(["export", str(run_dir), "--commit", "a0002", "--version", "0.2", "--out", str(out)]) == 0
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 2 and first in wheels and first.read_bytes() == first_bytes
    commits = {wheel_certificate(w)["run"]["commit"] for w in wheels}
    assert commits == {git_rev(run_dir, "main"), git_rev(run_dir, "a0002")}


@pytest.mark.slow
def test_same_name_other_bytes_is_exit_2_untouched_and_force_overwrites(run_dir, wheel, tmp_path, capsys):
    out = tmp_path / "dist"
    out.mkdir()
    (out / wheel.name).write_bytes(b"the user's file")
    (out / "notes.txt").write_bytes(b"mine")
    assert cli(["export", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert f"{out / wheel.name} already exists with other bytes" in err, err
    assert listing(out) == {wheel.name: b"the user's file", "notes.txt": b"mine"}

    assert cli(["export", str(run_dir), "--out", str(out), "--force"]) == 0
    err = capsys.readouterr().err.replace("\n", "")
    assert "overwritten (--force)" in err, err
    # The export is reproducible: the forced wheel is byte for byte the session's.
    assert listing(out) == {wheel.name: wheel.read_bytes(), "notes.txt": b"mine"}


@pytest.mark.slow
def test_an_identical_export_is_reused(run_dir, wheel, tmp_path, capsys):
    out = tmp_path / "dist"
    out.mkdir()
    shutil.copy2(wheel, out / wheel.name)
    before = (out / wheel.name).stat()
    assert cli(["export", str(run_dir), "--out", str(out)]) == 0
    assert "already there with the same bytes; kept" in capsys.readouterr().err.replace("\n", "")
    after = (out / wheel.name).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert listing(out) == {wheel.name: wheel.read_bytes()}


@pytest.mark.slow
def test_the_certificate_is_dated_by_its_commit(run_dir, wheel):
    cert = wheel_certificate(wheel)
    committed = open_run(run_dir).committed_at(cert["run"]["commit"])
    assert cert["created_at"] == datetime.fromtimestamp(committed, timezone.utc).isoformat(timespec="seconds")
