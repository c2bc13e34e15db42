"""``tik-agent seeds`` and ``tik-agent check-seed``."""

from __future__ import annotations

import typer
from rich.table import Table

from tik_agent.backends import device as devices
from tik_agent.spec import seeds
from tik_agent.judge.seed_imports import check_seed_imports
from tik_agent.cli.output import EXIT_REJECTED, emit, say


def list_seeds() -> None:
    """List the bundled seed kernels with their entry signature."""
    table = Table(title="bundled seeds", title_justify="left")
    table.add_column("name", style="bold")
    # Wide enough for the short signatures to stay on one line next to attention's long one.
    table.add_column("entry", min_width=32)
    table.add_column("description")
    for spec in seeds.bundled():
        table.add_row(spec.name, spec.signature_text(), spec.description)
    emit(table)


def check_seed(
    seed: str = typer.Argument(..., metavar="SEED", help="A bundled seed name or a seed directory."),
    device: str = typer.Option("auto", metavar="DEVICE", help="auto, cpu (Triton interpreter) or cuda."),
    all_cases: bool = typer.Option(False, "--all", help="Run every case even after a failure."),
) -> None:
    """Validate a seed's spec, then check correctness, determinism and batch invariance."""
    from tik_agent.judge.seedcheck import check_seed as run_check

    spec = seeds.resolve(seed)
    check_seed_imports(spec.source)
    dev = devices.resolve(device)
    report = run_check(spec, dev, stop_at_first=not all_cases)
    table = Table(title=f"{spec.name} on {dev}: {len(report.results)} cases in {report.seconds:.1f} s", title_justify="left")
    table.add_column("check")
    table.add_column("cases passed", justify="right")
    for check, count in report.counts_by_check().items():
        table.add_row(check, str(count))
    if not report.reference_used:
        table.add_row("reference", "skipped: the seed has no reference.py")
    emit(table)
    say(f"planned: {report.cases_text} (the cases an evaluation of this seed runs)")
    failure = report.first_failure
    if failure is not None:
        say(("FAILED", "red"), f" {failure.case_id}: [{failure.failed.value}] {failure.message}", err=True)
        raise typer.Exit(EXIT_REJECTED)
    say(("ok", "green"), f": {spec.name} is correct, deterministic and batch invariant on {dev} "
                         f"(bit-exact over {len(report.results)} cases)")


def register(app: typer.Typer, cls: type) -> None:
    app.command("seeds", cls=cls)(list_seeds)
    app.command("check-seed", cls=cls)(check_seed)
