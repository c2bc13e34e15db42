"""Time and counts that must not mislead: running time across resumes, the report of a run with no
attempts (axes, note, device, integer ticks), a rejected attempt's speedup in `show`."""

from __future__ import annotations

import pytest

from tik_agent.cli import view_commands
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord, ResumeState
from tik_agent.run.lineage import open_run
from tik_agent.view.report import figure, write_report

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


def _record(aid: str, finished_at: float) -> dict:
    return AttemptRecord(attempt_id=aid, index=int(aid[1:]), parent_commit="0" * 40, parent_id="seed",
                         outcome=Outcome.ACCEPTED, finished_at=finished_at).to_dict()


def test_running_time_counts_sessions_not_the_gap_between_them():
    day = 86400.0
    events = [
        {"event": "session", "t": 100.0}, {"event": "started", "attempt_id": "a0001", "index": 1, "t": 101.0},
        {"event": "finished", "record": _record("a0001", 150.0), "t": 150.0}, {"event": "stopped", "t": 160.0},
        # a day later: a resume restores a record before its session starts (its t is the commit's time,
        # but even a line written "now" must not stretch the last session over the idle day)
        {"event": "finished", "record": _record("a0002", 155.0), "t": 160.0 + day},
        {"event": "session", "t": 170.0 + day}, {"event": "stopped", "t": 200.0 + day},
    ]
    assert ResumeState.replay(events).elapsed_s == pytest.approx(60.0 + 30.0)
    killed = [{"event": "session", "t": 0.0}, {"event": "started", "attempt_id": "a0001", "index": 1, "t": 40.0},
              {"event": "session", "t": 40.0 + day}, {"event": "stopped", "t": 50.0 + day}]
    assert ResumeState.replay(killed).elapsed_s == pytest.approx(40.0 + 10.0)   # a killed session ends at its last line


def test_the_report_of_a_run_without_attempts_has_sane_axes_a_note_and_the_device(run):
    lin = open_run(run)
    fig = figure(lin, [], "CPU (x86_64, Triton interpreter)")
    speed, tree = fig.axes
    assert "times measured on CPU (x86_64, Triton interpreter)" in fig.get_suptitle()
    for ax in (speed, tree):
        low, high = ax.get_xlim()
        assert high - low >= 5 and ax.get_ylim()[1] - ax.get_ylim()[0] >= 0.5   # not a degenerate range
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks       # attempts are whole numbers
    assert any("no attempts yet" in t.get_text() for t in speed.texts)
    png, page = write_report(run)
    assert png.stat().st_size > 0 and "No attempts yet" in page.read_text()


def test_the_attempt_axis_has_integer_ticks_with_few_attempts(run):
    lin = open_run(run)
    records = [AttemptRecord.from_dict(_record(f"a000{i}", float(i))) for i in (1, 2, 3)]
    for r, s in zip(records, (1.2, 1.5, 1.1)):
        r.speedup = s
    speed, _ = figure(lin, records, "x").axes
    low, high = speed.get_xlim()
    assert all(float(t).is_integer() for t in speed.get_xticks() if low <= t <= high)


@pytest.mark.parametrize("promoted, words", [(False, "measured 1.900x ±3% the seed (not promoted)"),
                                             (True, "1.900x ±3% the seed")])
def test_show_states_a_rejected_attempts_speedup_as_a_measurement(capsys, promoted, words):
    view_commands._print_report({"outcome": "passed", "cases": [{"passed": True}], "speedup": 1.9, "noise": 0.03},
                                promoted)
    text = capsys.readouterr().out
    assert words in text and (promoted or "not promoted" in text)
    if promoted:
        assert "not promoted" not in text


def _timed_report(parent_ms=None):
    cell = {"name": "small", "shape": "M=16, N=512, float32", "seed": {"median_ms": 2.0},
            "candidate": {"median_ms": 0.548}, "speedup": 2.0 / 0.548, "noise": 0.04}
    if parent_ms is not None:
        cell["parent"] = {"median_ms": parent_ms}
    return {"outcome": "passed", "cases": [{"passed": True}], "speedup": 2.0 / 0.548, "noise": 0.04,
            "speedup_vs_parent": 2.0 / 0.548 if parent_ms is None else parent_ms / 0.548, "timing": [cell]}


def test_show_gives_one_figure_when_the_parent_is_the_seed(capsys):
    view_commands._print_report(_timed_report(), True, parent_is_seed=True)
    text = capsys.readouterr().out
    assert "evaluation: passed, parity 1/1 fixed parity cases, 3.650x ±4% the seed, noise 4.0%" in text
    assert "parent" not in text   # one measurement: no second figure, no parent column
    # Control: a kernel from another kernel has its own figure against the parent, and its column.
    view_commands._print_report(_timed_report(parent_ms=0.663), True, parent_is_seed=False)
    text = capsys.readouterr().out
    assert "3.650x ±4% the seed (1.210x ±4% the parent)" in text and "parent" in text.split("timing")[1]


def test_the_report_shows_every_attempt_with_its_noise(run):
    """Timed attempts carry a noise bar; an attempt without a speedup is a cross on the bottom strip
    (negative control: before, only attempts with a speedup were drawn)."""
    lin = open_run(run)
    records = [AttemptRecord.from_dict(_record(f"a000{i}", float(i))) for i in (1, 2, 3)]
    records[0].speedup, records[0].noise = 1.5, 0.1
    records[1].outcome = Outcome.PARITY_FAILED           # never timed
    records[2].outcome, records[2].speedup, records[2].noise = Outcome.NOT_FASTER, 1.2, 0.05
    speed, _ = figure(lin, records, "x").axes
    bars = [c for c in speed.collections if type(c).__name__ == "LineCollection" and len(c.get_segments())]
    lengths = sorted(abs(seg[1][1] - seg[0][1]) for c in bars for seg in c.get_segments())
    assert lengths == pytest.approx([2 * 1.2 * 0.05, 2 * 1.5 * 0.1])
    labels = [h.get_label() for h in speed.get_legend().legend_handles]
    assert "parity_failed (not timed)" in labels
    untimed = [c for c in speed.collections if c.get_label() == "parity_failed (not timed)"]
    assert untimed and list(untimed[0].get_offsets()[:, 0]) == [2]


def test_every_title_of_the_report_lies_inside_the_figure(run):
    """The newcomer's trial: the left panel's title was wider than its panel and the PNG showed
    it as "eedup over the seed, attempt by attempt (bars: ..." (its first letters cut off)."""
    lin = open_run(run)
    records = [AttemptRecord.from_dict(_record(f"a000{i}", float(i))) for i in (1, 2, 3)]
    for r, s in zip(records, (6.4, 2.1, 3.5)):
        r.speedup, r.noise = s, 0.2
    fig = figure(lin, records, "CPU (x86_64, Triton interpreter)")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        box = ax.title.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (ax.get_title(), box.x0, box.x1, fig.bbox.width)
