"""``tik-agent optimize``, ``runs``, ``lineage``, ``show`` and ``report``."""

from __future__ import annotations

import dataclasses

import json
import logging
import shutil
from pathlib import Path

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.tree import Tree

from tik_agent.backends import device as devices
from tik_agent.spec import seeds
from tik_agent.cli.output import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, console
from tik_agent.errors import UsageError
from tik_agent.run.journal import AttemptRecord, RunSummary, finished_records
from tik_agent.run.lineage import EVALUATION_FILE, KERNEL_FILE, SEED_TAG, open_run
from tik_agent.run.runconfig import Limits, RunConfig, format_duration, is_run_dir, new_run_id, parse_duration, utc_now

RUNS_DIR = Path("runs")
PIPE_WIDTH = 160
_FIXED = {"agent": "--agent", "model": "--model", "base_url": "--base-url", "rng_seed": "--seed", "device": "--device",
          "rounds": "--rounds", "eval_timeout_s": "--eval-timeout"}


def optimize(
    seed: str = typer.Argument(None, help="A bundled seed name or a seed directory (omit with --resume)."),
    agent: str = typer.Option(None, help="auto (default), anthropic, openai or offline."),
    model: str = typer.Option(None, help="The model of an LLM agent."),
    base_url: str = typer.Option(None, help="The API base URL of an LLM agent (e.g. a local server)."),
    iterations: int = typer.Option(None, help="Attempts for the whole run, across resumes [default: 20]."),
    time_budget: str = typer.Option(None, help="Stop after this much running time (all sessions), e.g. 8h, 90m."),
    max_tokens: int = typer.Option(None, help="Stop once the agent has used this many tokens."),
    max_cost: float = typer.Option(None, help="Stop once the agent has cost this many USD."),
    patience: int = typer.Option(None, help="Stop after this many attempts without a new best."),
    workers: int = typer.Option(None, help="Candidates evaluated in parallel [default: 1]."),
    run_dir: Path = typer.Option(None, help="The run directory [default: runs/<timestamp>-<seed>]."),
    resume: Path = typer.Option(None, help="Continue the run in this directory."),
    rng_seed: int = typer.Option(None, "--seed", help="Seed of the search's random choices [default: 0]."),
    device: str = typer.Option(None, help="auto (default), cpu (Triton interpreter) or cuda."),
    rounds: int = typer.Option(None, help="Timing rounds per evaluation [default: 5]."),
    eval_timeout: float = typer.Option(None, help="Seconds before an evaluation is killed [default: 900]."),
    prompts: Path = typer.Option(None, help="A directory of prompt templates overriding the bundled ones."),
    prices: Path = typer.Option(None, help="A TOML price table (USD per million tokens) replacing the bundled one."),
    probes: Path = typer.Option(None, help="probes.json from scripts/gpu-check.sh on this device: which tunable "
                                           "values keep bits here (the offline agent's priors)."),
) -> None:
    """Search for faster kernels with the same bits; every step lands in a git lineage."""
    from tik_agent.run import rundir
    from tik_agent.agents.factory import make_agent
    from tik_agent.search.interrupts import stop_on_signals
    from tik_agent.search.optimize import Optimizer

    given = {"agent": agent, "model": model, "base_url": base_url, "rng_seed": rng_seed, "device": device,
             "rounds": rounds, "eval_timeout_s": eval_timeout}
    limits = {"iterations": iterations, "max_tokens": max_tokens, "max_cost_usd": max_cost, "patience": patience,
              "time_s": parse_duration(time_budget) if time_budget is not None else None}
    if resume is not None:
        if run_dir is not None:
            raise UsageError("--run-dir and --resume: give one (--resume names the run directory)")
        path, config = resume, _resumed_config(resume, seed, given, limits, workers)
        if prompts is not None or prices is not None:
            config = dataclasses.replace(config, prompts_dir=_existing(prompts, "--prompts") or config.prompts_dir,
                                         prices_path=_existing(prices, "--prices") or config.prices_path)
        the_agent, explanation = make_agent(config.agent, model=config.model, base_url=config.base_url,
                                            seed=config.rng_seed, **_agent_files(config.prompts_dir, config.prices_path))
    else:
        if seed is None:
            raise UsageError("SEED: give a seed name or directory (see `tik-agent seeds`), or --resume DIR")
        spec = seeds.resolve(seed)
        path = run_dir if run_dir is not None else RUNS_DIR / new_run_id(spec.name)
        rundir.check_new_run_dir(path)
        files = {"prompts_dir": _existing(prompts, "--prompts"), "prices_path": _existing(prices, "--prices")}
        the_agent, explanation = make_agent(agent or "auto", model=model, base_url=base_url, seed=rng_seed or 0,
                                            **_agent_files(**files))
        config = dataclasses.replace(_new_config(path, spec, the_agent, given, limits, workers), **files)
    if config.device == "cuda":  # one evaluation per GPU: refuse more workers than GPUs before creating anything
        import os

        from tik_agent.search.executor import assign_gpus, torch_device_count, visible_devices

        assign_gpus(config.workers, visible_devices(os.environ, torch_device_count))
    if probes is not None:
        from tik_agent.spec.tunables import load_probes

        load_probes(_existing(probes, "--probes"), config.device)  # refused before anything is created
    console.print(f"run directory: [bold]{path}[/bold]", highlight=False)
    logging.getLogger("tik_agent").info("%s", explanation)
    session = rundir.reopen(path, config) if resume is not None else rundir.create(path, config)
    if probes is not None:
        shutil.copyfile(probes, session.path / rundir.PROBES_FILE)
    try:
        optimizer = Optimizer(session, the_agent)
        with stop_on_signals(optimizer):
            if console.is_terminal:
                from tik_agent.view.live import LiveView

                quiet = logging.getLogger("tik_agent.search.optimize")
                level = quiet.level
                quiet.setLevel(logging.WARNING)  # the live table shows what these lines would say
                try:
                    with LiveView(console, optimizer):
                        summary = optimizer.run()
                finally:
                    quiet.setLevel(level)
            else:
                summary = optimizer.run()
    finally:
        session.close()
    _print_summary(path, summary)
    if summary.stop_reason == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
    if summary.stop_reason in ("error", "agent_unavailable"):
        raise typer.Exit(EXIT_REJECTED)


