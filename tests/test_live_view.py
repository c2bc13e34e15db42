"""The live view at the sizes people's terminals have: 80x24 and 200x50, from a synthetic snapshot."""

from __future__ import annotations

import re
import time

import pytest
from rich.console import Console

from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord
from tik_agent.run.runconfig import Limits
from tik_agent.search.budget import Spend, gauges
from tik_agent.search.frontier import Member
from tik_agent.search.tickets import Snapshot, Ticket
from tik_agent.view.live import render

OUTCOMES = [Outcome.ACCEPTED, Outcome.NOT_FASTER, Outcome.PARITY_FAILED,
            Outcome.REJECTED_STATIC, Outcome.DUPLICATE]


def snapshot(n_recent: int = 10) -> Snapshot:
    # Odd attempts come from the seed (one measurement: the same figure against the parent),
    # even ones from a0001.
    recent = [AttemptRecord(
        attempt_id=f"a{i:04d}", index=i, parent_commit="c" * 40, parent_id="seed" if i % 2 else "a0001",
        outcome=OUTCOMES[i % len(OUTCOMES)],
        reason="[missing-jit] a long reason that goes on well past the width of any terminal " * 2,
        rationale="ROWS_PER_PROGRAM = 16 (was 1)", speedup=1.0 + i / 10,
        speedup_vs_parent=1.0 + i / 10 if i % 2 else 1.0 + i / 20, noise=0.04,
        eval_s=12.0) for i in range(1, n_recent + 1)]
    now = time.time()
    flight = [Ticket("a0099", 99, Member("d" * 40, "a0007", 2.5, 0.06), started=now - 300, stage="evaluating",
                     stage_started=now - 20)]
    return Snapshot(run_id="20261201-090000-rmsnorm", seed="rmsnorm", agent="offline", model=None, workers=1,
                    gauges=gauges(Limits(iterations=200, time_s=8 * 3600), Spend(10, 1, 600.0, 0, 0.0, 3)),
                    best=Member("e" * 40, "a0001", 1.1, 0.04), accepted=2, outcomes={}, in_flight=flight,
                    recent=recent, frontier=[Member("e" * 40, "a0001", 1.1, 0.04), Member("f" * 40, "seed", 1.0)])


@pytest.mark.parametrize("width,height", [(80, 24), (200, 50)])
def test_the_attempts_table_reads_at_80_and_200_columns(width, height):
    console = Console(record=True, width=width, height=height, file=open("/dev/null", "w"))
    console.print(render(snapshot(), console))
    lines = console.export_text().splitlines()
    assert len(lines) <= height
    assert max(len(ln) for ln in lines) <= width
    rows = [ln for ln in lines if re.match(r"a00\d\d\s+(seed|a0001)\s", ln.strip())]
    assert len(rows) >= (3 if width < 120 else 5), "\n".join(lines)
    for row in rows:  # every fixed column whole: id, parent, outcome, speedups and their spread, eval time
        cells = row.split()
        assert cells[2] in {o.value for o in OUTCOMES}
        assert re.fullmatch(r"\d\.\d{3}x", cells[3]) and cells[4] == "4%"   # vs seed, then its spread
        if cells[1] == "seed":   # one measurement, one figure: no separate figure against the parent
            idea = cells[7:]
            assert cells[5:7] == ["12", "s"]
        else:
            idea = cells[8:]
            assert re.fullmatch(r"\d\.\d{3}x", cells[5]) and cells[6:8] == ["12", "s"]
        if width >= 120:
            assert len(" ".join(idea)) >= 12   # the idea/reason beside it, cut to one line
    if width >= 120:
        assert {row.split()[1] for row in rows} == {"seed", "a0001"}
    assert any("[missing-jit]" in ln for ln in lines)  # brackets survive (no markup)
    text = "\n".join(lines)
    assert "evaluating 20 s (attempt 300 s)" in text  # the stage timer counts from the stage's start


def test_every_speedup_in_the_view_carries_its_spread():
    console = Console(record=True, width=200, height=50, file=open("/dev/null", "w"))
    console.print(render(snapshot(), console))
    text = console.export_text()
    head = text[:text.index("recent attempts")]
    figures = re.findall(r"\d+\.\d+x(?: ±\S+)?", head)
    assert figures and all("±" in f for f in figures), figures   # best, frontier, in flight
    assert "best 1.100x ±4% the seed" in head and "frontier: a0001 1.10x ±4%, seed" in head
    assert "a0099 from a0007 2.50x ±6%: evaluating" in head


def test_attempts_too_noisy_to_rank_are_a_warning_line():
    import dataclasses

    quiet = render(snapshot())
    noisy = dataclasses.replace(snapshot(), noise_margin=0.05, too_noisy=[
        {"attempt_id": "a0004", "retimes": 2, "noise": 0.39, "outcome": "not_faster", "resolved": False}])
    console = Console(record=True, width=200, height=50, file=open("/dev/null", "w"))
    console.print(quiet)
    assert "too noisy" not in console.export_text()
    console.print(render(noisy))
    assert ("timing too noisy to rank 1 attempt(s) (noise above the 5% margin): re-timed with more rounds; "
            "last a0004: re-timed 2x, noise ±39%, still too noisy: not_faster") in console.export_text()


