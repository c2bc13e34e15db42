"""A newcomer's first hour: help and conventions, square brackets, 80 columns and pipes, bad paths,
corrupt run files, refused starts.  One small offline run (made through the CLI with COLUMNS=80 and
stdout going to a file) serves every view."""

from __future__ import annotations

import errno
import re
import os
import shutil
from pathlib import Path

import pytest
from optimize_helpers import cli as cli_subprocess
from optimize_helpers import tiny_seed

from tik_agent.cli import run as cli
from tik_agent.search import setup
from tik_agent.run.runconfig import RunConfig

LONG_LINE = "# " + "a comment that is much longer than any terminal is wide, " * 3 + "[and ends in brackets]"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(run directory, what `optimize` printed): the tiny seed with a 190-column source line, 2 attempts."""
    base = tmp_path_factory.mktemp("edges")
    seed = tiny_seed(base)
    (seed / "kernel.py").write_text((seed / "kernel.py").read_text() + LONG_LINE + "\n")
    run = base / ("a-run-directory-with-a-long-name-" * 3 + "r")
    done = cli_subprocess("optimize", str(seed), "--agent", "offline", "--iterations", "2", "--rounds", "3",
                          "--run-dir", str(run),
                          env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    return run, done.stdout


@pytest.fixture
def out(capsys):
    def read(*argv: str, code: int = 0) -> tuple[str, str]:
        capsys.readouterr()
        assert cli(list(argv)) == code
        got = capsys.readouterr()
        return got.out, got.err
    return read


# ----------------------------------------------------------------- help and conventions


def test_help_shows_defaults_metavars_and_no_type_tags(out):
    text, _ = out("optimize", "-h")
    assert "Usage: tik-agent optimize [OPTIONS] [SEED]" in text
    for default in ("[default: 20]", "[default: 1]", "[default: 5]", "[default: runs/<timestamp>-<seed>]"):
        assert default in " ".join(text.split()), default
    assert "--iterations N" in text and "--workers W" in text and "<int>" not in text
    show, _ = out("show", "--help")
    assert "Usage: tik-agent show [OPTIONS] RUN ID" in show and "{" not in show
    flags, _ = out("eval", "-h")
    assert "--json " in flags and "<bool>" not in flags
    assert "[default: per phase, 5x the seed's own time for it, at least 60 s]" in " ".join(flags.split())


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_help_wraps_between_words_never_after_a_hyphen(out, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    texts = {c: out(c, "-h")[0] for c in ("optimize", "export", "eval", "onpolicy", "check-seed", "show")}
    for command, text in texts.items():
        cut = [ln for ln in text.splitlines() if re.search(r"[A-Za-z]-$", ln)]
        assert not cut, (command, cut)
    # Control: these words straddled a line end at 80 columns when click broke after hyphens.
    if columns == 80:
        assert "'tik-agent[ray]'" in texts["optimize"] and "scripts/gpu-check.sh" in texts["optimize"]


@pytest.mark.parametrize("argv, flag", [
    (["optimize", "rmsnorm", "--workers", "0"], "--workers"),
    (["optimize", "rmsnorm", "--rounds", "0"], "--rounds"),
    (["optimize", "rmsnorm", "--workers", "-1"], "--workers"),
    (["optimize", "rmsnorm", "--iterations", "0"], "--iterations"),
    (["optimize", "rmsnorm", "--eval-timeout", "0"], "--eval-timeout"),
    (["eval", __file__, "--seed", "rmsnorm", "--rounds", "0"], "--rounds"),
])
def test_zero_is_refused_like_a_negative(out, argv, flag):
    _, err = out(*argv, code=2)
    assert err.startswith(f"error: {flag}: must be") and len(err.strip().splitlines()) == 1


def test_runs_of_a_missing_directory_exits_2(out, tmp_path):
    _, err = out("runs", str(tmp_path / "nowhere"), code=2)
    assert "no such directory" in err
    text, _ = out("runs", str(tmp_path))  # an empty directory is no error
    assert "no runs in" in text


@pytest.mark.parametrize("argv", [["eval", "seed_kernels/rmsnorm/kernel.py", "--seed", "rmsnorm"],
                                  ["optimize", "rmsnorm", "--agent", "offline"]], ids=["eval", "optimize"])
def test_a_missing_warm_cache_is_one_line_exit_2_before_anything_runs(out, tmp_path, argv):
    runs = tmp_path / "runs"
    extra = ["--run-dir", str(runs)] if argv[0] == "optimize" else []
    _, err = out(*argv, *extra, "--warm-cache", str(tmp_path / "no-cache"), code=2)
    assert err.strip() == f"error: --warm-cache {tmp_path / 'no-cache'}: no such directory"
    assert not runs.exists()


class _Seen(Exception):
    pass


def test_a_warm_cache_reaches_evals_workers_and_the_seeds_audit_in_optimize(out, tmp_path, monkeypatch):
    """What --warm-cache sets: every worker of an evaluation copies it (EvalOptions.warm_cache, which
    tests/test_executor.py follows into the worker), and in optimize the seed's audit (whose cache the
    run keeps for its candidates)."""
    from tik_agent.judge import evaluate as evaluate_module

    cache = tmp_path / "cache"
    cache.mkdir()
    seen = {}

    def capture(key):
        def fake(*args, **kwargs):
            seen[key] = next(a for a in (*args, *kwargs.values()) if hasattr(a, "warm_cache")).warm_cache
            raise _Seen()
        return fake

    monkeypatch.setattr(evaluate_module, "evaluate", capture("eval"))
    with pytest.raises(_Seen):
        cli(["eval", "seed_kernels/rmsnorm/kernel.py", "--seed", "rmsnorm", "--warm-cache", str(cache)])
    monkeypatch.setattr(setup, "_make_root", capture("optimize"))
    with pytest.raises(_Seen):
        cli(["optimize", "rmsnorm", "--agent", "offline", "--run-dir", str(tmp_path / "run"),
             "--warm-cache", str(cache)])
    assert seen == {"eval": str(cache.resolve()), "optimize": str(cache.resolve())}


# ----------------------------------------------------------------- square brackets survive


def test_bracketed_text_survives_in_tables_and_errors(out, tmp_path):
    seeds, _ = out("seeds")
    assert "log_softmax(logits)[target]" in seeds
    bad = tmp_path / "bad"
    shutil.copytree(Path(__file__).parent.parent / "seed_kernels" / "rmsnorm", bad)
    spec = (bad / "spec.toml").read_text()
    (bad / "spec.toml").write_text(spec.replace('shape = ["M", "N"]', 'shape = ["M", "Q"]', 1))
    _, err = out("check-seed", str(bad), code=2)
    assert "[dims]" in err, err


# ----------------------------------------------------------------- 80 columns and pipes


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_a_piped_optimize_at_80_columns_keeps_every_line_whole(made):
    run, printed = made
    lines = printed.splitlines()
    assert any(ln.startswith("stopped (iterations) after 2 of 2 attempts") and "cost" in ln for ln in lines)
    assert any(ln.startswith("run directory: ") and ln.endswith(f"(best kernel: {run / 'kernel.py'})")
               for ln in lines), printed
    assert "\x1b[" not in printed  # plain: no colour codes in a file


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_piped_views_are_complete_at_80_columns(made):
    run, _ = made
    env = {"COLUMNS": "80"}
    shown = cli_subprocess("show", str(run), "seed", env=env)
    assert shown.returncode == 0 and LONG_LINE in shown.stdout.splitlines()   # source never cropped
    listed = cli_subprocess("runs", str(run.parent), env=env)
    assert listed.returncode == 0 and run.name in listed.stdout               # the long name, whole
    tree = cli_subprocess("lineage", str(run), env=env)
    assert tree.returncode == 0 and "seed (the reference)" in tree.stdout
    for done in (shown, listed, tree):
        assert "…" not in done.stdout and "\x1b[" not in done.stdout


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_show_of_an_attempt_in_a_pipe_is_the_verbatim_candidate(made, out):
    run, _ = made
    text, _ = out("show", str(run), "a0001")
    candidate = (run / "attempts" / "a0001" / "candidate.py").read_text()
    assert candidate in text


# ----------------------------------------------------------------- runs shows what is running


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_runs_shows_a_run_in_progress_as_running_and_a_dead_one_not(made, out, tmp_path):
    run, _ = made
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(run, copy, symlinks=True)
    session = setup.reopen(copy, RunConfig.load(copy))
    try:
        text, _ = out("runs", str(copy.parent))
        assert f"running (pid {os.getpid()})" in text
    finally:
        session.close()
    text, _ = out("runs", str(copy.parent))   # the lock file is still there; its holder is gone
    assert "running" not in text and "iterations" in text


# ----------------------------------------------------------------- bad paths, a full disk, corrupt files


@pytest.mark.slow  # the module's optimize run, or a refused one
@pytest.mark.parametrize("command", ["export", "report"])
def test_bad_out_paths_are_one_line_exit_2(made, out, tmp_path, command):
    run, _ = made
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for target, words in ((a_file, "exists and is not a directory"), (a_file / "sub", "cannot create it"),
                          (Path("/proc/no/such"), "cannot create it")):
        _, err = out(command, str(run), "--out", str(target), code=2)
        assert err.startswith(f"error: --out {target}: {words}") and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_an_unwritable_out_dir_is_refused(made, out, tmp_path, monkeypatch):
    run, _ = made
    target, access = tmp_path / "r", os.access
    # root ignores permission bits: the check is made to fail for this one directory
    monkeypatch.setattr(os, "access", lambda p, mode, **k: Path(p) != target and access(p, mode, **k))
    _, err = out("report", str(run), "--out", str(target), code=2)
    assert "not writable" in err


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_a_full_disk_is_one_line_exit_2(made, out, tmp_path, monkeypatch):
    run, _ = made

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "r" / "report.png"))

    monkeypatch.setattr(Path, "write_bytes", full)
    _, err = out("report", str(run), "--out", str(tmp_path / "r"), code=2)
    assert err.strip() == f"error: {tmp_path / 'r' / 'report.png'}: No space left on device"


@pytest.mark.slow  # the module's optimize run, or a refused one
@pytest.mark.parametrize("name, damage", [
    ("journal.jsonl", "garbage\n"),
    ("journal.jsonl", '{"event": "finished", "record": {"schema": 1}}\n'),
    ("journal.jsonl", "[1, 2]\n"),
    ("summary.json", '{"schema": 1, "run_id": '),
    ("summary.json", '{"schema": 1}'),
    ("run.json", "not json"),
    ("run.json", "[]"),
])
def test_corrupt_run_files_are_one_line_exit_2(made, out, tmp_path, name, damage):
    run, _ = made
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(run, copy, symlinks=True)
    (copy / name).write_text(damage)
    for argv in (["runs", str(copy.parent)], ["lineage", str(copy)], ["report", str(copy)],
                 ["show", str(copy), "a0001"], ["optimize", "--resume", str(copy)]):
        code, err = _run(argv)
        if code == 0:
            continue  # a view that does not read this file
        assert code == 2, (argv, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, (argv, err)
        assert name in err or "run.json" in err, (argv, err)


def _run(argv: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    buf_out, buf_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
        code = cli(argv)
    return code, buf_err.getvalue()


# ----------------------------------------------------------------- refused starts


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_a_refused_start_leaves_nothing_and_names_the_users_seed(tmp_path, out):
    seed = tiny_seed(tmp_path)
    kernel = seed / "kernel.py"
    kernel.write_text(kernel.read_text().replace("    return y\n", '    raise RuntimeError("broken seed")\n'))
    run = tmp_path / "run"
    for _ in range(2):  # the same --run-dir again gets the same answer, not "exists"
        _, err = out("optimize", str(seed), "--agent", "offline", "--run-dir", str(run), code=2)
        assert f"error: {kernel}:" in err and str(run) not in err.split("\n")[-2], err
        assert not run.exists()


def test_a_seed_importing_numpy_is_refused_by_check_seed_and_optimize(tmp_path, out):
    seed = tiny_seed(tmp_path)
    kernel = seed / "kernel.py"
    kernel.write_text("import numpy as np\n" + kernel.read_text())
    for argv in (["check-seed", str(seed)], ["optimize", str(seed), "--run-dir", str(tmp_path / "run")]):
        _, err = out(*argv, code=2)
        assert err.strip() == (f"error: {kernel}:1: imports numpy; a seed may import only torch, triton and "
                               "the standard library")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # the module's optimize run, or a refused one
def test_export_of_a_rejected_attempt_names_its_outcome(made, out, tmp_path):
    from tik_agent.outcomes import Outcome
    from tik_agent.run.journal import AttemptRecord, Journal

    run, _ = made
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, symlinks=True)
    rejected = AttemptRecord(attempt_id="a0003", index=3, parent_commit="0" * 40, parent_id="seed",
                             outcome=Outcome.PARITY_FAILED, reason="bits differ in case par:M=3")
    Journal(copy).append("finished", record=rejected.to_dict(), t=0.0)
    _, err = out("export", str(copy), "--commit", "a0003", "--out", str(tmp_path / "d"), code=2)
    assert "attempt a0003 was rejected: parity_failed (bits differ in case par:M=3)" in err
    _, err = out("export", str(copy), "--commit", "a0042", "--out", str(tmp_path / "d"), code=2)
    assert "not a commit of the lineage" in err  # an id the run never had: the general message