def _existing(path: Path | None, option: str) -> str | None:
    if path is None:
        return None
    if not path.exists():
        raise UsageError(f"{option}: {path} does not exist")
    return str(path.resolve())


def _agent_files(prompts_dir: str | None, prices_path: str | None) -> dict:
    return {"prompts_dir": Path(prompts_dir) if prompts_dir else None,
            "prices_path": Path(prices_path) if prices_path else None}


def _resumed_config(path: Path, seed: str | None, given: dict, limits: dict, workers: int | None) -> RunConfig:
    """The run's own settings; budgets (and workers) given again extend them, nothing else may change."""
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a tik-agent run (no run.json)")
    config = RunConfig.load(path)
    if seed is not None and seeds.seed_directory(seed) != Path(config.seed_source):
        raise UsageError(f"{seed}: this run optimises {config.seed_name} ({config.seed_source})")
    for key, value in given.items():
        if value is not None and value != getattr(config, key):
            raise UsageError(f"{_FIXED[key]}: this run uses {getattr(config, key)!r}; a resumed run keeps it")
    return config.extended(limits=limits, workers=workers)


def _new_config(path: Path, spec, agent, given: dict, limits: dict, workers: int | None) -> RunConfig:
    device = devices.resolve(given["device"] or "auto")
    return RunConfig(
        run_id=path.name, seed_name=spec.name, seed_source=str(spec.directory.resolve()), agent=agent.name,
        model=agent.model, base_url=given["base_url"], rng_seed=given["rng_seed"] or 0, device=device,
        rounds=given["rounds"] or 5, warmup=1, eval_timeout_s=given["eval_timeout_s"] or 900.0,
        workers=workers or 1, limits=Limits(**{k: v for k, v in limits.items() if v is not None}),
        binding=devices.binding(devices.probe_environment(device)), created=utc_now())