def test_at_80_columns_every_shown_reason_is_whole_under_its_row():
    """Negative control: at 200 columns the same reason is cut to one line beside its row."""
    snap = snapshot()
    reason = " ".join(snap.recent[-2].reason.split())
    narrow = Console(record=True, width=80, height=24, file=open("/dev/null", "w"))
    narrow.print(render(snap, narrow))
    words = " ".join(narrow.export_text().split())
    assert reason in words and "…" not in words
    wide = Console(record=True, width=200, height=50, file=open("/dev/null", "w"))
    wide.print(render(snap, wide))
    shown = wide.export_text()
    assert reason not in " ".join(shown.split()) and "…" in shown


def test_a_short_terminal_shows_fewer_rows_not_a_cropped_view():
    console = Console(record=True, width=80, height=24, file=open("/dev/null", "w"))
    console.print(render(snapshot(30), console))
    assert len(console.export_text().splitlines()) <= 24


def test_ray_nodes_show_their_slots_and_throughput():
    import dataclasses

    from tik_agent.search.throughput import NodeUse

    snap = snapshot()
    nodes = [NodeUse("10.0.0.1", ["ray:0", "ray:1"], 12, 300.0, 1, 2.4), NodeUse("10.0.0.2", ["ray:2"], 5, 200.0, 0, 1.0)]
    flight = [dataclasses.replace(snap.in_flight[0], slot="ray:0@10.0.0.1")]
    snap = dataclasses.replace(snap, executor="ray", nodes=nodes, in_flight=flight)
    console = Console(record=True, width=80, height=24, file=open("/dev/null", "w"))
    console.print(render(snap, console))
    lines = console.export_text().splitlines()
    assert len(lines) <= 24 and max(len(ln) for ln in lines) <= 80
    text = "\n".join(lines)
    assert "ray 10.0.0.1: 2 slot(s) ray:0, ray:1; 12 evaluations, 2.4/min, 1 lost" in text
    assert "ray 10.0.0.2: 1 slot(s) ray:2; 5 evaluations, 1.0/min" in text
    assert "evaluating 20 s (attempt 300 s) on ray:0@10.0.0.1" in text


class _Still:
    """An optimizer that shows one snapshot."""

    def snapshot(self):
        return snapshot(3)


@pytest.mark.parametrize("err_is_terminal", [True, False])
def test_a_log_line_during_the_view_prints_above_it_not_under_it(err_is_terminal):
    """Both streams a terminal (the CLI's RichHandler on the stderr console): a warning logged while
    the view is up (a too-noisy re-time, a SIGINT) must reach the screen through the view's own
    console. rich gives another console the real stream behind the view's redirection, so before
    the fix the line went under the view and the next redraw wrote over it. Control: a log that
    goes to a file stays there."""
    import io
    import logging

    from rich.logging import RichHandler

    from tik_agent.view.live import LiveView

    screen, err = io.StringIO(), io.StringIO()
    view_console = Console(file=screen, force_terminal=True, color_system=None, width=80, height=30, markup=False)
    err_console = Console(file=err, force_terminal=err_is_terminal, color_system=None, width=80, markup=False)
    handler = RichHandler(console=err_console, show_path=False, show_time=False)
    logger = logging.getLogger("tik_agent.test_live_view")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with LiveView(view_console, _Still(), logger="tik_agent.test_live_view"):
            logger.warning("a0002: too noisy to rank; re-timing with 10 rounds (1 of 2)")
        assert handler.console is err_console      # given back when the view closes
        logger.warning("after the view")
    finally:
        logger.removeHandler(handler)
    on_screen, in_err = screen.getvalue(), err.getvalue()
    if err_is_terminal:
        assert "re-timing with 10 rounds" in on_screen and "re-timing" not in in_err
        assert "after the view" in in_err
    else:
        assert "re-timing with 10 rounds" in in_err and "re-timing" not in on_screen


def test_in_a_pipe_the_heartbeat_logs_each_attempt_in_flight_in_the_views_words(caplog):
    """The newcomer's trial: `make demo | tee` showed nothing for 4.5 minutes while an attempt was
    evaluated (no live view in a pipe, one line per finished attempt)."""
    import logging

    from tik_agent.view.heartbeat import Heartbeat

    caplog.set_level(logging.INFO, logger="tik_agent.view.heartbeat")
    with Heartbeat(_Still(), every=0.02):
        time.sleep(0.3)
    lines = [r.getMessage() for r in caplog.records if r.name == "tik_agent.view.heartbeat"]
    assert lines and all(ln.startswith("a0099 from a0007 2.50x ±6%: evaluating 20 s (attempt 300 s)") for ln in lines)
    count = len(lines)
    time.sleep(0.1)
    assert len([r for r in caplog.records if r.name == "tik_agent.view.heartbeat"]) == count   # stopped on exit


def test_the_heartbeat_is_quiet_once_the_run_is_stopping(caplog):
    import dataclasses
    import logging

    from tik_agent.view.heartbeat import Heartbeat

    class Stopping:
        def snapshot(self):
            return dataclasses.replace(snapshot(3), stop_reason="interrupted")

    caplog.set_level(logging.INFO, logger="tik_agent.view.heartbeat")
    Heartbeat(Stopping()).beat()
    assert not caplog.records


def test_an_empty_frontier_says_so():
    """The trial's exhausted run ended its view with a bare "frontier:"."""
    import dataclasses

    console = Console(record=True, width=80, height=30, file=open("/dev/null", "w"))
    console.print(render(dataclasses.replace(snapshot(3), frontier=[], stop_reason="exhausted"), console))
    assert "frontier: none left (each kernel set aside)" in " ".join(console.export_text().split())
