"""``tik-agent export``: a run's winner, or a seed itself, as a standalone wheel."""

from __future__ import annotations

from pathlib import Path

import typer

from tik_agent import figures
from tik_agent.cli.output import EXIT_REJECTED, output_dir, say
from tik_agent.errors import UsageError


def export(
    source: str = typer.Argument(..., metavar="RUN|SEED", help="A run directory (made by tik-agent optimize), or a "
                                 "seed: a bundled seed's name or a seed directory, exported as it is."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory that receives the wheel."),
    commit: str | None = typer.Option(None, "--commit", metavar="REF",
                                      help="An accepted commit (sha prefix or attempt tag) instead of the best (a run only)."),
    name: str | None = typer.Option(None, "--name", metavar="DIST", help="Distribution name.  [default: tik-kernel-<seed>]"),
    version: str | None = typer.Option(None, "--version", metavar="V", help="PEP 440 version.  [default: 0.1.0+g<commit> "
                                       "of a run, 0.1.0+seed<sha256 of the seed's spec and kernel> of a seed]"),
    force: bool = typer.Option(False, "--force", help="Overwrite a file of the wheel's name in --out that holds other "
                               "bytes (without it that is an error; other files there are never touched)."),
    device: str | None = typer.Option(None, "--device", metavar="DEVICE", help="A seed only: where its audit runs, "
                                      "auto, cpu (Triton interpreter) or cuda.  [default: auto]"),
    fresh_audit: bool = typer.Option(False, "--fresh-audit", help="A seed only: audit it again even when the "
                                     "seed-audit cache holds its audit (and refresh the cache)."),
) -> None:
    """Build one wheel (kernel, torch custom op, parity certificate, verify()) from a run's best kernel, or
    from a seed itself, certified by the seed's own audit."""
    from tik_agent.export import BuildFailed, export_seed_wheel, export_wheel, wheel_certificate
    from tik_agent.export.seedsource import is_seed_argument
    from tik_agent.search.interrupts import kill_sandboxes_on_interrupt

    seed = is_seed_argument(source)
    if not seed and "/" not in source and not Path(source).expanduser().exists():
        from tik_agent.spec.seeds import bundled_names

        raise UsageError(f"{source}: neither a run directory nor a bundled seed (the bundled seeds are: "
                         f"{', '.join(bundled_names()) or 'none'}; a seed directory holds a spec.toml)")
    _check_options(seed, commit=commit, device=device, fresh_audit=fresh_audit)
    made = [p for p in (out, *out.parents) if not p.exists()]  # what output_dir creates, deepest first
    try:
        if seed:
            with kill_sandboxes_on_interrupt():  # an audit's sandboxed workers die with Ctrl-C
                wheel = export_seed_wheel(source, output_dir(out, "--out"), name=name, version=version, force=force,
                                          device=device, fresh_audit=fresh_audit)
        else:
            wheel = export_wheel(Path(source), output_dir(out, "--out"), commit=commit, name=name, version=version,
                                 force=force)
    except BaseException as exc:
        _remove_empty(made)
        if isinstance(exc, BuildFailed):
            say(("failed:", "red"), f" {exc}", err=True)
            raise typer.Exit(EXIT_REJECTED) from None
        raise
    _report(wheel_certificate(wheel), wheel)


def _check_options(seed: bool, **given) -> None:
    """--commit names a run's commit; --device and --fresh-audit shape a seed's audit."""
    flags = {"commit": "--commit", "device": "--device", "fresh_audit": "--fresh-audit"}
    wrong = ("device", "fresh_audit") if not seed else ("commit",)
    for key in wrong:
        if given[key]:
            what = "a seed has no commits: it is exported as it is" if seed else \
                "a run's kernels were certified when the run evaluated them"
            raise UsageError(f"{flags[key]}: applies to {'a run' if seed else 'a seed'} only ({what})")


def _report(cert: dict, wheel: Path) -> None:
    dist, parity, speedup = cert["distribution"], cert["parity"], cert["speedups"]["vs_seed"]
    where = cert["environment"].get("device", "?")
    if cert.get("provenance") == "seed":
        say(("exported", "green"), f" {dist['name']} {dist['version']}: the seed {cert['seed']['name']} itself, "
            f"certified by its own audit; {parity['cases_passed']}/{parity['cases_total']} parity cases on {where}")
    else:
        measured = (f"{figures.speedup(speedup, cert['speedups'].get('noise'), 2)} the seed's speed" if speedup
                    else "speed not measured")
        say(("exported", "green"), f" {dist['name']} {dist['version']}: commit {cert['run']['commit'][:12]} "
            f"of run {cert['run']['run_id']}; {parity['cases_passed']}/{parity['cases_total']} parity cases; "
            f"{measured} on {where}")
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
