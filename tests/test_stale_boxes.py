"""Worker directories a killed evaluation left behind (tik_agent.judge.stale_boxes)."""

import os
import subprocess
import sys

from tik_agent.judge import stale_boxes
from tik_agent.judge.stale_boxes import STALE_S, prefix, start_ticks, sweep


def _dead_owner() -> str:
    """The tag of a process that has exited: a real pid and start time, no longer alive."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    tag = f"{child.pid}.{start_ticks(child.pid)}"
    child.kill()
    child.wait()
    return tag


def _box(root, name, age_s):
    box = root / name
    (box / "spec").mkdir(parents=True)
    (box / "request.json").write_text("{}")
    old = box.stat().st_mtime - age_s
    os.utime(box, (old, old))
    return box


def test_a_dead_owners_old_directory_is_swept_and_nothing_else(tmp_path):
    dead = _dead_owner()
    mine = f"{os.getpid()}.{start_ticks(os.getpid())}"
    swept = _box(tmp_path, f"tik-eval-{dead}-abc", STALE_S + 60)
    keep = [
        _box(tmp_path, f"tik-eval-{dead}-recent", STALE_S - 600),  # touched lately: maybe another namespace's
        _box(tmp_path, f"tik-eval-{mine}-live", STALE_S + 60),     # its owner is alive
        _box(tmp_path, "tik-eval-kept-xyz", STALE_S + 60),         # kept on purpose
        _box(tmp_path, "tik-eval-oldstyle", STALE_S + 60),         # not named for an owner
        _box(tmp_path, f"other-{dead}-abc", STALE_S + 60),
    ]
    # A pid used again: the owner's pid is alive, its start time another.
    reused = _box(tmp_path, f"tik-eval-{os.getpid()}.1-reused", STALE_S + 60)
    assert sorted(sweep(tmp_path)) == sorted([swept, reused])
    assert not swept.exists() and not reused.exists() and all(k.exists() for k in keep)
    assert sweep(tmp_path) == []  # nothing more to do


def test_worker_directories_are_named_for_their_process():
    name = prefix(keep=False)
    assert name == f"tik-eval-{os.getpid()}.{start_ticks(os.getpid())}-"
    assert prefix(keep=True) == "tik-eval-kept-" and stale_boxes._OWNED.match(name + "x")
    assert stale_boxes._OWNED.match(prefix(keep=True) + "x") is None


def test_the_first_worker_directory_of_a_process_sweeps(tmp_path, monkeypatch):
    from tik_agent.judge.workerbox import WorkerBox
    from tik_agent.spec.seeds import resolve

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(stale_boxes, "_swept", False)
    left = _box(tmp_path, f"tik-eval-{_dead_owner()}-left", STALE_S + 60)
    box = WorkerBox(resolve("rmsnorm"), keep=False)
    try:
        assert not left.exists() and box.dir.parent == tmp_path and box.dir.name.startswith(prefix(False))
        again = _box(tmp_path, f"tik-eval-{_dead_owner()}-again", STALE_S + 60)
        WorkerBox(resolve("rmsnorm"), keep=True).close()  # a second one does not sweep again
        assert again.exists()
    finally:
        box.close()
    assert not box.dir.exists()
