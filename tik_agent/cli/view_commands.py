"""``tik-agent runs``, ``lineage``, ``show`` and ``report``: reading a run, never changing it.

Every file of a run may be missing, truncated or garbage (a disk filled up, a
person edited it): each is read through a loader that turns that into one line
naming the file (exit 2), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tik_agent import figures
from tik_agent.cli.output import EXIT_OK, EXIT_USAGE, emit, line, output_dir, say, source
from tik_agent.errors import UsageError
from tik_agent.run import rundir
from tik_agent.run.journal import AttemptOutcome, AttemptRecord, RunSummary, finished_records, read_json
from tik_agent.run.lineage import EVALUATION_FILE, KERNEL_FILE, SEED_TAG, AcceptedKernel, Lineage, open_run
from tik_agent.run.runconfig import RunConfig, is_run_dir
from tik_agent.search.tickets import noise_of

RUNS_DIR = Path("runs")


def runs(directory: Path = typer.Argument(RUNS_DIR, metavar="DIR", help="A directory of runs, or one run.")) -> None:
    """A table of runs."""
    if not directory.exists():
        raise UsageError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory")
    found = [directory] if is_run_dir(directory) else sorted(p for p in directory.iterdir() if is_run_dir(p))
    if not found:
        say(f"no runs in {directory}")
        raise typer.Exit(EXIT_OK)
    table = Table(title=f"runs in {directory}", title_justify="left")
    for col in ("run", "seed", "agent", "attempts", "accepted", "best", "tokens", "cost", "state"):
        numeric = col in ("attempts", "accepted", "best", "tokens", "cost")
        table.add_column(col, justify="right" if numeric else "left")
    unreadable = []
    for p in found:
        try:
            config, summary = RunConfig.load(p), RunSummary.load(p)
        except UsageError as exc:
            unreadable.append(str(exc))
            table.add_row(p.name, "?", "?", "-", "-", "-", "-", "-", "unreadable (see below)")
            continue
        holder = rundir.holder(p)
        agent = config.agent + (f" ({config.model})" if config.model else "")
        if summary is None:
            table.add_row(p.name, config.seed_name, agent, f"0/{config.limits.iterations}", "-", "-", "-", "-",
                          f"starting (pid {holder})" if holder else "not started")
            continue
        state = f"running (pid {holder})" if holder else (summary.stop_reason or "killed")
        table.add_row(p.name, summary.seed, agent, f"{summary.iterations}/{summary.iterations_limit}",
                      str(summary.accepted), _best(summary),
                      f"{summary.input_tokens + summary.output_tokens:,}",
                      "-" if summary.cost_usd is None else f"${summary.cost_usd:.2f}", state)
    emit(table)
    for message in unreadable:
        say(("error:", "red"), f" {message}", err=True)
    if unreadable:
        raise typer.Exit(EXIT_USAGE)


def lineage(run: Path = typer.Argument(..., metavar="RUN", help="A run directory.")) -> None:
    """The tree of accepted kernels with their speedups, and attempt counts by outcome."""
    lin = open_run(run)
    records = finished_records(run)
    tried: dict[str, int] = {}
    counts: dict[str, int] = {}
    for r in records:
        tried[r.parent_commit] = tried.get(r.parent_commit, 0) + 1
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    best, root = lin.best_commit(), lin.root_commit()
    children: dict[str, list] = {}
    for k in lin.accepted():
        children.setdefault(k.parent_commit, []).append(k)

    def label(commit: str, name: str, figure: str) -> Text:
        n = tried.get(commit, 0)
        text = line((name, "bold"), f" {figure}" if figure else "",
                    (f" {commit[:10]}, {n} attempt{'' if n == 1 else 's'} from it", "dim"))
        if commit == best:
            text.append("  <- best (main)", style="bold green")
        return text

    tree = Tree(label(root, SEED_TAG, "(the reference)"))

    def grow(node: Tree, commit: str) -> None:
        for k in children.get(commit, []):
            figure = figures.speedups(k.speedup_vs_seed, k.speedup_vs_parent, _noise(lin, k), commit == root)
            grow(node.add(label(k.commit, k.attempt_id, figure)), k.commit)

    grow(tree, root)
    emit(tree)
    table = Table(title=f"{len(records)} attempts by outcome", title_justify="left")
    table.add_column("outcome")
    table.add_column("attempts", justify="right")
    for outcome, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        table.add_row(outcome, str(n))
    emit(table)


def show(run: Path = typer.Argument(..., metavar="RUN", help="A run directory."),
         ident: str = typer.Argument(..., metavar="ID", help="An attempt id (a0007), seed, main or a commit.")) -> None:
    """An attempt's or a kernel's source, evaluator report and diff against its parent.

    In a file or a pipe the source is written verbatim (never cropped or wrapped).
    """
    lin = open_run(run)
    attempt_dir = run / "attempts" / ident
    if attempt_dir.is_dir():
        record = _record(attempt_dir / "record.json")
        head = f"attempt {ident}" + (f" from {record.parent_id}: {record.outcome.value}" if record else " (unfinished)")
        say(head)
        if record and record.reason:
            say(f"  {record.reason}")
        text = _read(attempt_dir / "candidate.py")
        report = _last_verdict(attempt_dir)
        diff = _read(attempt_dir / "diff.patch")
        if record and record.rationale:
            say(f"idea: {record.rationale}")
        promoted = record is not None and record.outcome is AttemptOutcome.ACCEPTED
        # Unfinished: the report says whether a parent other than the seed was timed.
        parent_is_seed = record.parent_id == SEED_TAG if record else not any(
            c.get("parent") for c in (report or {}).get("timing", []))
    else:
        commit = lin.resolve(ident)
        trailers = lin.trailers(commit)
        say(f"commit {commit}  " + ", ".join(f"{k}: {v}" for k, v in trailers.items()))
        text = lin.file_at(commit, KERNEL_FILE)
        report = _loads(lin.file_at(commit, EVALUATION_FILE), f"{EVALUATION_FILE} of {commit[:12]}")
        parent = lin.parents(commit)
        diff, promoted = None, True
        parent_is_seed = parent == [lin.root_commit()]
        if parent:
            from tik_agent.search.briefing import source_diff

            diff = source_diff(lin.file_at(parent[0], KERNEL_FILE), text, parent[0][:10], commit[:10])
    if text is not None:
        source(text)
    if report is not None:
        _print_report(report, promoted, parent_is_seed)
    if diff:
        source(diff, "diff", line_numbers=False)


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _loads(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: unreadable: {exc}") from None


def _record(path: Path) -> AttemptRecord | None:
    if not path.is_file():
        return None
    try:
        return AttemptRecord.from_dict(read_json(path))
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not an attempt record: {exc}") from None


def _best(summary: RunSummary) -> str:
    """The runs table's best speedup: with its spread, or "-" while the seed is the best."""
    if summary.best_attempt == SEED_TAG:
        return "-"
    return figures.speedup(summary.best_speedup, summary.best_noise)


