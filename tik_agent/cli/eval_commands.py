"""``tik-agent eval``: one candidate against its seed, in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from tik_agent.backends import device as devices
from tik_agent.spec import seeds
from tik_agent.spec.cases import count_text
from tik_agent.cli.output import EXIT_OK, EXIT_REJECTED, SANDBOX_HELP, check_sandbox, emit, say
from tik_agent.errors import UsageError


def eval_candidate(
    candidate: Path = typer.Argument(..., metavar="CANDIDATE", help="A Python file defining the seed's entry."),
    seed: str = typer.Option(..., "--seed", metavar="SEED", help="A bundled seed name or a seed directory."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    device: str = typer.Option("auto", metavar="DEVICE", help="auto, cpu (Triton interpreter) or cuda."),
    timeout: float = typer.Option(None, metavar="S", help="Wall-clock limit of each sandboxed worker, seconds "
                                  "[default: per phase, 5x the seed's own time for it, at least 60 s]."),
    rounds: int = typer.Option(5, metavar="R", help="Interleaved timing rounds (at least 1)."),
    no_timing: bool = typer.Option(False, "--no-timing", help="Check parity only."),
    sandbox: str = typer.Option("auto", "--sandbox", metavar="MODE", help=SANDBOX_HELP),
    graphs: bool = typer.Option(None, "--graphs/--no-graphs", help="Decide the speedup by CUDA-graph replay "
                                "[default: on cuda; on the CPU --graphs runs an eager stand-in, for rehearsals]."),
    warm_cache: Path = typer.Option(None, "--warm-cache", metavar="DIR", help="A Triton cache each worker starts "
                                    "from (its own copy), such as the one scripts/gpu-check.sh warms for a node: "
                                    "a worker then compiles only what the candidate adds."),
) -> None:
    """Evaluate CANDIDATE against the seed: static rules, bitwise parity, integrity, A/B timing."""
    from tik_agent.judge.evaluate import evaluate
    from tik_agent.judge.options import EvalOptions
    from tik_agent.search.interrupts import kill_sandboxes_on_interrupt

    if not candidate.is_file():
        raise UsageError(f"{candidate}: no such candidate file")
    if rounds < 1:
        raise UsageError(f"--rounds: must be at least 1 (got {rounds})")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout: must be positive (got {timeout:g})")
    if warm_cache is not None and not warm_cache.is_dir():
        raise UsageError(f"--warm-cache {warm_cache}: no such directory")
    spec = seeds.resolve(seed)
    check_sandbox(sandbox)
    resolved = devices.resolve(device)
    options = EvalOptions(device=resolved, timeout_s=timeout, rounds=rounds, timing=not no_timing,
                          ceilings=resolved == "cuda", graphs=graphs,
                          warm_cache=str(warm_cache.resolve()) if warm_cache is not None else None)
    with kill_sandboxes_on_interrupt():  # Ctrl-C: the seed's worker, which a thread waits for, dies too
        verdict = evaluate(spec, candidate, options)
    if as_json:
        say(json.dumps(verdict.to_dict(), indent=2))
    else:
        render(verdict, spec.name)
    raise typer.Exit(EXIT_OK if verdict.passed else EXIT_REJECTED)


def render(verdict, seed_name: str) -> None:
    env = verdict.environment
    where = f"{env.get('device_name', env.get('device', '?'))}, triton {env.get('triton', '?')}, torch {env.get('torch', '?')}"
    if verdict.cases:
        counted = count_text(c.get("params", {}).get("origin", "grid") for c in verdict.cases)
        say(f"parity: {verdict.cases_passed}/{counted} bit-exact on {where}")
    if verdict.timing:
        emit(timing_table(verdict))
        if verdict.ceilings:
            c = verdict.ceilings
            say(f"ceilings measured on this GPU: copy {c['copy_gbps']:.0f} GB/s, "
                f"bf16 matmul {c['bf16_tflops']:.0f} TFLOP/s")
        say(f"workload-weighted speedup vs {seed_name}: {verdict.speedup:.3f}x (noise {verdict.noise:.1%})")
    if verdict.passed:
        say(("passed", "green"), f" in {verdict.seconds:.1f} s")
    else:
        say(("rejected", "red"), f" ({verdict.outcome.value}): {verdict.reason}")
        if verdict.first_mismatch:
            mm = verdict.first_mismatch
            say(f"first mismatch: case {mm['case']}, index {mm['index']}, expected {mm['expected_bits']}, "
                f"got {mm['actual_bits']} ({mm['ulps']} ulp)")
        if verdict.worker_log:
            say(f"worker log (tail):\n{verdict.worker_log[-1500:]}")


def timing_table(verdict) -> Table:
    """Microseconds per cell; on a device timer also the launch overhead (kept out of the kernel
    figure), the candidate's GB/s from the bytes its tensors move and its share of the copy
    ceiling, and where the spec gives a cell's flops, TFLOP/s and the share of the matmul ceiling."""
    device = any("device" in c for c in verdict.timing)
    flops = any((c.get("device") or {}).get("flops") for c in verdict.timing)
    ceilings = verdict.ceilings or {}
    table = Table(title=f"timing ({verdict.timer}), medians", title_justify="left")
    cols = ["cell", "shape", "weight", "seed us", "candidate us", "speedup", "noise"]
    if device:
        cols += ["launch us", "GB/s"] + (["% of copy"] if ceilings else [])
    if flops:
        cols += ["TFLOP/s"] + (["% of mm"] if ceilings else [])
    for col in cols:
        table.add_column(col, justify="left" if col in ("cell", "shape") else "right")
    for c in verdict.timing:
        cand_us = c["candidate"]["median_ms"] * 1e3
        row = [c["name"], c["shape"], f"{c['weight']:g}", f"{c['seed']['median_ms'] * 1e3:.1f}", f"{cand_us:.1f}",
               f"{c['speedup']:.3f}x", f"{c['noise']:.1%}"]
        d = c.get("device") or {}
        if device:
            launch = d.get("launch_overhead_us", {}).get("candidate")
            gbps = d["bytes"] / (cand_us * 1e3) if d.get("bytes") and cand_us > 0 else None
            row += [f"{launch:.1f}" if launch is not None else "-", f"{gbps:.0f}" if gbps is not None else "-"]
            if ceilings:
                row.append(f"{gbps / ceilings['copy_gbps']:.0%}" if gbps is not None else "-")
        if flops:
            tflops = d["flops"] / (cand_us * 1e6) if d.get("flops") and cand_us > 0 else None
            row.append(f"{tflops:.1f}" if tflops is not None else "-")
            if ceilings:
                row.append(f"{tflops / ceilings['bf16_tflops']:.0%}" if tflops is not None else "-")
        table.add_row(*row)
    return table


def register(app: typer.Typer, cls: type) -> None:
    app.command("eval", cls=cls)(eval_candidate)
