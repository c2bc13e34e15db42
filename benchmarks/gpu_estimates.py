"""Each seed's GPU cells against the roofline: an estimate from the kernels' structure,
until a GPU run measures them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/gpu_estimates.py [COMPILE_JSON]

COMPILE_JSON is the ``compile.json`` of ``scripts/gpu-check.sh --rehearse --target sm_90``
(default: the kernels step's file under ``$OUT``); its grids say how many programs each
kernel runs.  Per cell it prints:

- the floor: the bytes the cell must move (each input read once, each output written
  once) over the bandwidth ceiling, or its flops over the tensor-core ceiling, whichever
  is larger;
- the seed's bytes: what its kernels read and write as written (a second pass over an
  input counts again; reads a program repeats that L2 may serve are listed apart);
- the estimate: each kernel's bytes over the ceiling, divided by the share of the SMs
  its grid fills (programs / SMs, at most 1: a pessimistic fill model, since one SM can
  pull more than its share of the bandwidth), summed over the cell's kernels.  Launch
  latency is left out.

The ceilings are the issue's figures for an H200 (4.3 TB/s, 790 TFLOP/s dense bf16),
not measured ones.  The tensor-core seeds (matmul, attention) get a bound: the floor over
the share of the SMs their grid fills, with the instruction the compile chose.  Their time
depends on how close that instruction runs to peak, which only a GPU can say; matmul also
gets the range that published bit-exact Triton GEMMs reach (56-93% of cuBLAS, whose bf16
rate is the ceiling), an assumption, not a model of this kernel.  Each row names its
kernels with the registers, spill bytes and grid ptxas reports (the compile.json given).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

BANDWIDTH = 4.3e12
TENSOR_FLOPS = 790e12
SMS = 132
BF16 = 2
GEMM_SHARE = (0.56, 0.93)  # bit-exact Triton GEMMs against cuBLAS, published (the shared field notes)


def _fill(programs: int) -> float:
    return min(1.0, programs / SMS)


def _norm(m: int, n: int, e: int, add: bool, step: bool) -> tuple[float, list, str]:
    """(floor bytes, [(kernel, bytes)], note) of rmsnorm or add_rmsnorm."""
    x = m * n * e
    k = "_add_rms_norm" if add else "_rms_norm"
    fwd = (4 if add else 2) * x  # x (and the residual) in; y (and the sum) out
    if not step:
        return fwd, [(f"{k}_kernel", fwd)], "one pass"
    part = (-(-m // 16)) * n * 4  # the dweight chunks' fp32 column sums
    # rmsnorm's dx reads x, w and dy twice and writes dx; add_rmsnorm's reads x, the
    # residual and dy, then x, the residual, dy and dnew_residual, and writes two grads
    dx = 9 * x if add else 5 * x
    chunks = (3 if add else 2) * x + part
    floor = fwd + (6 if add else 3) * x
    return floor, [(f"{k}_kernel", fwd), (f"{k}_dx_kernel", dx), (f"{k}_dw_chunks_kernel", chunks),
                   (f"{k}_dw_combine_kernel", part)], "dx reads its inputs twice, dweight a third time"


def _logprobs(m: int, v: int, e: int, step: bool) -> tuple[float, list, str]:
    logits = m * v * e
    scratch = m * -(-v // 4096) * 4 * 2  # each piece's maximum and sum
    kernels = [("_lse_pieces_kernel", logits + scratch), ("_lse_fold_kernel", scratch)]
    if not step:
        return logits, kernels, "the pieces' scratch"
    # the backward reads each row twice (its log-sum-exp, then the gradient) and writes dlogits
    return 3 * logits, kernels + [("_token_logprobs_bwd_kernel", 3 * logits)], "the backward reads the logits twice"


def _estimates(report: dict) -> list[dict]:
    programs = defaultdict(lambda: SMS)
    for k in report["kernels"]:
        g = k["grid"]
        key = (k["seed"], k["cell"], k["kernel"])
        programs[key] = min(programs.get(key, g[0] * g[1] * g[2]), g[0] * g[1] * g[2])
    from tik_agent.spec.schema import load_spec
    from tik_agent.spec.seeds import BUNDLED_DIR

    rows = []
    for name in ("rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention"):
        spec = load_spec(BUNDLED_DIR / name)
        for cell in spec.workload_for("cuda"):
            d, e = cell.dims, (4 if cell.dtype == "float32" else BF16)
            row = {"seed": name, "cell": cell.name, "flops": 0}
            if name in ("rmsnorm", "add_rmsnorm", "logprobs"):
                if name == "logprobs":
                    floor, kernels, row["note"] = _logprobs(cell.m, d["V"], e, cell.backward)
                else:
                    floor, kernels, row["note"] = _norm(cell.m, d["N"], e, name == "add_rmsnorm", cell.backward)
                row["floor_b"] = floor
                row["seed_b"] = sum(b for _, b in kernels)
                row["estimate_us"] = sum(b / BANDWIDTH / _fill(programs[(name, cell.name, k)])
                                         for k, b in kernels) * 1e6
                row["fill"] = min(_fill(programs[(name, cell.name, k)]) for k, _ in kernels)
                if name == "logprobs":  # the fold's few programs read a few bytes a row
                    row["fill"] = _fill(programs[(name, cell.name, "_lse_pieces_kernel")])
                    if cell.m < SMS:  # a decode: a few rows
                        row["note"] = ("two launches (their latency is not counted): "
                                       f"{cell.m * -(-d['V'] // 4096)} programs of 2 chunks, then a fold")
            elif name == "matmul":
                passes = 3 if cell.backward else 1
                row["flops"] = 2 * cell.m * d["N"] * d["K"] * passes
                row["floor_b"] = (cell.m * d["K"] + d["K"] * d["N"] + cell.m * d["N"]) * e * passes
                tiles = -(-cell.m // 128) * -(-d["N"] // 128)  # the seed's 128 x 128 tiles
                row["fill"] = _fill(min(tiles, programs[(name, cell.name, "_matmul_kernel")]))
                row["note"] = "wgmma m64n128k16, 128x128 tiles, persistent; MMA efficiency not modelled"
            else:
                tokens = cell.m * d["Q"]
                # causal: each new token sees its context up to itself
                seen = cell.m * sum(d["L"] - d["Q"] + t + 1 for t in range(d["Q"]))
                # forward: q k^T and p v; the backward recomputes both and adds three more
                row["flops"] = 4 * seen * d["Hq"] * d["D"] * (3.5 if cell.backward else 1)
                kv = 2 * cell.m * d["L"] * d["Hkv"] * d["D"] * e
                row["floor_b"] = 2 * tokens * d["Hq"] * d["D"] * e * (2 if cell.backward else 1) + kv * (
                    2 if cell.backward else 1)
                row["fill"] = _fill(programs[(name, cell.name, "_attention_kernel")])
                row["note"] = "mma.sync m16n8k16, 16-row programs; MMA efficiency not modelled"
            rows.append(row)
    kernels = defaultdict(dict)  # (seed, cell) -> kernel -> its ptxas figures, once each
    for k in report["kernels"]:
        kernels[(k["seed"], k["cell"])].setdefault(
            (k["kernel"], k["registers"], k["spill_bytes"]), "x".join(map(str, k["grid"])))
    for row in rows:
        row["floor_us"] = max(row["floor_b"] / BANDWIDTH, row["flops"] / TENSOR_FLOPS) * 1e6
        if "estimate_us" not in row:  # the tensor-core seeds: the model's bound, not their efficiency
            row["bound_us"] = row["floor_us"] / row["fill"]
        row["kernels"] = "; ".join(f"{name.lstrip('_')} {regs} regs, {spill} B spilled, {grid}"
                                   for (name, regs, spill), grid in kernels[(row["seed"], row["cell"])].items())
    return rows


def _estimate_text(r: dict) -> str:
    if "estimate_us" in r:
        return f"{r['estimate_us']:.1f} us"
    text = f"at least {r['bound_us']:.1f} us"
    if r["seed"] == "matmul" and r["flops"] / TENSOR_FLOPS > r["floor_b"] / BANDWIDTH:  # bound by the MMAs
        low, high = GEMM_SHARE
        text += (f"; {r['bound_us'] / high:.0f}-{r['bound_us'] / low:.0f} us if it runs at {low:.0%}-{high:.0%} "
                 "of the ceiling, as published bit-exact GEMMs do (assumed)")
    return text


def main(argv: list[str]) -> int:
    path = argv[0] if argv else os.path.join(os.environ.get("OUT", "."), "compile.json")
    with open(path) as f:
        report = json.load(f)
    print("| seed | cell | kernels (ptxas, sm_90) | floor | seed's bytes | SMs filled | estimate | method |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for r in _estimates(report):
        seed_b = f"{r['seed_b'] / 1e6:.0f} MB" if "seed_b" in r else "-"
        flops = r["flops"] / TENSOR_FLOPS > r["floor_b"] / BANDWIDTH
        floor = f"{r['floor_us']:.1f} us" + (" (flops)" if flops else "")
        print(f"| {r['seed']} | {r['cell']} | {r['kernels']} | {floor} | {seed_b} | {r['fill']:.0%} | "
              f"{_estimate_text(r)} | {r['note']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