def _noise(lin: Lineage, kernel: AcceptedKernel) -> float | None:
    """An accepted kernel's spread: its ``Noise`` trailer, else (older runs) its evaluation's."""
    noise = noise_of(kernel)
    if noise is None:
        noise = _loads(lin.file_at(kernel.commit, EVALUATION_FILE), f"{EVALUATION_FILE} of {kernel.commit[:12]}"
                       ).get("noise")
    return noise


def _last_verdict(attempt_dir: Path) -> dict | None:
    """The verdict that decided an attempt: the last of confirm.json, confirm-2.json, ... if any,
    else of report.json, report-2.json, ... (re-times of a verdict too noisy to rank)."""
    for stage in ("confirm", "report"):
        found = sorted((int(p.stem.partition("-")[2] or 1), p) for p in attempt_dir.glob(f"{stage}*.json")
                       if p.stem == stage or p.stem.partition("-")[2].isdigit())
        if found:
            return read_json(found[-1][1])
    return None


def _print_report(report: dict, promoted: bool, parent_is_seed: bool = False) -> None:
    """The evaluator's report; only a promoted kernel's speedup is stated as its speed, a
    rejected attempt's is a measurement that did not count.  When the parent is the seed
    the seed was timed once: one figure."""
    cases = report.get("cases", [])
    passed = sum(1 for c in cases if c.get("passed"))
    outcome = report.get("outcome", report.get("kind"))
    text = f"evaluation: {outcome}, parity {passed}/{len(cases)} cases"
    speed = report.get("speedup")
    if report.get("kind") == "seed":
        text += ", the seed's own audit (the reference of every speedup)"
    elif speed is not None:
        figure = figures.speedups(speed, report.get("speedup_vs_parent"), report.get("noise"), parent_is_seed,
                                  "the parent")
        text += f", {figure}" if promoted else f", measured {figure} (not promoted)"
    if report.get("noise") is not None:
        text += f", noise {report['noise']:.1%}"
    say(text)
    if report.get("reason"):
        say(f"  {report['reason']}")
    if report.get("timing"):
        timed_parent = any(c.get("parent") for c in report["timing"])
        table = Table(title="timing (median ms)", title_justify="left")
        columns = ["cell", "shape", "seed", "candidate"] + (["parent"] if timed_parent else []) + ["vs seed"]
        for col in columns:
            table.add_column(col, justify="left" if col in ("cell", "shape") else "right")
        for c in report["timing"]:
            parent = [f"{c['parent']['median_ms']:.3f}" if c.get("parent") else "-"] if timed_parent else []
            table.add_row(c["name"], c["shape"], f"{c['seed']['median_ms']:.3f}", f"{c['candidate']['median_ms']:.3f}",
                          *parent, figures.speedup(c["speedup"], c.get("noise")))
        emit(table)


def report(run: Path = typer.Argument(..., metavar="RUN", help="A run directory."),
           out: Path = typer.Option(None, metavar="DIR", help="Where to write report.png and report.html.  [default: RUN/report]"),
           ) -> None:
    """Write a picture of speedup over time and of the lineage (PNG, and HTML embedding it)."""
    from tik_agent.view.report import write_report

    open_run(run)  # a bad RUN is named before any directory is made
    png, page = write_report(run, output_dir(out, "--out") if out is not None else None)
    say(f"wrote {png}")
    say(f"wrote {page}")


def register(app: typer.Typer, cls: type) -> None:
    app.command("runs", cls=cls)(runs)
    app.command("lineage", cls=cls)(lineage)
    app.command("show", cls=cls)(show)
    app.command("report", cls=cls)(report)
