"""The live view of a running optimisation (rich), redrawn from snapshots.

The loop knows nothing of the terminal: it offers :meth:`Optimizer.snapshot`,
and this module draws one: progress against every budget, the best kernel and
the frontier, the attempts in flight and a table of recent outcomes.  The CLI
uses it only on a terminal; elsewhere the loop's log lines are the view.
"""

from __future__ import annotations

import logging
import time

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.logging import RichHandler
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tik_agent import figures
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import SEED_TAG
from tik_agent.search.budget import Gauge
from tik_agent.search.frontier import Member
from tik_agent.search.optimize import Optimizer
from tik_agent.search.tickets import Snapshot, Ticket
from tik_agent.run.runconfig import format_duration

OUTCOME_STYLE = {   # every attempt outcome (tik_agent.outcomes.ATTEMPT_OUTCOMES)
    Outcome.ACCEPTED: "bold green", Outcome.NOT_FASTER: "yellow", Outcome.UNCONFIRMED: "yellow",
    Outcome.SLOWER: "yellow", Outcome.NO_CODE: "dim", Outcome.DUPLICATE: "dim", Outcome.PARITY_FAILED: "red",
    Outcome.INTEGRITY_FAILED: "red", Outcome.COMPILE_ERROR: "magenta", Outcome.RUNTIME_ERROR: "magenta",
    Outcome.REJECTED_STATIC: "magenta", Outcome.TIMEOUT: "red", Outcome.CRASHED: "red",
}


def _amount(gauge: Gauge, value: float | None) -> str:
    if value is None:
        return "no limit"
    if gauge.unit == "s":
        return format_duration(value)
    if gauge.unit == "$":
        return f"${value:.2f}"
    return f"{value:,.0f}"


