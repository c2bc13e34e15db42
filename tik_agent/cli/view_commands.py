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

from tik_agent.cli.output import EXIT_OK, EXIT_USAGE, emit, line, output_dir, say, source
from tik_agent.errors import UsageError
from tik_agent.run import rundir
from tik_agent.run.journal import AttemptOutcome, AttemptRecord, RunSummary, finished_records, read_json
from tik_agent.run.lineage import EVALUATION_FILE, KERNEL_FILE, SEED_TAG, open_run
from tik_agent.run.runconfig import RunConfig, is_run_dir

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
                      str(summary.accepted), f"{summary.best_speedup:.3f}x",
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

    def label(commit: str, name: str, speedup: float, vs_parent: float | None) -> Text:
        n = tried.get(commit, 0)
        text = line((name, "bold"), f" {speedup:.3f}x the seed",
                    f" ({vs_parent:.3f}x its parent)" if vs_parent is not None else "",
                    (f" {commit[:10]}, {n} attempt{'' if n == 1 else 's'} from it", "dim"))
        if commit == best:
            text.append("  <- best (main)", style="bold green")
        return text

    tree = Tree(label(root, SEED_TAG, 1.0, None))

    def grow(node: Tree, commit: str) -> None:
        for k in children.get(commit, []):
            grow(node.add(label(k.commit, k.attempt_id, k.speedup_vs_seed, k.speedup_vs_parent)), k.commit)

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
        report = next((read_json(attempt_dir / n) for n in ("confirm.json", "report.json")
                       if (attempt_dir / n).is_file()), None)
        diff = _read(attempt_dir / "diff.patch")
        if record and record.rationale:
            say(f"idea: {record.rationale}")
        promoted = record is not None and record.outcome is AttemptOutcome.ACCEPTED
    else:
        commit = lin.resolve(ident)
        trailers = lin.trailers(commit)
        say(f"commit {commit}  " + ", ".join(f"{k}: {v}" for k, v in trailers.items()))
        text = lin.file_at(commit, KERNEL_FILE)
        report = _loads(lin.file_at(commit, EVALUATION_FILE), f"{EVALUATION_FILE} of {commit[:12]}")
        parent = lin.parents(commit)
        diff, promoted = None, True
        if parent:
            from tik_agent.search.briefing import source_diff

            diff = source_diff(lin.file_at(parent[0], KERNEL_FILE), text, parent[0][:10], commit[:10])
    if text is not None:
        source(text)
    if report is not None:
        _print_report(report, promoted)
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


def _print_report(report: dict, promoted: bool) -> None:
    """The evaluator's report; only a promoted kernel's speedup is stated as its speed, a
    rejected attempt's is a measurement that did not count."""
    cases = report.get("cases", [])
    passed = sum(1 for c in cases if c.get("passed"))
    outcome = report.get("outcome", report.get("kind"))
    text = f"evaluation: {outcome}, parity {passed}/{len(cases)} cases"
    speed = report.get("speedup")
    if speed is not None:
        text += f", {speed:.3f}x the seed" if promoted else f", measured {speed:.3f}x the seed (not promoted)"
    if report.get("speedup_vs_parent") is not None:
        text += f", {report['speedup_vs_parent']:.3f}x the parent"
    if report.get("noise") is not None:
        text += f", noise {report['noise']:.1%}"
    say(text)
    if report.get("reason"):
        say(f"  {report['reason']}")
    if report.get("timing"):
        table = Table(title="timing (median ms)", title_justify="left")
        for col in ("cell", "shape", "seed", "candidate", "parent", "vs seed"):
            table.add_column(col, justify="left" if col in ("cell", "shape") else "right")
        for c in report["timing"]:
            parent = c.get("parent")
            table.add_row(c["name"], c["shape"], f"{c['seed']['median_ms']:.3f}", f"{c['candidate']['median_ms']:.3f}",
                          f"{parent['median_ms']:.3f}" if parent else "-", f"{c['speedup']:.3f}x")
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
