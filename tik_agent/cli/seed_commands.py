"""``tik-agent seeds`` and ``tik-agent check-seed``."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from tik_agent.backends import device as devices
from tik_agent.spec import seeds
from tik_agent.spec.cases import count_text
from tik_agent.judge.seed_imports import check_seed_imports
from tik_agent.cli.output import EXIT_INTERRUPTED, EXIT_REJECTED, emit, say


def list_seeds(as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table.")) -> None:
    """List the bundled seed kernels with their entry signature."""
    found = seeds.bundled()
    if as_json:
        say(json.dumps({"seeds": [{"name": s.name, "entry": s.entry, "signature": s.signature_text(),
                                   "description": s.description, "directory": str(s.directory),
                                   "backward": s.backward.entry if s.backward else None} for s in found]},
                       indent=2))
        return
    table = Table(title="bundled seeds", title_justify="left")
    table.add_column("name", style="bold", no_wrap=True)
    # Entry and description share what a terminal leaves, each wrapped in its own column.
    table.add_column("entry", ratio=1, overflow="fold")
    table.add_column("description", ratio=1, overflow="fold")
    for spec in found:
        table.add_row(spec.name, spec.signature_text(), spec.description)
    emit(table)


def check_seed(
    seed: str = typer.Argument(..., metavar="SEED", help="A bundled seed name or a seed directory."),
    device: str = typer.Option("auto", metavar="DEVICE", help="auto, cpu (Triton interpreter) or cuda."),
    all_cases: bool = typer.Option(False, "--all", help="Run every case even after a failure."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Validate a seed's spec, then check correctness, determinism and batch invariance."""
    from tik_agent.judge.seedcheck import check_seed as run_check

    spec = seeds.resolve(seed)
    check_seed_imports(spec.source)
    dev = devices.resolve(device)
    report = run_check(spec, dev, stop_at_first=not all_cases)
    if as_json:
        say(json.dumps(report.to_dict(), indent=2))
    else:
        _table(report, spec, dev)
    if report.interrupted:
        say(f"interrupted: check-seed {spec.name} on {dev} after {len(report.results)} of {len(report.planned)} "
            f"cases ({report.seconds:.0f} s); nothing was written", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    failure = report.first_failure
    if failure is not None:
        say(("FAILED", "red"), f" {failure.case_id}: [{failure.failed.value}] {failure.message}", err=True)
        raise typer.Exit(EXIT_REJECTED)
    if not as_json:
        say(("ok", "green"), f": {spec.name} is correct, deterministic and batch invariant on {dev} "
                             f"(bit-exact over {len(report.results)} cases)")


def _table(report, spec, dev: str) -> None:
    counted = count_text((c.origin for c in report.planned), "this check adds")
    table = Table(title=f"{spec.name} on {dev}: {len(report.results)} of {counted} run in {report.seconds:.1f} s",
                  title_justify="left")
    table.add_column("check")
    table.add_column("cases passed", justify="right")
    for check, count in report.counts_by_check().items():
        table.add_row(check, str(count))
    if not report.reference_used:
        table.add_row("reference", "skipped: the seed has no reference.py")
    emit(table)
    say(f"planned: {report.cases_text} (the cases an evaluation of this seed runs)")


def register(app: typer.Typer, cls: type) -> None:
    app.command("seeds", cls=cls)(list_seeds)
    app.command("check-seed", cls=cls)(check_seed)
