"""What a person sees: pipes (no wrapped or padded titles), 80 columns (nothing cut), --json of every
view, show --source byte for byte, progress lines and what Ctrl-C says."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import pytest
from fakerun import fake_run
from optimize_helpers import tiny_config, tiny_seed
from rich.console import Console
from rich.table import Table

from tik_agent.cli import output
from tik_agent.cli import run as cli
from tik_agent.cli import view_commands
from tik_agent.judge import phases, seedcheck
from tik_agent.judge.parity import CaseResult
from tik_agent.run.journal import RunSummary
from tik_agent.spec.seeds import BUNDLED_DIR

KERNEL = (BUNDLED_DIR / "rmsnorm" / "kernel.py").read_bytes()


@pytest.fixture
def out(capsys):
    def read(*argv: str, code: int = 0) -> tuple[str, str]:
        capsys.readouterr()
        assert cli(list(argv)) == code
        got = capsys.readouterr()
        return got.out, got.err
    return read


@pytest.fixture
def terminal(monkeypatch):
    """The CLI's console as an 80-column terminal, recorded."""
    console = Console(width=80, height=40, force_terminal=True, color_system=None, record=True, markup=False,
                      file=open("/dev/null", "w"))
    monkeypatch.setattr(output, "console", console)
    monkeypatch.setattr(view_commands, "console", console)
    return console


def fake_runs(base: Path) -> Path:
    """Two run directories (settings and summary only) with long names and a long model name."""
    import dataclasses

    for name in ("20261201-090000-rmsnorm", "20261201-100000-attention-with-a-long-name"):
        d = base / name
        d.mkdir(parents=True)
        dataclasses.replace(tiny_config(Path("/x"), name), agent="anthropic",
                            model="claude-sonnet-4-5-20250929").save(d)
        RunSummary(run_id=name, seed="rmsnorm", agent="anthropic", model="claude-sonnet-4-5-20250929",
                   iterations=120, iterations_limit=200, accepted=7, best_speedup=4.891, best_commit="a" * 40,
                   best_attempt="a0042", input_tokens=1234567, output_tokens=234567, cost_usd=12.34, elapsed_s=3600.0,
                   stop_reason="time_budget", outcomes={"accepted": 7}, environment={}).save(d)
    return base


# ----------------------------------------------------------------- pipes


def test_a_piped_tables_title_is_one_whole_line_and_nothing_is_padded(capsys):
    table = Table(title="mysoftmax on cpu: 20 cases in 30.9 s", title_justify="left")
    table.add_column("check")
    table.add_row("ok")
    output.emit(table)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "mysoftmax on cpu: 20 cases in 30.9 s"   # not wrapped to the narrow table's width
    assert all(ln == ln.rstrip() for ln in lines)
    # Negative control: rich itself wraps the title to the table and pads lines.
    plain = Console(width=4000, record=True, file=open("/dev/null", "w"), color_system=None)
    plain.print(table)
    raw = plain.export_text().splitlines()
    assert raw[0].strip() != "mysoftmax on cpu: 20 cases in 30.9 s"


def test_seeds_in_a_pipe_has_no_padding(out):
    text, _ = out("seeds")
    lines = text.splitlines()
    assert lines[0] == "bundled seeds" and all(ln == ln.rstrip() for ln in lines)


# ----------------------------------------------------------------- 80 columns


def test_say_on_an_80_column_terminal_wraps_between_words(terminal):
    head = "stopped (iterations) after 20 of 20 attempts in 1m40s: best kernel a0007 at"
    number = "4.891234x"
    assert len(head) < 80 < len(head) + 1 + len(number)   # the number straddles the 80th column
    output.say(head + " " + number)
    lines = terminal.export_text().splitlines()
    assert max(len(ln) for ln in lines) <= 80 and lines[1].strip() == number
    # Negative control: printed as one soft-wrapped line, the terminal itself would cut the number.
    old = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None)
    old.print(head + " " + number, soft_wrap=True)
    assert len(old.export_text().splitlines()[0]) > 80


def test_runs_fit_80_columns_with_every_value_whole(tmp_path, terminal):
    base = fake_runs(tmp_path / "runs")
    view_commands.runs(base, False)
    text = terminal.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80 and "…" not in text
    words = " ".join(text.split())
    for value in ("20261201-100000-attention-with-a-long-name", "claude-sonnet-4-5-20250929", "4.891x",
                  "1,469,134", "$12.34", "time_budget", "120/200"):
        assert value in words, value
    # Negative control: the table squeezed into 80 columns breaks values over lines.
    rows = [view_commands._run_row(p) for p in sorted(base.iterdir())]
    squeezed = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None)
    squeezed.print(view_commands.render_runs(base, rows, None))
    assert "time_budget" not in squeezed.export_text()


def test_seeds_fit_80_columns(out, terminal):
    out("seeds")
    text = terminal.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80 and "…" not in text
    table_lines = text.splitlines()[1:]
    assert all(ln.rstrip()[-1] in "┓┃┩│┘" for ln in table_lines if ln.strip())   # no row cropped at the edge
    for word in ("add_rms_norm(x,", "log_softmax(logits)", "fixed-order", "block_table,"):
        assert word in text, word