def _print_summary(path: Path, s: RunSummary) -> None:
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items())) or "none"
    cost = "unknown" if s.cost_usd is None else f"${s.cost_usd:.4f}"
    console.print(
        f"stopped ({s.stop_reason}) after {s.iterations} of {s.iterations_limit} attempts in "
        f"{format_duration(s.elapsed_s)}: best [bold green]{s.best_speedup:.3f}x[/bold green] the seed "
        f"({s.best_attempt}), {s.accepted} accepted; outcomes: {outcomes}; "
        f"tokens {s.input_tokens} in / {s.output_tokens} out, cost {cost}", highlight=False)
    console.print(f"run directory: [bold]{path}[/bold]  (best kernel: {path / KERNEL_FILE})", highlight=False)


def runs(directory: Path = typer.Argument(RUNS_DIR, help="A directory of runs, or one run.")) -> None:
    """A table of runs."""
    found = [directory] if is_run_dir(directory) else (
        sorted(p for p in directory.iterdir() if is_run_dir(p)) if directory.is_dir() else [])
    if not found:
        console.print(f"no runs in {directory}")
        raise typer.Exit(EXIT_OK)
    table = Table(title=f"runs in {directory}", title_justify="left")
    for col in ("run", "seed", "agent", "attempts", "accepted", "best", "tokens", "cost", "stop"):
        numeric = col in ("attempts", "accepted", "best", "tokens", "cost")
        table.add_column(col, justify="right" if numeric else "left")
    for p in found:
        config, summary = RunConfig.load(p), RunSummary.load(p)
        agent = config.agent + (f" ({config.model})" if config.model else "")
        if summary is None:
            table.add_row(p.name, config.seed_name, agent, f"0/{config.limits.iterations}", "-", "-", "-", "-",
                          "not started")
            continue
        table.add_row(p.name, summary.seed, agent, f"{summary.iterations}/{summary.iterations_limit}",
                      str(summary.accepted), f"{summary.best_speedup:.3f}x",
                      f"{summary.input_tokens + summary.output_tokens:,}",
                      "-" if summary.cost_usd is None else f"${summary.cost_usd:.2f}",
                      summary.stop_reason or "running or killed")
    _print(table)


def lineage(run: Path = typer.Argument(..., help="A run directory.")) -> None:
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

    def label(commit: str, name: str, speedup: float, vs_parent: float | None) -> str:
        text = f"[bold]{name}[/bold] {speedup:.3f}x the seed"
        text += f" ({vs_parent:.3f}x its parent)" if vs_parent is not None else ""
        n = tried.get(commit, 0)
        text += f" [dim]{commit[:10]}, {n} attempt{'' if n == 1 else 's'} from it[/dim]"
        return text + ("  [bold green]<- best (main)[/bold green]" if commit == best else "")

    tree = Tree(label(root, SEED_TAG, 1.0, None))

    def grow(node: Tree, commit: str) -> None:
        for k in children.get(commit, []):
            grow(node.add(label(k.commit, k.attempt_id, k.speedup_vs_seed, k.speedup_vs_parent)), k.commit)

    grow(tree, root)
    _print(tree)
    table = Table(title=f"{len(records)} attempts by outcome", title_justify="left")
    table.add_column("outcome")
    table.add_column("attempts", justify="right")
    for outcome, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        table.add_row(outcome, str(n))
    console.print(table)