def _speed(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def _member(m: Member) -> str:
    """A frontier kernel and its speed: ``a0003 2.96x ±4%``; the seed is the reference."""
    return SEED_TAG if m.name == SEED_TAG else f"{m.name} {figures.speedup(m.speedup, m.noise, 2)}"


def render(snap: Snapshot, console: Console | None = None) -> RenderableType:
    """The view of ``snap``; when ``console`` is given, as many recent attempts as fit its height."""
    head = Text.assemble(("run ", "bold"), snap.run_id,
                         f"  seed {snap.seed}  agent {snap.agent}" + (f" ({snap.model})" if snap.model else ""),
                         f"  workers {snap.workers}")
    budgets = Table.grid(padding=(0, 1))
    for g in snap.gauges:
        bar = ProgressBar(total=1.0, completed=g.fraction or 0.0, width=24) if g.limit else Text("", style="dim")
        budgets.add_row(Text(g.name, style="bold"), bar, f"{_amount(g, g.used)} / {_amount(g, g.limit)}")
    if snap.best.name == SEED_TAG:
        best = Text.assemble(("best ", "bold"), "the seed (nothing accepted yet)")
    else:
        best = Text.assemble(("best ", "bold"), (figures.speedup(snap.best.speedup, snap.best.noise), "bold green"),
                             f" the seed ({snap.best.name}, {snap.best.commit[:10]})")
    frontier = ", ".join(_member(m) for m in snap.frontier) or "none left (each kernel set aside)"
    best.append(f"   accepted {snap.accepted}   frontier: {frontier}")
    lines: list[RenderableType] = [head, budgets, best, *_node_lines(snap), *_noise_lines(snap)]
    now = time.time()
    lines.extend(Text(f"  {ticket_line(t, now)}", style="cyan") for t in snap.in_flight)
    if snap.paused:
        lines.append(Text(f"  paused: {snap.paused}", style="yellow"))
    if snap.stop_reason:
        lines.append(Text(f"  stopping: {snap.stop_reason}", style="yellow"))
    recent = list(reversed(snap.recent))
    wide = console is None or console.width >= WIDE
    if console is not None:
        used = len(console.render_lines(Group(*lines), console.options, pad=False))
        room = console.size.height - used - 4  # the title, the header (and its rule); one spare line
        if wide:
            recent = recent[:max(1, room)]
        else:  # each attempt takes its row and its note's lines: as many whole attempts as fit
            kept, height = [], 0
            for r in recent:
                height += len(console.render_lines(_narrow_row(r), console.options, pad=False))
                if kept and height > room:
                    break
                kept.append(r)
            recent = kept
    lines.append(_attempts_table(recent) if wide else _attempts_lines(recent))
    return Group(*lines)


def ticket_line(t: Ticket, now: float) -> str:
    """An attempt in flight: ``a0002 from a0001 3.27x ±33%: evaluating 157 s (attempt 577 s) on cpu:0@vm``."""
    origin = f" from {_member(t.parent)}" if t.parent else ""
    stage_s, total_s = now - (t.stage_started or t.started), now - t.started
    timer = f"{stage_s:.0f} s" + (f" (attempt {total_s:.0f} s)" if total_s - stage_s >= 1 else "")
    where = f" on {t.slot}" if t.slot else ""
    return f"{t.attempt_id}{origin}: {t.stage} {timer}{where}"


def _node_lines(snap: Snapshot) -> list[Text]:
    """One line per node: its slots, this session's evaluations and their rate."""
    out = []
    for n in snap.nodes:
        lost = f", {n.lost} lost" if n.lost else ""
        out.append(Text(f"  {snap.executor} {n.node}: {len(n.slots)} slot(s) {', '.join(n.slots)}; "
                        f"{n.evaluations} evaluations, {n.per_min:.1f}/min{lost}",
                        style="dim", no_wrap=True, overflow="ellipsis"))
    return out


def _noise_lines(snap: Snapshot) -> list[Text]:
    """A warning while timings are too noisy to rank candidates (see search/promotion.py)."""
    if not snap.too_noisy:
        return []
    last = snap.too_noisy[-1]
    state = "resolved" if last["resolved"] else f"still too noisy: {last['outcome']}"
    return [Text(f"  timing too noisy to rank {len(snap.too_noisy)} attempt(s) (noise above the "
                 f"{snap.noise_margin:.0%} margin): re-timed with more rounds; last {last['attempt_id']}: "
                 f"re-timed {last['retimes']}x, noise {figures.spread(last['noise'])}, {state}",
                 style="yellow", no_wrap=True, overflow="ellipsis")]


# Fixed columns: (title, justify, width).  The spread (±) is the verdict's noise, of both figures.
COLUMNS = (("id", "left", 5), ("parent", "left", 6), ("outcome", "left", 16), ("vs seed", "right", 7),
           ("±", "right", 4), ("vs par.", "right", 7), ("eval", "right", 5))
# From this width the idea or reason fits beside the fixed columns; below it goes under its row.
WIDE = 120


def _note(r) -> str:
    note = r.rationale if r.outcome is Outcome.ACCEPTED else (r.reason or r.rationale)
    return " ".join((note or "").split())


def _cells(r) -> list[Text]:
    # A rejected attempt's speedup is a measurement that did not count: dim, not a headline.
    speed_style = "" if r.outcome is Outcome.ACCEPTED else "dim"
    # A kernel from the seed was timed against the seed only: one figure, "vs par." is left empty.
    measured = r.speedup is not None
    vs_parent = "" if r.parent_id == SEED_TAG else _speed(r.speedup_vs_parent)
    return [Text(r.attempt_id), Text(r.parent_id), Text(r.outcome.value, style=OUTCOME_STYLE.get(r.outcome, "")),
            Text(_speed(r.speedup), style=speed_style),
            Text(figures.spread(r.noise)[1:] if measured else "", style=speed_style),
            Text(vs_parent if measured else "", style=speed_style), Text(f"{r.eval_s:.0f} s")]


def _attempts_table(records) -> Table:
    """Wide terminals: fixed columns that never wrap or shrink; the idea/reason takes what is
    left, cut to one line."""
    table = Table(title="recent attempts", title_justify="left", expand=False, padding=(0, 1), box=None,
                  pad_edge=False, header_style="bold underline")
    for col, justify, width in COLUMNS:
        table.add_column(col, justify=justify, no_wrap=True, min_width=width)
    table.add_column("idea or reason", justify="left", ratio=1, min_width=8)
    for r in records:
        table.add_row(*_cells(r), Text(_note(r), no_wrap=True, overflow="ellipsis"))
    return table


def _row(cells: list[Text]) -> Text:
    parts = []
    for cell, (_, justify, width) in zip(cells, COLUMNS):
        cell = cell.copy()
        cell.align(justify, width)
        parts.append(cell)
    return Text(" ").join(parts)


def _narrow_row(r) -> Group:
    """One attempt at 80 columns: its fixed columns, then its whole idea or reason below, indented."""
    note = _note(r)
    return Group(_row(_cells(r)), Padding(Text(note, style="dim"), (0, 0, 0, 7))) if note else Group(_row(_cells(r)))


def _attempts_lines(records) -> Group:
    """Narrow terminals: the same fixed columns, each attempt's idea or reason under its row,
    wrapped between words and never cut."""
    header = _row([Text(col, style="bold underline") for col, _, _ in COLUMNS])
    return Group(Text("recent attempts (idea or reason below each)"), header, *(_narrow_row(r) for r in records))


class LiveView:
    """``with LiveView(console, optimizer): optimizer.run()`` redraws a few times a second.

    While it is up, the log lines of ``logger`` that go to a terminal are printed through the
    view's console, above the view.  rich hands another console the real stream behind the
    view's stderr redirection, so a line from the stderr console would be written under the
    view and drawn over at the next refresh: the line lost, a stale piece of the view left on
    the screen.  A log that goes to a file is left alone.
    """

    def __init__(self, console: Console, optimizer: Optimizer, refresh_per_second: float = 2.0,
                 logger: str = "tik_agent"):
        self._live = Live(console=console, refresh_per_second=refresh_per_second,
                          get_renderable=lambda: render(optimizer.snapshot(), console))
        self._logger = logging.getLogger(logger)
        self._rerouted: list[tuple[RichHandler, Console]] = []

    def __enter__(self) -> "LiveView":
        self._live.__enter__()
        for handler in self._logger.handlers:
            if isinstance(handler, RichHandler) and handler.console is not self._live.console \
                    and handler.console.is_terminal:
                self._rerouted.append((handler, handler.console))
                handler.console = self._live.console
        return self

    def __exit__(self, *exc) -> None:
        for handler, own in self._rerouted:
            handler.console = own
        self._rerouted.clear()
        self._live.__exit__(*exc)