# ----------------------------------------------------------------- --json


def test_runs_json(tmp_path, out):
    base = fake_runs(tmp_path / "runs")
    text, _ = out("runs", str(base), "--json")
    data = json.loads(text)
    assert [r["run"] for r in data["runs"]] == sorted(p.name for p in base.iterdir())
    first = data["runs"][0]
    assert first["best_speedup"] == 4.891 and first["input_tokens"] == 1234567 and first["state"] == "time_budget"
    assert first["model"] == "claude-sonnet-4-5-20250929" and first["pid"] is None


def test_seeds_json(out):
    data = json.loads(out("seeds", "--json")[0])
    by_name = {s["name"]: s for s in data["seeds"]}
    assert by_name["rmsnorm"]["signature"] == "rms_norm(x, weight, eps=1e-06)"
    assert by_name["rmsnorm"]["backward"] == "rms_norm_backward"


def test_lineage_and_show_json(tmp_path, out):
    run = fake_run(tmp_path, [KERNEL + b"# one\n", KERNEL + b"# two\n"])
    data = json.loads(out("lineage", str(run), "--json")[0])
    assert [k["id"] for k in data["kernels"]] == ["seed", "a0001", "a0002"]
    assert data["kernels"][2]["best"] and data["kernels"][2]["parent_commit"] == data["kernels"][1]["commit"]
    assert data["kernels"][1]["speedup_vs_seed"] == 1.5 and data["attempts"] == 0
    shown = json.loads(out("show", str(run), "a0002", "--json")[0])
    assert shown["kind"] == "commit" and shown["source"].endswith("# two\n")
    assert shown["trailers"]["Attempt-Id"] == "a0002" and "+# two" in shown["diff"]
    # Each kernel's spread (None: this run recorded none), and whether its parent is the seed.
    assert all("noise" in k for k in data["kernels"][1:]) and data["kernels"][1]["noise"] is None
    assert shown["parent_is_seed"] is False
    assert json.loads(out("show", str(run), "a0001", "--json")[0])["parent_is_seed"] is True


def test_show_source_is_the_files_bytes_and_nothing_else(tmp_path, capsysbinary):
    run = fake_run(tmp_path, [KERNEL + b"# one\n"])
    attempt = run / "attempts" / "a0002"
    attempt.mkdir(parents=True)
    odd = b"import torch\r\n# caf\xc3\xa9 [brackets]\r\n\tx = 1  "   # CRLF, a tab, no final newline
    (attempt / "candidate.py").write_bytes(odd)
    for ident, expected in (("a0002", odd), ("a0001", KERNEL + b"# one\n"), ("seed", KERNEL)):
        capsysbinary.readouterr()
        assert cli(["show", str(run), ident, "--source"]) == 0
        assert capsysbinary.readouterr().out == expected, ident
    # Negative control: plain `show` prints more than the source.
    assert cli(["show", str(run), "a0001"]) == 0
    assert capsysbinary.readouterr().out != KERNEL + b"# one\n"


@pytest.mark.slow
def test_check_seed_json(tmp_path, out):
    seed = tiny_seed(tmp_path)
    data = json.loads(out("check-seed", str(seed), "--json")[0])
    assert data["passed"] is True and data["interrupted"] is False and data["seed"] == "rmsnorm"
    assert data["cases_run"] == data["planned_cases"] == len(data["results"]) > 0
    assert data["checks_passed"]["determinism"] > 0 and data["first_failure"] is None


# ----------------------------------------------------------------- progress and Ctrl-C


