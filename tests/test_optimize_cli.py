"""The CLI end to end with the offline agent, the views of a run, and bad input."""

from __future__ import annotations

import json
import os
import sys

import pytest
from optimize_helpers import copy_run, tiny_seed
from rich.console import Console

from tik_agent.search import setup
from tik_agent.agents.offline import OfflineAgent
from tik_agent.cli import run as cli
from tik_agent.run.journal import RunSummary, finished_records
from tik_agent.run.lineage import open_run
from tik_agent.view.live import render
from tik_agent.search.optimize import Optimizer
from tik_agent.view.report import write_report
from tik_agent.run.runconfig import RunConfig

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run made by `tik-agent optimize` with the offline agent: 3 attempts on the tiny seed."""
    base = tmp_path_factory.mktemp("cli")
    seed = tiny_seed(base)
    cwd = os.getcwd()
    os.chdir(base)  # relative paths, as a person types them
    try:
        # The template run's settings (tiny_config): the seed's audit is the session's, reused.
        code = cli(["optimize", "tiny-rmsnorm", "--agent", "offline", "--iterations", "3", "--rounds", "5",
                    "--eval-timeout", "120", "--run-dir", "runs/r1", "--rng-seed", "3"])
    finally:
        os.chdir(cwd)
    assert code == 0 and seed.is_dir()
    return base / "runs" / "r1"


@pytest.fixture
def a_copy(finished, tmp_path):
    return copy_run(finished, tmp_path / "copy")


def test_offline_optimize_finds_a_faster_kernel_with_the_same_bits(finished):
    summary = RunSummary.load(finished)
    assert summary.iterations == 3 and summary.stop_reason == "iterations"
    assert summary.accepted >= 1 and summary.best_speedup > 1.2
    assert summary.agent == "offline" and summary.model is None and summary.seed == "rmsnorm"
    config = RunConfig.load(finished)
    assert config.rng_seed == 3 and config.rounds == 5 and config.binding["device"] == "cpu"
    lin = open_run(finished)
    assert lin.speedup_of(lin.best_commit()) == pytest.approx(summary.best_speedup, abs=1e-3)
    assert all(k.trailers["Agent"] == "offline" and k.trailers["Model"] == "none" for k in lin.accepted())


def test_views_of_a_run(finished, capsys):
    capsys.readouterr()
    assert cli(["runs", str(finished.parent)]) == 0
    out = capsys.readouterr().out
    assert "r1" in out and "rmsnorm" in out and "offline" in out

    assert cli(["lineage", str(finished)]) == 0
    out = capsys.readouterr().out
    best = open_run(finished).accepted()
    assert "seed" in out and "best (main)" in out and "attempts by outcome" in out
    assert all(k.attempt_id in out for k in best)

    first = finished_records(finished)[0].attempt_id
    assert cli(["show", str(finished), first]) == 0
    out = capsys.readouterr().out
    assert f"attempt {first}" in out and "ROWS_PER_PROGRAM" in out and "evaluation:" in out and "@@" in out

    assert cli(["show", str(finished), "main"]) == 0
    assert "Speedup-Vs-Seed" in capsys.readouterr().out
    assert cli(["show", str(finished), "seed"]) == 0
    assert "Kind: seed" in capsys.readouterr().out
    assert cli(["show", str(finished), "nope"]) == 2
    assert "not a commit of the lineage" in capsys.readouterr().err


def test_report_writes_png_and_html_without_touching_matplotlib_state(finished, tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    pyplot_loaded = "matplotlib.pyplot" in sys.modules
    png, page = write_report(finished, tmp_path / "out")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text()
    assert "data:image/png;base64," in html and "Accepted kernels" in html and RunSummary.load(finished).run_id in html
    assert matplotlib.get_backend() == backend and ("matplotlib.pyplot" in sys.modules) == pyplot_loaded
    assert cli(["report", str(finished)]) == 0
    assert (finished / "report" / "report.html").is_file()


def test_live_view_renders_a_snapshot(a_copy):
    session = setup.reopen(a_copy, RunConfig.load(a_copy))
    try:
        snap = Optimizer(session, OfflineAgent()).snapshot()
    finally:
        session.close()
    console = Console(record=True, width=140)
    console.print(render(snap))
    text = console.export_text()
    for word in ("attempts", "time", "tokens", "cost", "patience", "best", "recent attempts", "frontier"):
        assert word in text
    assert snap.recent[-1].attempt_id in text


def test_bad_input(finished, a_copy, tmp_path, capsys):
    def fails(args, *needles):
        capsys.readouterr()
        assert cli(args) == 2
        err = " ".join(capsys.readouterr().err.split())
        for needle in needles:
            assert needle in err, err

    fails(["optimize", "no-such-seed"], "unknown seed 'no-such-seed'", "rmsnorm")
    fails(["optimize"], "SEED")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    fails(["optimize", "rmsnorm", "--run-dir", str(junk)], "exists and is not a tik-agent run")
    assert (junk / "notes.txt").read_text() == "mine" and len(list(junk.iterdir())) == 1
    fails(["optimize", "rmsnorm", "--run-dir", str(finished)], "--resume")
    fails(["optimize", "--resume", str(junk)], "not a tik-agent run")
    fails(["optimize", "--resume", str(finished), "--run-dir", str(junk)], "give one")
    fails(["optimize", "--resume", str(finished), "--agent", "openai"], "--agent", "offline")
    fails(["optimize", "rmsnorm", "--time-budget", "soon"], "--time-budget")
    fails(["optimize", "rmsnorm", "--iterations", "0", "--run-dir", str(tmp_path / "x")], "--iterations")
    fails(["lineage", str(junk)], "not a tik-agent run")
    fails(["optimize", "rmsnorm", "--prompts", str(tmp_path / "no-prompts"), "--run-dir", str(tmp_path / "y")],
          "--prompts", "does not exist")
    fails(["optimize", "rmsnorm", "--prices", str(tmp_path / "no.toml"), "--run-dir", str(tmp_path / "y")],
          "--prices", "does not exist")

    run_json = json.loads((a_copy / "run.json").read_text())
    run_json["binding"]["triton"] = "2.0.0"
    (a_copy / "run.json").write_text(json.dumps(run_json))
    fails(["optimize", "--resume", str(a_copy), "--iterations", "9"], "triton='2.0.0'", "triton='3.9.0'")
    assert len(finished_records(a_copy)) == 3  # nothing ran


def test_prompts_and_prices_are_kept_with_the_run(tmp_path, capsys):
    """A user's prompt directory and price table are recorded in run.json and reused on resume."""
    seed = tiny_seed(tmp_path)
    prompts = tmp_path / "my-prompts"
    prompts.mkdir()
    prices = tmp_path / "prices.toml"
    prices.write_text("")
    run_dir = tmp_path / "run"
    assert cli(["optimize", str(seed), "--agent", "offline", "--iterations", "1", "--rounds", "5",
                "--eval-timeout", "120", "--run-dir", str(run_dir), "--prompts", str(prompts),
                "--prices", str(prices)]) == 0
    config = RunConfig.load(run_dir)
    assert (config.prompts_dir, config.prices_path) == (str(prompts.resolve()), str(prices.resolve()))
    # Kept, but the offline agent uses neither: the run says so rather than accept them silently.
    err = capsys.readouterr().err
    assert "--prices: the offline agent has no prompts and no token costs" in err, err
    assert "--prompts: the offline agent" in err and "--max-cost" not in err, err


def test_runs_without_runs(tmp_path, capsys):
    assert cli(["runs", str(tmp_path)]) == 0
    assert "no runs" in capsys.readouterr().out
