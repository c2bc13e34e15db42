"""A picture of a run: each attempt's speedup in finishing order and the lineage tree (PNG), and an HTML page.

matplotlib is used through :class:`matplotlib.figure.Figure` and the Agg
canvas directly: no pyplot, no global backend switch, nothing changed at import.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path

from tik_agent import figures
from tik_agent.run.journal import AttemptRecord, RunSummary, finished_records
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import SEED_TAG, Lineage, open_run
from tik_agent.search.tickets import noise_of

REPORT_DIR = "report"
COLORS = {"accepted": "#2a9d3a", "not_faster": "#d4a017", "unconfirmed": "#e07b00", "slower": "#c77d00"}
OTHER_COLOR = "#b0b0b0"


@dataclass(frozen=True)
class Node:
    commit: str
    name: str
    parent: str | None
    speedup: float
    x: float          # finishing position of the attempt (0 for the seed)
    noise: float | None = None   # the spread of the speedup


def lineage_nodes(lineage: Lineage, records: list[AttemptRecord]) -> list[Node]:
    position = {r.attempt_id: i + 1 for i, r in enumerate(records)}
    nodes = [Node(lineage.root_commit(), SEED_TAG, None, 1.0, 0)]
    for k in lineage.accepted():
        nodes.append(Node(k.commit, k.attempt_id, k.parent_commit, k.speedup_vs_seed,
                          position.get(k.attempt_id, int(k.attempt_id[1:])), noise_of(k)))
    return nodes


def device_of(lineage: Lineage, summary: RunSummary | None) -> str:
    """Where the times come from: the device the seed's audit (and so every timing) ran on."""
    if summary is not None and summary.environment.get("device_name"):
        return str(summary.environment["device_name"])
    return lineage.trailers(lineage.root_commit()).get("Device", "unknown device")


def figure_png(lineage: Lineage, records: list[AttemptRecord], device: str = "unknown device") -> bytes:
    buf = io.BytesIO()
    figure(lineage, records, device).savefig(buf, format="png")
    return buf.getvalue()