def test_check_seed_reports_progress_and_says_what_ctrl_c_interrupted(tmp_path, out, monkeypatch):
    calls = []

    def fake_case(spec, case, runner, reference, device):
        calls.append(case.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return CaseResult(case.id, checks=("output",))

    monkeypatch.setattr(seedcheck, "_check_case", fake_case)
    monkeypatch.setattr("tik_agent.sandbox.harness.load_seed_entry", lambda spec: None)
    _, err = out("check-seed", str(tiny_seed(tmp_path)), code=130)
    assert "interrupted: check-seed rmsnorm on cpu after 2 of " in err and err.count("interrupted") == 1
    assert "tik_agent.progress: rmsnorm: case 1/" in err   # the CLI's log handler on stderr


def test_ctrl_c_in_any_command_says_which(out, monkeypatch):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("tik_agent.spec.seeds.bundled", interrupted)
    _, err = out("seeds", code=130)
    assert err.strip() == "interrupted: tik-agent seeds"


def test_ctrl_c_while_a_run_is_made_prints_the_resume_command(tmp_path, out, monkeypatch):
    from tik_agent.search import setup

    def interrupted(path, config, fresh_audit=False, warm_cache=None):
        path.mkdir(parents=True)
        config.save(path)
        raise KeyboardInterrupt

    monkeypatch.setattr(setup, "create", interrupted)
    target = tmp_path / "new run"
    _, err = out("optimize", str(tiny_seed(tmp_path)), "--agent", "offline", "--run-dir", str(target), code=130)
    assert f"continue it with: tik-agent optimize --resume '{target}'" in err
    assert err.count("interrupted") == 1


def test_onpolicy_says_which_run_of_the_model_it_is_scoring(out, monkeypatch):
    """The newcomer's trial: after its shape checks, `make demo`'s on-policy check printed nothing
    for 3.5 minutes while the model ran four times (two kernel sets, two dtypes)."""
    from tik_agent.onpolicy import report

    calls = []

    def compare(ops, sequences, seed, dtype):
        calls.append((ops.name, dtype))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return None

    monkeypatch.setattr(report, "compare", compare)
    _, err = out("onpolicy", "--sequences", "2", code=130)
    lines = [ln.split("tik_agent.progress: ", 1)[1] for ln in err.splitlines() if "tik_agent.progress: " in ln]
    assert [ln.rsplit(",", 1)[0] for ln in lines] == [
        "scoring 2 sequences as sampler and trainer: certified kernels, float32 (1 of 4)",
        "scoring 2 sequences as sampler and trainer: stock kernels, float32 (2 of 4)"]
    assert calls == [("certified", "float32"), ("stock", "float32")]


def test_worker_phases_are_reported_as_they_change_and_while_they_last(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tik_agent.progress")
    watch = phases.PhaseWatch(tmp_path / "progress", {}, label="the seed's worker", cases="8 fixed parity cases")
    assert watch() is None and not caplog.records          # nothing until something happens
    (tmp_path / "progress").write_text("parity")
    watch()
    assert [r.getMessage() for r in caplog.records] == ["the seed's worker: parity phase, 0 s in; 8 fixed parity cases"]
    monkeypatch.setattr(phases, "HEARTBEAT_S", 0.0)
    time.sleep(0.01)
    watch()
    assert caplog.records[-1].getMessage() == "the seed's worker: parity phase for 0 s, 0 s in all; 8 fixed parity cases"


# ----------------------------------------------------------------- optimize --rng-seed


def test_optimize_takes_rng_seed_and_still_the_old_seed_with_a_warning(tmp_path, out):
    run = tmp_path / "run"
    run.mkdir()
    tiny_config(tmp_path, "run").save(run)   # rng_seed 0
    _, err = out("optimize", "--resume", str(run), "--rng-seed", "5", code=2)
    assert "--rng-seed: this run uses 0" in err and "deprecated" not in err
    _, err = out("optimize", "--resume", str(run), "--seed", "5", code=2)   # the old name, the same option
    assert "optimize --seed is deprecated: use --rng-seed" in err and "--rng-seed: this run uses 0" in err
    _, err = out("optimize", "rmsnorm", "--seed", "1", "--rng-seed", "2", code=2)
    assert "give --rng-seed only" in err
    text, _ = out("optimize", "--help")
    assert "--rng-seed S" in text and "Deprecated: --rng-seed" in " ".join(text.split())


def test_a_missing_directory_is_worded_the_same_by_every_view(tmp_path, out):
    missing = tmp_path / "nonexistent"
    errors = {out(command, str(missing), code=2)[1].strip() for command in ("runs", "lineage", "report")}
    errors.add(out("show", str(missing), "seed", code=2)[1].strip())
    # The newcomer's trial: --resume said "not a tik-agent run (no run.json)" of a missing directory.
    errors.add(out("optimize", "--resume", str(missing), code=2)[1].strip())
    assert errors == {f"error: {missing}: no such directory"}
    (tmp_path / "file").write_text("")
    assert {out(*c, str(tmp_path / "file"), code=2)[1].strip() for c in (("runs",), ("lineage",), ("optimize", "--resume"))} \
        == {f"error: {tmp_path / 'file'}: not a directory"}


# ----------------------------------------------------------------- what a count of cases counts


def test_case_counts_say_fixed_and_what_an_evaluation_adds(capsys):
    from tik_agent.cli.eval_commands import render
    from tik_agent.judge.records import Verdict
    from tik_agent.outcomes import Outcome
    from tik_agent.spec.cases import count_text

    assert count_text(["grid"] * 54 + ["hidden"] * 4 + ["above-grid"] * 3) == "61 fixed parity cases"
    origins = ["grid"] * 58 + ["above-grid"] * 3 + ["literal"] * 3 + ["drawn"] * 2
    assert count_text(origins) == "66 parity cases (61 fixed + 5 this evaluation adds)"
    cases = [{"case": str(i), "passed": True, "params": {"origin": o}} for i, o in enumerate(origins)]
    render(Verdict(Outcome.PASSED, None, cases=cases, environment={"device": "cpu"}), "rmsnorm")
    assert "parity: 66/66 parity cases (61 fixed + 5 this evaluation adds) bit-exact" in capsys.readouterr().out
    view_commands._print_report({"outcome": "passed", "cases": cases}, True)
    assert "parity 66/66 parity cases (61 fixed + 5 this evaluation adds)" in capsys.readouterr().out
