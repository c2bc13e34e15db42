"""``tik-agent onpolicy``: do a sampler and a trainer give the same tokens the same log-probs?"""

from __future__ import annotations

import json
import logging
import tempfile
import time
import warnings
from pathlib import Path

import typer
from rich.table import Table

from tik_agent.cli.output import EXIT_REJECTED, emit, say
from tik_agent.errors import UsageError
from tik_agent.onpolicy.kernels import KINDS
from tik_agent.onpolicy.report import DTYPES

progress = logging.getLogger("tik_agent.progress")


def onpolicy(
    kernel: list[str] = typer.Option([], "--kernel", metavar="KIND=FILE", help="KIND=FILE: a kernel file for matmul, rmsnorm, logprobs "
                                     "or attention instead of the bundled seed (repeatable; wins over a --wheel or "
                                     "--run of its kind, which then only certify it when its sha256 matches)."),
    run: list[Path] = typer.Option([], "--run", metavar="RUN", help="A run directory: its best kernel replaces the seed "
                                   "of its kind, and its accepted commits certify a --kernel file with their bytes."),
    wheel: list[Path] = typer.Option([], "--wheel", metavar="WHEEL", help="An exported wheel: its kernel replaces the "
                                     "seed of its kind, certified by the wheel's certificate when the hashes match."),
    sequences: int = typer.Option(3, min=1, max=16, metavar="N", help="Sequences in the batch (with --hf: prompts)."),
    seed: int = typer.Option(0, metavar="S", help="Seed for the weights and the tokens."),
    hf: str = typer.Option(None, "--hf", metavar="CONFIG_OR_DIR", help="A transformers causal LM instead of the "
                           "small decoder: a config.json (random weights), a local checkpoint directory, or a "
                           "bundled config's name (tiny-llama). Needs tik-agent[hf]."),
    new_tokens: int = typer.Option(4, "--new-tokens", min=1, max=64, metavar="N",
                                   help="With --hf: tokens generate() samples per prompt."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Score the same tokens as a sampler (paged decode, chunked prefill) and as a trainer
    (packed, with backward), in float32 and bfloat16, with the Triton kernels and with torch's;
    check each kernel that is not a bundled seed for batch invariance at its seed's workload
    shapes; say what certifies each kernel.  With --hf the model is a transformers causal LM:
    generate() on left-padded prompts against one padded training forward and backward, the
    kernels reached through the wheels' drop-ins.  Exit 1 unless every Triton ratio is exactly
    1.0 and every shape check passed."""
    from tik_agent.backends import device as devices
    from tik_agent.onpolicy import reach, sources
    from tik_agent.onpolicy import hf as hf_model
    from tik_agent.spec.schema import load_spec
    from tik_agent.spec.seeds import BUNDLED_DIR

    devices.prepare("cpu")
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="tik-onpolicy-") as tmp:
        # numpy's notes on the interpreter's masked -inf lanes (inf - inf), not results.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        chosen = sources.resolve(kernel, run, wheel, Path(tmp))
        uncertified = [k for k, s in chosen.items() if not s.certified]
        label = set_label(uncertified)
        # A bad --hf (no such file, no model_type, no transformers) is refused before any kernel runs.
        model = None
        if hf is not None:
            found = hf_model.find(hf)
            model = (found, hf_model.load_config(found))
        shapes = {k: (reach.ReachResult(k, None, reason="the bundled seed: check-seed runs its full grid")
                      if s.bundled else reach.check_reach(k, load_spec(BUNDLED_DIR / k), s.path))
                  for k, s in chosen.items()}
        census = None
        if model is None:
            sides = _decoder_sides(chosen, label, sequences, seed)
        else:
            sides, census = _hf_sides(model, chosen, label, sequences, new_tokens, seed, Path(tmp))
    triton_sides = [s for s in sides if s.kernels != "stock"]
    ratios_ok = all(s.on_policy for s in triton_sides)
    shapes_ok = all(r.passed is not False for r in shapes.values())
    if as_json:
        say(json.dumps({"on_policy": ratios_ok and shapes_ok, "ratios_exactly_one": ratios_ok,
                        "shape_checks_passed": shapes_ok, "label": label,
                        "model": census[0] if census else "decoder",
                        "kernels": [dict(chosen[k].to_dict(), shape_check=shapes[k].to_dict()) for k in chosen],
                        "results": [s.to_dict() for s in sides],
                        **({"ops": census[1].to_dict()} if census else {})}, indent=2))
    else:
        _tables(chosen, shapes, sides, census)
    for r in shapes.values():
        if r.passed is False:
            say(("failed:", "red"), f" {r.kind} is not batch invariant at its workload shapes: {r.failure}", err=True)
    for s in triton_sides:
        if not s.on_policy:
            say(("failed:", "red"), f" {s.kernels} kernels give {s.tokens - s.identical} of {s.tokens} tokens "
                f"different {s.dtype} log-probs in the sampler and the trainer", err=True)
    if not (ratios_ok and shapes_ok):
        raise typer.Exit(EXIT_REJECTED)
    if as_json:
        return
    which = "the certified kernels" if not uncertified else f"these kernels ({', '.join(uncertified)} uncertified)"
    say(("ok", "green"), f": with {which} every importance ratio is exactly 1.0 in "
        f"{' and '.join(DTYPES)}")


def _decoder_sides(chosen: dict, label: str, sequences: int, seed: int) -> list:
    """The project's small decoder: a serving engine's sampler against a packed trainer."""
    from tik_agent.onpolicy import kernels, report

    triton = kernels.triton({k: s.path for k, s in chosen.items() if s.origin != "bundled seed"}, name=label)
    sides = []
    runs = [(ops, dtype) for dtype in DTYPES for ops in (triton, kernels.stock())]
    start = time.perf_counter()
    for n, (ops, dtype) in enumerate(runs, 1):
        # Minutes under the interpreter: say which of the model's runs is going.
        progress.info("scoring %d sequences as sampler and trainer: %s kernels, %s (%d of %d), %.0f s",
                      sequences, ops.name, dtype, n, len(runs), time.perf_counter() - start)
        sides.append(report.compare(ops, sequences=sequences, seed=seed, dtype=dtype))
    return sides


def _hf_sides(target: tuple, chosen: dict, label: str, prompts: int, new_tokens: int, seed: int, tmp: Path):
    """A transformers model (``target``: its source, its config): generate() against a padded training step,
    through the drop-ins.  Returns the sides and (what the model is, the certified float32 step's op census)."""
    from tik_agent.onpolicy import census as censuses
    from tik_agent.onpolicy import dropins, hf, hf_check

    model_source, config = target
    routes = dropins.load({k: s.path for k, s in chosen.items()}, tmp / "dropins")
    batch = hf.make_prompts(config, prompts, seed)
    sides, counted = [], None
    refused = tuple(p.NotCertifiedError for p in routes.packages.values())
    for dtype in DTYPES:
        model = hf.build_model(model_source, config, dtype, seed)
        mode = censuses.counting(routes.namespaces) if counted is None else None
        try:
            sides.append(hf_check.compare(model, batch, routes, label, dtype, new_tokens, seed, census=mode))
        except refused as exc:  # the model calls a routed op outside the contract: say which, and why
            raise UsageError(f"--hf {model_source.given}: {config.model_type} in {dtype} calls a kernel outside "
                             f"its certified contract: {exc}") from None
        counted = counted or mode.census
        sides.append(hf_check.compare(model, batch, None, "stock", dtype, new_tokens, seed))
    what = f"{config.model_type} from {model_source.text}"
    return sides, (what, counted)


def set_label(uncertified: list[str]) -> str:
    """The Triton row's label: "certified" only when every kernel is."""
    return "certified" if not uncertified else f"triton ({', '.join(uncertified)} uncertified)"


def _tables(chosen: dict, shapes: dict, sides: list, census=None) -> None:
    kinds = Table(title="kernels", title_justify="left")
    for column in ("kind", "kernel", "certified by", "workload shapes"):
        kinds.add_column(column, overflow="fold")
    for kind, s in chosen.items():
        r = shapes[kind]
        checked = (f"not checked: {r.reason}" if r.passed is None else
                   f"ok, {r.cases} cases ({r.shapes}), {r.seconds:.0f} s" if r.passed else f"FAILED: {r.failure}")
        kinds.add_row(kind, s.origin, s.certified_by.text if s.certified_by else "uncertified", checked)
    emit(kinds)
    tokens = sides[0].tokens
    title = (f"on-policy check: {tokens} response tokens, sampler vs trainer" if census is None else
             f"on-policy check, {census[0]}: {tokens} generated tokens, generate() vs padded training step")
    table = Table(title=title, title_justify="left")
    for column in ("kernels", "dtype", "max |r-1|", "mean |r-1|", "KL (k3)", "bit-identical", "s"):
        table.add_column(column, justify="left" if column in ("kernels", "dtype") else "right",
                         overflow="fold" if column == "kernels" else "ellipsis")
    for side in sides:
        table.add_row(side.kernels, side.dtype, f"{side.max_abs_ratio_minus_1:.3g}",
                      f"{side.mean_abs_ratio_minus_1:.3g}", f"{side.kl_k3:.3g}",
                      f"{side.identical}/{side.tokens} ({side.identical_fraction:.0%})", f"{side.seconds:.1f}")
    emit(table)
    if census is not None:
        say(f"ops of the float32 step with the kernels ({census[0]}):")
        for line in census[1].summary(KINDS):
            say(f"  {line}")


def register(app: typer.Typer, cls: type) -> None:
    app.command("onpolicy", cls=cls)(onpolicy)
