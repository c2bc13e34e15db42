"""``tik-agent onpolicy``: do a sampler and a trainer give the same tokens the same log-probs?"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import typer
from rich.table import Table

from tik_agent.cli.output import EXIT_REJECTED, emit, say


def onpolicy(
    kernel: list[str] = typer.Option([], "--kernel", metavar="KIND=FILE", help="KIND=FILE: a kernel file for matmul, rmsnorm, logprobs "
                                     "or attention instead of the bundled seed (repeatable)."),
    run: list[Path] = typer.Option([], "--run", metavar="RUN", help="A run directory: its best kernel replaces the seed of its kind."),
    wheel: list[Path] = typer.Option([], "--wheel", metavar="WHEEL", help="An exported wheel: its kernel replaces the seed of its kind."),
    sequences: int = typer.Option(3, min=1, max=16, metavar="N", help="Sequences in the batch."),
    seed: int = typer.Option(0, metavar="S", help="Seed for the weights and the tokens."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Score the same tokens as a sampler (paged decode, chunked prefill) and as a trainer
    (packed, with backward), with the certified kernels and with torch's; exit 1 unless the
    certified ratio is exactly 1.0 for every token."""
    from tik_agent.backends import device as devices
    from tik_agent.onpolicy import kernels, report, sources

    devices.prepare("cpu")
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="tik-onpolicy-") as tmp:
        # numpy's notes on the interpreter's masked -inf lanes (inf - inf), not results.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        files = dict(sources.parse_kernel_option(k) for k in kernel)
        for r in run:
            kind, path = sources.from_run(r, Path(tmp) / f"run{len(files)}")
            files[kind] = path
        for w in wheel:
            kind, path = sources.from_wheel(w, Path(tmp))
            files[kind] = path
        certified = report.compare(kernels.certified(files), sequences=sequences, seed=seed)
        stock = report.compare(kernels.stock(), sequences=sequences, seed=seed)
    if as_json:
        say(json.dumps({"certified": certified.to_dict(), "stock": stock.to_dict(),
                        "on_policy": certified.on_policy}, indent=2))
    else:
        _table(certified, stock)
    if not certified.on_policy:
        say(("failed:", "red"), f" certified kernels give {certified.tokens - certified.identical} of "
            f"{certified.tokens} tokens different log-probs in the sampler and the trainer", err=True)
        raise typer.Exit(EXIT_REJECTED)


def _table(certified, stock) -> None:
    table = Table(title=f"on-policy check: {certified.tokens} response tokens, sampler vs trainer",
                  title_justify="left")
    for column in ("kernels", "max |ratio - 1|", "bit-identical", "seconds"):
        table.add_column(column, justify="left" if column == "kernels" else "right")
    for side in (certified, stock):
        table.add_row(side.kernels, f"{side.max_abs_ratio_minus_1:.3g}",
                      f"{side.identical}/{side.tokens} ({side.identical_fraction:.0%})", f"{side.seconds:.1f}")
    emit(table)
    if certified.on_policy:
        say(("ok", "green"), ": with the certified kernels every importance ratio is exactly 1.0")


def register(app: typer.Typer, cls: type) -> None:
    app.command("onpolicy", cls=cls)(onpolicy)