def figure(lineage: Lineage, records: list[AttemptRecord], device: str = "unknown device"):
    """The two panels as a matplotlib Figure (tests read its axes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(12, 4.8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax, tree = fig.subplots(1, 2)

    xs = list(range(1, len(records) + 1))
    # An attempt without a speedup (no code, a rejection before timing) is a cross on a strip at
    # the bottom of the axes, so that every attempt shows.
    strip = ax.get_xaxis_transform()
    for outcome in sorted({r.outcome.value for r in records}):
        color = COLORS.get(outcome, OTHER_COLOR)
        mine = [(x, r) for x, r in zip(xs, records) if r.outcome.value == outcome]
        timed = [(x, r) for x, r in mine if r.speedup]
        if timed:
            # Noise bars: the evaluation's relative spread of the timings around the speedup.
            ax.errorbar([x for x, _ in timed], [r.speedup for _, r in timed],
                        yerr=[r.speedup * (r.noise or 0.0) for _, r in timed], fmt="none", ecolor=color,
                        elinewidth=0.8, alpha=0.6, zorder=1)
            ax.scatter([x for x, _ in timed], [r.speedup for _, r in timed], s=36 if outcome == "accepted" else 14,
                       label=outcome, color=color, marker="*" if outcome == "accepted" else "o",
                       zorder=3 if outcome == "accepted" else 2)
        untimed = [x for x, r in mine if not r.speedup]
        if untimed:
            ax.scatter(untimed, [0.03] * len(untimed), transform=strip, s=14, marker="x", color=color,
                       label=f"{outcome} (not timed)" if not timed else None, zorder=2)
    best, steps = 1.0, [1.0]
    for r in records:
        if r.outcome is Outcome.ACCEPTED and (r.speedup or 0) > best:
            best = r.speedup
        steps.append(best)
    ax.step([0] + xs, steps, where="post", color="#2a9d3a", linewidth=1.5, label="best so far")
    ax.axhline(1.0, color="#666", linewidth=0.8, linestyle=":")
    fig.suptitle(f"run {lineage.run_id}: times measured on {device}", fontsize=10)
    # Two lines: on one, the title was wider than its panel and lost its first letters.
    ax.set(title="speedup over the seed, attempt by attempt\n(bars: timing noise; x: not timed)",
           xlabel="attempt (finishing order)", ylabel="workload speedup vs seed")
    if records:
        ax.legend(fontsize=7, loc="best")
    else:
        # Nothing to plot but the seed: fixed, readable axes and a note instead of a degenerate plot.
        ax.set_xlim(0, 10)
        ax.set_ylim(0.5, 1.5)
        ax.text(0.5, 0.6, "no attempts yet", transform=ax.transAxes, ha="center", va="center", color="#666")

    nodes = lineage_nodes(lineage, records)
    by_commit = {n.commit: n for n in nodes}
    best_commit = lineage.best_commit()
    on_path, c = set(), best_commit
    while c is not None:
        on_path.add(c)
        c = by_commit[c].parent if c in by_commit else None
    for n in nodes:
        if n.parent in by_commit:
            p = by_commit[n.parent]
            bold = n.commit in on_path
            tree.plot([p.x, n.x], [p.speedup, n.speedup], color="#2a9d3a" if bold else "#999",
                      linewidth=2 if bold else 1, zorder=1)
    for n in nodes:
        tree.scatter([n.x], [n.speedup], s=60 if n.commit == best_commit else 30, zorder=2,
                     color="#2a9d3a" if n.commit in on_path else "#777")
        text = n.name if n.name == SEED_TAG else f"{n.name} {figures.speedup(n.speedup, n.noise, 2)}"
        tree.annotate(text, (n.x, n.speedup), textcoords="offset points",
                      xytext=(4, 4), fontsize=7)
    tree.set(title="lineage of accepted kernels (best path in green)", xlabel="attempt (finishing order)",
             ylabel="speedup vs seed")
    if len(nodes) == 1:
        tree.set_xlim(-1, 10)
        tree.set_ylim(0.5, 1.5)
        tree.text(0.5, 0.4, "no accepted kernel yet", transform=tree.transAxes, ha="center", color="#666")
    for axis in (ax, tree):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # attempts are whole numbers
    return fig


def _table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(run_dir: Path, lineage: Lineage, summary: RunSummary | None, records: list[AttemptRecord],
              png: bytes) -> str:
    facts = []
    if summary is not None:
        facts = [["seed", summary.seed], ["agent", f"{summary.agent} ({summary.model or 'no model'})"],
                 ["attempts", f"{summary.iterations} of {summary.iterations_limit}"],
                 ["accepted", summary.accepted],
                 ["best speedup", "the seed itself" if summary.best_attempt == SEED_TAG else
                  f"{figures.speedup(summary.best_speedup, summary.best_noise)} ({summary.best_attempt})"],
                 ["tokens", f"{summary.input_tokens} in, {summary.output_tokens} out"],
                 ["cost", "unknown" if summary.cost_usd is None else f"${summary.cost_usd:.4f}"],
                 ["stop reason", summary.stop_reason or "(running or killed)"],
                 ["device", summary.environment.get("device_name", "?")],
                 ["versions", f"torch {summary.environment.get('torch')}, triton {summary.environment.get('triton')}"]]
    root = lineage.root_commit()
    accepted = [[k.attempt_id, lineage.trailers(k.parent_commit).get("Attempt-Id", SEED_TAG),
                 figures.speedup(k.speedup_vs_seed, noise_of(k)),
                 "(the seed)" if k.parent_commit == root or k.speedup_vs_parent is None else
                 figures.speedup(k.speedup_vs_parent, noise_of(k)), k.commit[:12]]
                for k in lineage.accepted()]
    counts: dict[str, int] = {}
    for r in records:
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    image = base64.b64encode(png).decode()
    title = html.escape(f"tik-agent run {lineage.run_id} (times on {device_of(lineage, summary)})")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1400px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>{title}</h1>
{_table(["", ""], facts)}
{"<p>No attempts yet: the picture shows the seed only.</p>" if not records else ""}
<img alt="speedup by attempt and lineage" src="data:image/png;base64,{image}">
<h2>Accepted kernels</h2>
{_table(["attempt", "parent", "vs seed", "vs parent", "commit"], accepted)}
<h2>Attempts by outcome</h2>
{_table(["outcome", "attempts"], sorted(counts.items()))}
<p>Best kernel: <code>{html.escape(lineage.best_commit())}</code> (branch main of {html.escape(str(run_dir))}).</p>
</body></html>
"""


def write_report(run_dir: Path, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``report.png`` and ``report.html`` (default: ``RUN/report/``); return their paths."""
    run_dir = Path(run_dir)
    lineage = open_run(run_dir)
    records = finished_records(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    summary = RunSummary.load(run_dir)
    png = figure_png(lineage, records, device_of(lineage, summary))
    png_path, html_path = out / "report.png", out / "report.html"
    png_path.write_bytes(png)
    html_path.write_text(html_page(run_dir, lineage, summary, records, png))
    return png_path, html_path
