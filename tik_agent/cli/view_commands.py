"""``tik-agent runs``, ``lineage``, ``show`` and ``report``: reading a run, never changing it.

Every file of a run may be missing, truncated or garbage (a disk filled up, a
person edited it): each is read through a loader that turns that into one line
naming the file (exit 2), never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tik_agent import figures
from tik_agent.cli.output import EXIT_USAGE, console, emit, line, output_dir, say, source
from tik_agent.errors import UsageError
from tik_agent.run import rundir
from tik_agent.run.journal import AttemptRecord, RunSummary, finished_records, read_json
from tik_agent.outcomes import Outcome
from tik_agent.run.lineage import (EVALUATION_FILE, KERNEL_FILE, SEED_TAG, AcceptedKernel, Lineage, open_run,
                                   require_directory)
from tik_agent.run.runconfig import RunConfig, is_run_dir
from tik_agent.search.tickets import noise_of
from tik_agent.spec.cases import count_text

RUNS_DIR = Path("runs")


def runs(directory: Path = typer.Argument(RUNS_DIR, metavar="DIR", help="A directory of runs, or one run."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table.")) -> None:
    """A table of runs."""
    require_directory(directory)
    found = [directory] if is_run_dir(directory) else sorted(p for p in directory.iterdir() if is_run_dir(p))
    rows, unreadable = [], []
    for p in found:
        try:
            rows.append(_run_row(p))
        except UsageError as exc:
            unreadable.append(str(exc))
            rows.append({"run": p.name, "path": str(p), "state": "unreadable", "error": str(exc)})
    if as_json:
        say(json.dumps({"directory": str(directory), "runs": rows}, indent=2))
    elif not found:
        say(f"no runs in {directory}")
    else:
        emit(render_runs(directory, rows, console.width if console.is_terminal else None))
    for message in unreadable:
        say(("error:", "red"), f" {message}", err=True)
    if unreadable:
        raise typer.Exit(EXIT_USAGE)


def _run_row(p: Path) -> dict:
    """One run as ``runs --json`` gives it (UsageError for an unreadable run file)."""
    config, summary = RunConfig.load(p), RunSummary.load(p)
    holder = rundir.holder(p)
    row = {"run": p.name, "path": str(p), "seed": config.seed_name, "agent": config.agent, "model": config.model,
           "device": config.device, "attempts": 0, "attempts_limit": config.limits.iterations, "accepted": 0,
           "best_speedup": None, "best_noise": None, "best_attempt": None, "input_tokens": 0, "output_tokens": 0, "cost_usd": None,
           "stop_reason": None, "pid": int(holder) if holder and holder.isdigit() else holder}
    if summary is None:
        row["state"] = "starting" if holder else "not started"
        return row
    row.update(seed=summary.seed, attempts=summary.iterations, attempts_limit=summary.iterations_limit,
               accepted=summary.accepted, best_speedup=summary.best_speedup, best_noise=summary.best_noise,
               best_attempt=summary.best_attempt,
               input_tokens=summary.input_tokens, output_tokens=summary.output_tokens, cost_usd=summary.cost_usd,
               stop_reason=summary.stop_reason)
    row["state"] = "running" if holder else (summary.stop_reason or "killed")
    return row


# Below this many columns a run is a short paragraph instead of a table row.
NARROW = 100


def render_runs(directory: Path, rows: list[dict], width: int | None) -> RenderableType:
    """The runs as a table (a pipe, or a terminal of ``NARROW`` columns and more), else one
    paragraph per run that wraps between words: nothing is cut at 80 columns."""
    if width is None or width >= NARROW:
        return _runs_table(directory, rows)
    parts: list[RenderableType] = [Text(f"runs in {directory}", style="bold")]
    for r in rows:
        if r["state"] == "unreadable":
            parts.append(line((r["run"], "bold"), "  unreadable (see below)"))
            continue
        c = _run_cells(r)
        parts.append(line((r["run"], "bold"), f"  {c['state']}"))
        parts.append(Padding(Text(f"{c['seed']}, {c['agent']}: {c['attempts']} attempts, {c['accepted']} accepted, "
                                  f"best {c['best']}, {c['tokens']} tokens, cost {c['cost']}"), (0, 0, 0, 2)))
    return Group(*parts)


def _run_cells(r: dict) -> dict[str, str]:
    started = r["best_speedup"] is not None
    return {"seed": r["seed"], "agent": r["agent"] + (f" ({r['model']})" if r["model"] else ""),
            "attempts": f"{r['attempts']}/{r['attempts_limit']}", "accepted": str(r["accepted"]) if started else "-",
            "best": figures.speedup(r["best_speedup"], r["best_noise"])
            if started and r["best_attempt"] != SEED_TAG else "-",
            "tokens": f"{r['input_tokens'] + r['output_tokens']:,}" if started else "-",
            "cost": "-" if r["cost_usd"] is None else f"${r['cost_usd']:.2f}",
            "state": f"{r['state']} (pid {r['pid']})" if r["pid"] else r["state"]}


def _runs_table(directory: Path, rows: list[dict]) -> Table:
    table = Table(title=f"runs in {directory}", title_justify="left")
    for col in ("run", "seed", "agent", "attempts", "accepted", "best", "tokens", "cost", "state"):
        numeric = col in ("attempts", "accepted", "best", "tokens", "cost")
        table.add_column(col, justify="right" if numeric else "left", no_wrap=numeric, overflow="fold")
    for r in rows:
        if r["state"] == "unreadable":
            table.add_row(r["run"], "?", "?", "-", "-", "-", "-", "-", "unreadable (see below)")
            continue
        c = _run_cells(r)
        table.add_row(r["run"], c["seed"], c["agent"], c["attempts"], c["accepted"], c["best"], c["tokens"],
                      c["cost"], c["state"])
    return table


def lineage(run: Path = typer.Argument(..., metavar="RUN", help="A run directory."),
            as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a tree.")) -> None:
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
    if as_json:
        kernels = [{"id": SEED_TAG, "commit": root, "parent_commit": None, "speedup_vs_seed": 1.0,
                    "speedup_vs_parent": None, "attempts_from": tried.get(root, 0), "best": root == best}]
        kernels += [{"id": k.attempt_id, "commit": k.commit, "parent_commit": k.parent_commit,
                     "speedup_vs_seed": k.speedup_vs_seed, "speedup_vs_parent": k.speedup_vs_parent,
                     "noise": _noise(lin, k), "attempts_from": tried.get(k.commit, 0), "best": k.commit == best} for k in lin.accepted()]
        say(json.dumps({"run": lin.run_id, "best_commit": best, "kernels": kernels, "attempts": len(records),
                        "outcomes": dict(sorted(counts.items(), key=lambda kv: -kv[1]))}, indent=2))
        return

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
         ident: str = typer.Argument(..., metavar="ID", help="An attempt id (a0007), seed, main or a commit."),
         source_only: bool = typer.Option(False, "--source", help="Print exactly the source file's bytes, nothing else."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text.")) -> None:
    """An attempt's or a kernel's source, evaluator report and diff against its parent.

    In a file or a pipe every part is plain and whole (never cropped or wrapped); --source
    gives the source alone, byte for byte.
    """
    if source_only and as_json:
        raise UsageError("--source and --json: give one")
    shown, data = _shown(run, ident)
    if source_only:
        if data is None:
            raise UsageError(f"{ident}: attempt {ident} has no candidate source")
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    if as_json:
        say(json.dumps(shown, indent=2))
        return
    if shown["kind"] == "attempt":
        record = shown["record"]
        say(f"attempt {ident}" + (f" from {record['parent_id']}: {record['outcome']}" if record else " (unfinished)"))
        if record and record["reason"]:
            say(f"  {record['reason']}")
        if record and record["rationale"]:
            say(f"idea: {record['rationale']}")
    else:
        say(f"commit {shown['commit']}  " + ", ".join(f"{k}: {v}" for k, v in shown["trailers"].items()))
    if shown["source"] is not None:
        source(shown["source"])
    if shown["report"] is not None:
        _print_report(shown["report"], shown["promoted"], shown["parent_is_seed"])
    if shown["diff"]:
        source(shown["diff"], "diff", line_numbers=False)


def _shown(run: Path, ident: str) -> tuple[dict, bytes | None]:
    """What ``show`` shows, as ``show --json`` gives it, and the source's exact bytes."""
    lin = open_run(run)
    attempt_dir = run / "attempts" / ident
    if attempt_dir.is_dir():
        record = _record(attempt_dir / "record.json")
        path = attempt_dir / "candidate.py"
        data = path.read_bytes() if path.is_file() else None
        report = _last_verdict(attempt_dir)
        # Unfinished: the report says whether a parent other than the seed was timed.
        parent_is_seed = record.parent_id == SEED_TAG if record else not any(
            c.get("parent") for c in (report or {}).get("timing", []))
        return {"kind": "attempt", "id": ident, "record": record.to_dict() if record else None,
                "commit": record.commit if record else None,
                "promoted": record is not None and record.outcome is Outcome.ACCEPTED,
                "parent_is_seed": parent_is_seed,
                "source": _text(data), "report": report, "diff": _read(attempt_dir / "diff.patch")}, data
    commit = lin.resolve(ident)
    data = lin.repo.blob(commit, KERNEL_FILE)
    if data is None:
        raise UsageError(f"{KERNEL_FILE}: not in commit {commit[:12]} of {run}")
    parent = lin.parents(commit)
    diff = None
    if parent:
        from tik_agent.search.briefing import source_diff

        diff = source_diff(lin.file_at(parent[0], KERNEL_FILE), _text(data), parent[0][:10], commit[:10])
    return {"kind": "commit", "id": ident, "commit": commit, "trailers": lin.trailers(commit), "promoted": True,
            "parent_is_seed": parent == [lin.root_commit()], "source": _text(data), "diff": diff,
            "report": _loads(lin.file_at(commit, EVALUATION_FILE), f"{EVALUATION_FILE} of {commit[:12]}")}, data


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


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
    text = f"evaluation: {outcome}, parity {passed}/{count_text(c.get('params', {}).get('origin', 'grid') for c in cases)}"
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
    """Write a picture of each attempt's speedup (in finishing order) and of the lineage (PNG, and HTML embedding it)."""
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