def show(run: Path = typer.Argument(..., help="A run directory."),
         ident: str = typer.Argument(..., metavar="ID", help="An attempt id (a0007), seed, main or a commit.")) -> None:
    """An attempt's or a kernel's source, evaluator report and diff against its parent."""
    lin = open_run(run)
    attempt_dir = run / "attempts" / ident
    if attempt_dir.is_dir():
        record_text = (attempt_dir / "record.json").read_text() if (attempt_dir / "record.json").is_file() else None
        record = AttemptRecord.from_dict(json.loads(record_text)) if record_text else None
        head = f"attempt {ident}" + (f" from {record.parent_id}: {record.outcome.value}" if record else " (unfinished)")
        if record and record.reason:
            head += f"\n  {record.reason}"
        console.print(head, highlight=False)
        source = _read(attempt_dir / "candidate.py")
        report = next((json.loads(t) for n in ("confirm.json", "report.json")
                       if (t := _read(attempt_dir / n)) is not None), None)
        diff = _read(attempt_dir / "diff.patch")
        if record and record.rationale:
            console.print(f"idea: {record.rationale}", highlight=False)
    else:
        commit = lin.resolve(ident)
        trailers = lin.trailers(commit)
        console.print(f"commit {commit}  " + ", ".join(f"{k}: {v}" for k, v in trailers.items()), highlight=False)
        source = lin.file_at(commit, KERNEL_FILE)
        report = json.loads(lin.file_at(commit, EVALUATION_FILE))
        parent = lin.parents(commit)
        diff = None
        if parent:
            from tik_agent.search.briefing import source_diff

            diff = source_diff(lin.file_at(parent[0], KERNEL_FILE), source, parent[0][:10], commit[:10])
    if source is not None:
        console.print(Syntax(source, "python", line_numbers=True))
    if report is not None:
        _print_report(report)
    if diff:
        console.print(Syntax(diff, "diff"))


def _print(renderable) -> None:
    """Tables and trees at full width when the output is a file or a pipe (no terminal to fit)."""
    if console.is_terminal:
        console.print(renderable)
    else:
        Console(file=console.file, width=PIPE_WIDTH, highlight=False).print(renderable)


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _print_report(report: dict) -> None:
    cases = report.get("cases", [])
    passed = sum(1 for c in cases if c.get("passed"))
    speed = report.get("speedup")
    line = f"evaluation: {report.get('outcome', report.get('kind'))}, parity {passed}/{len(cases)} cases"
    if speed is not None:
        line += f", {speed:.3f}x the seed"
    if report.get("speedup_vs_parent") is not None:
        line += f", {report['speedup_vs_parent']:.3f}x the parent"
    if report.get("noise") is not None:
        line += f", noise {report['noise']:.1%}"
    console.print(line, highlight=False)
    if report.get("reason"):
        console.print(f"  {report['reason']}", highlight=False)
    if report.get("timing"):
        table = Table(title="timing (median ms)", title_justify="left")
        for col in ("cell", "shape", "seed", "candidate", "parent", "vs seed"):
            table.add_column(col, justify="left" if col in ("cell", "shape") else "right")
        for c in report["timing"]:
            parent = c.get("parent")
            table.add_row(c["name"], c["shape"], f"{c['seed']['median_ms']:.3f}", f"{c['candidate']['median_ms']:.3f}",
                          f"{parent['median_ms']:.3f}" if parent else "-", f"{c['speedup']:.3f}x")
        console.print(table)


def report(run: Path = typer.Argument(..., help="A run directory."),
           out: Path = typer.Option(None, help="Where to write report.png and report.html [default: RUN/report]."),
           ) -> None:
    """Write a picture of speedup over time and of the lineage (PNG, and HTML embedding it)."""
    from tik_agent.view.report import write_report

    png, page = write_report(run, out)
    console.print(f"wrote {png}\nwrote {page}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize)
    app.command("runs")(runs)
    app.command("lineage")(lineage)
    app.command("show")(show)
    app.command("report")(report)
