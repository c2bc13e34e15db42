"""``tik-agent export``: the run's winner as a standalone wheel."""

from __future__ import annotations

from pathlib import Path

import typer

from tik_agent import figures
from tik_agent.cli.output import EXIT_REJECTED, output_dir, say


def export(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run directory (made by tik-agent optimize)."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory that receives the wheel."),
    commit: str | None = typer.Option(None, "--commit", metavar="REF",
                                      help="An accepted commit (sha prefix or attempt tag) instead of the best."),
    name: str | None = typer.Option(None, "--name", metavar="DIST", help="Distribution name.  [default: tik-kernel-<seed>]"),
    version: str | None = typer.Option(None, "--version", metavar="V", help="PEP 440 version.  [default: 0.1.0+g<commit>]"),
    force: bool = typer.Option(False, "--force", help="Overwrite a file of the wheel's name in --out that holds other "
                               "bytes (without it that is an error; other files there are never touched)."),
) -> None:
    """Build one wheel (kernel, torch custom op, parity certificate, verify()) from a run's best kernel."""
    from tik_agent.export import BuildFailed, export_wheel, wheel_certificate

    made = [p for p in (out, *out.parents) if not p.exists()]  # what output_dir creates, deepest first
    try:
        wheel = export_wheel(run_dir, output_dir(out, "--out"), commit=commit, name=name, version=version,
                             force=force)
    except BaseException as exc:
        _remove_empty(made)
        if isinstance(exc, BuildFailed):
            say(("failed:", "red"), f" {exc}", err=True)
            raise typer.Exit(EXIT_REJECTED) from None
        raise
    cert = wheel_certificate(wheel)
    dist, parity, speedup = cert["distribution"], cert["parity"], cert["speedups"]["vs_seed"]
    measured = (f"{figures.speedup(speedup, cert['speedups'].get('noise'), 2)} the seed's speed" if speedup
                else "speed not measured")
    say(("exported", "green"), f" {dist['name']} {dist['version']}: commit {cert['run']['commit'][:12]} "
        f"of run {cert['run']['run_id']}; {parity['cases_passed']}/{parity['cases_total']} parity cases; "
        f"{measured} on {cert['environment'].get('device', '?')}")
    say(f"use: import {dist['import_name']}  (torch.ops.{dist['op'].replace('::', '.')}; "
        f"{dist['import_name']}.verify() re-checks parity here)")
    say(f"wheel: {wheel}")


def _remove_empty(made: list[Path]) -> None:
    """A failed export leaves no folder behind that it created (rmdir removes empty ones only)."""
    for path in made:
        try:
            path.rmdir()
        except OSError:
            return


def register(app: typer.Typer, cls: type) -> None:
    app.command("export", cls=cls)(export)
