"""The Python steps of scripts/gpu-check.sh, one subcommand each (run with the installed tik_agent).

  env OUT                 versions, device, measured ceilings (device only)  -> OUT/environment.json
  seeds DIR               copies of the bundled seeds (``--small``: smallest shapes for the interpreter)
  probes DIR OUT          bit probes: each seed x each tunable value x M, and an odd-stride row view
  summarise OUT [--evals DIR]  eval-*.json (in DIR) -> OUT/evals.json and the table in summary.md
  wheel RUN WHEELDIR OUT  the exported wheel: verify(), torch.compile, a CUDA graph capture (device only)
  compile OUT --target T  the steps' launches compiled for T and run nowhere    -> OUT/compile.json
  warm CACHE OUT          the same launches compiled for this node's GPU into one Triton cache,
                          every core at once, before any timed step         -> OUT/compile.json

Results stay few (the device lends at most 8 files back); each step appends to OUT/summary.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

# The probe sizes and the constants probed beside the tunables, shared with the compile-only
# replay of this step (stdlib only at import: the interpreter is switched on in main()).
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the probes step beside it, however it is loaded
from gpu_check_probes import _device, _same, _summary, cmd_probes  # noqa: E402
from gpu_check_limits import REHEARSAL  # noqa: E402

SEEDS = ("rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention")  # every bundled seed


def cmd_env(args) -> int:
    import torch
    import triton

    import tik_agent
    from tik_agent.backends import device as devices

    device = _device()
    env = devices.environment(device)
    env.update(tik_agent=tik_agent.__version__, tik_agent_file=tik_agent.__file__, numpy=_version("numpy"),
               git=shutil.which("git"), sdks={m: _importable(m) for m in ("openai", "anthropic")},
               gitpython=_importable("git"))
    # Which OS isolation evaluations get here (bwrap with /dev/nvidia* bound is untested on GPUs).
    from tik_agent.sandbox.isolation import best

    report = best().report()
    env["isolation"] = dict(report.to_dict(), why=report.why)
    if device == "cuda":
        from tik_agent.backends.device_timing import measure_ceilings

        env["ceilings"] = measure_ceilings()
        env["l2_bytes"] = torch.cuda.get_device_properties(0).L2_cache_size
    out = Path(args.out)
    (out / "environment.json").write_text(json.dumps(env, indent=2))
    c = env.get("ceilings")
    _summary(out, f"## environment\n{env['device_name']}; python {platform.python_version()}, torch {torch.__version__}, "
                  f"triton {triton.__version__}, tik-agent {tik_agent.__version__} from {tik_agent.__file__}\n"
                  f"isolation: {report.level} ({report.mechanism}: {', '.join(report.layers)}) {report.why}\n"
                  + (f"ceilings: copy {c['copy_gbps']:.0f} GB/s, bf16 matmul {c['bf16_tflops']:.0f} TFLOP/s"
                     if c else "ceilings: not measured (no device)"))
    return 0


def _importable(name: str) -> str:
    try:
        return getattr(importlib.import_module(name), "__version__", "imported")
    except Exception as exc:  # a carried wheel that does not fit the node's packages shows here
        return f"import failed: {type(exc).__name__}: {exc}"


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except ImportError:
        return None


def cmd_seeds(args) -> int:
    """Copies of the bundled seeds; ``--small`` cuts the grid and the CPU cells for the interpreter."""
    from tik_agent.spec.seeds import BUNDLED_DIR

    dest = Path(args.dir)
    for name in SEEDS:
        target = dest / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(BUNDLED_DIR / name, target)
        if args.small:
            spec = target / "spec.toml"
            text = spec.read_text()
            for key, value in (("batch_sizes", "[1, 3]"), ("seeds", "[0]"), ("dtypes", '["float32"]'),
                               ("regimes", '["normal", "special"]')):
                text = re.sub(rf"^{key} = \[[^\]]*\]", f"{key} = {value}", text, flags=re.M)
            text = re.sub(r"^([A-Z]) = \[(\d+)[^\]]*\]", lambda m: f"{m.group(1)} = [{min(int(m.group(2)), 256)}]",
                          text, flags=re.M)
            text = _small_cpu_cells(text)
            spec.write_text(text)
    return 0


def _small_cpu_cells(text: str) -> str:
    """CPU workload cells at most 8 rows and 256 wide: the interpreter's cost is per program and element."""
    def shrink(block: str) -> str:
        if 'devices = ["cpu"]' not in block and "devices" in block:
            return block
        block = re.sub(r"^M = \d+", "M = 4", block, flags=re.M)
        return re.sub(r"^([A-LN-Z]) = (\d+)", lambda m: f"{m.group(1)} = {min(int(m.group(2)), 256)}", block,
                      flags=re.M)

    parts = text.split("[[workload]]")
    return parts[0] + "".join("[[workload]]" + shrink(p) for p in parts[1:])


def cmd_summarise(args) -> int:
    out = Path(args.out)
    source = Path(args.evals or args.out)  # the check keeps them in its work folder, not among the results
    evals, lines = {}, ["## seeds against themselves (tik-agent eval)", "",
                        "| seed | cell | shape | seed us | candidate us | ratio | share | launch us | GB/s | % of copy "
                        "| TFLOP/s | % of mm |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    timers = set()
    why = _isolation_why(out)
    for path in sorted(source.glob("eval-*.json")):
        seed = path.stem[len("eval-"):]
        try:
            v = json.loads(path.read_text())
        except json.JSONDecodeError:
            lines.append(f"| {seed} | (no verdict: see log.txt) | | | | | | | | | | |")
            continue
        evals[seed] = v
        timers.add(v.get("timer"))
        ceilings = v.get("ceilings") or {}
        # Each cell's share of the latency-weighted sum the speedup is taken over (weight x seed time).
        total = sum(c["weight"] * c["seed"]["median_ms"] for c in v.get("timing", [])) or 1.0
        for c in v.get("timing", []):
            d = c.get("device", {})
            us = c["candidate"]["median_ms"] * 1e3
            gbps = d["bytes"] / (us * 1e3) if d.get("bytes") else None
            tflops = d["flops"] / (us * 1e6) if d.get("flops") else None
            launch = d.get("launch_overhead_us", {}).get("candidate")
            ratio = c["seed"]["median_ms"] / c["candidate"]["median_ms"] if c["candidate"]["median_ms"] else None
            share = c["weight"] * c["seed"]["median_ms"] / total
            lines.append(f"| {seed} | {c['name']} | {c['shape']} | {c['seed']['median_ms'] * 1e3:.1f} | {us:.1f} | "
                         f"{_fmt(ratio, '.3f')} | {share:.0%} | {_fmt(launch, '.1f')} | {_fmt(gbps, '.0f')} | {_share(gbps, ceilings.get('copy_gbps'))} | "
                         f"{_fmt(tflops, '.1f')} | {_share(tflops, ceilings.get('bf16_tflops'))} |")
        lines.append(f"| {seed} | verdict: {v['outcome']}, {v['cases_passed']}/{v['cases_total']} cases, "
                     f"weighted speedup {v.get('speedup')}; isolation {_isolation(v.get('isolation'), why)} "
                     f"| | | | | | | | | | |")
        if not v.get("passed"):  # the reason goes to the log too: CI shows the log, not the results
            print(f"eval-{seed}: {v['outcome']}: {v.get('reason')}; first mismatch: {v.get('first_mismatch')}")
            lines.append(f"\n{seed} not passed: {v.get('reason')}\n")
        path.unlink()
    lines += ["", f"timer: {', '.join(sorted(t for t in timers if t))}"]
    (out / "evals.json").write_text(json.dumps(evals, indent=2))
    _summary(out, "\n".join(lines))
    return 0


def _isolation_why(out: Path) -> str:
    """Why this machine's workers get less than full isolation (the environment step's finding)."""
    try:
        return str(json.loads((out / "environment.json").read_text()).get("isolation", {}).get("why") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def _isolation(record, why: str) -> str:
    """An evaluation's isolation as its verdict recorded it, with what is missing and why when not full."""
    from tik_agent.sandbox.isolation import FULL, LAYERS

    if not isinstance(record, dict) or "level" not in record:
        return "not recorded"
    text = f"{record['level']} ({record.get('mechanism', '?')})"
    if record["level"] == FULL:
        return text
    missing = [layer for layer in LAYERS if layer not in record.get("layers", [])]
    return text + f": missing {', '.join(missing) or 'nothing'}" + (f"; {why}" if why else "")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _share(value, ceiling) -> str:
    return "-" if not (value and ceiling) else f"{value / ceiling:.0%}"


def cmd_wheel(args) -> int:
    """Install the exported wheel beside everything else, then verify(), torch.compile, CUDA graph."""
    import subprocess

    import torch

    out, site = Path(args.out), Path(args.site)
    wheels = sorted(Path(args.wheeldir).glob("*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"wheel: expected one exported wheel in {args.wheeldir}, found {len(wheels)}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(site), str(wheels[0])], check=True)
    sys.path.insert(0, str(site))
    name = wheels[0].name.split("-")[0]
    k = importlib.import_module(name)
    t0 = time.time()
    report = k.verify()
    lines = [f"## exported wheel {wheels[0].name}", f"verify(): {report.summary()} ({time.time() - t0:.1f} s)"]
    device = _device()
    m, n = (4, 256) if device == "cpu" else (256, 4096)
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, device=device)
    op = getattr(getattr(torch.ops, name), "rms_norm")
    eager = op(x, w)
    backend = "inductor" if device == "cuda" else "aot_eager"  # no C++ toolchain assumed on the CPU
    compiled = torch.compile(lambda a, b: op(a, b), fullgraph=True, backend=backend)
    ok_compile = _same(compiled(x, w), eager)
    lines.append(f"torch.compile (backend {backend}, fullgraph): bits {'equal' if ok_compile else 'DIFFER'}")
    ok_graph = True
    if device == "cuda":
        op(x, w)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = op(x, w)
        graph.replay()
        torch.cuda.synchronize()
        ok_graph = _same(static, eager)
        lines.append(f"CUDA graph capture and replay: bits {'equal' if ok_graph else 'DIFFER'}")
    else:
        lines.append("CUDA graph capture: skipped (no device)")
    _summary(out, "\n".join(lines))
    print("\n".join(lines[1:]))  # into the log as well: a failure must show where CI looks
    return 0 if report.passed and ok_compile and ok_graph else 1


def cmd_compile(args) -> int:
    """The compile-only replay of the steps (tik_agent.backends.replay_runs.run_steps)."""
    from tik_agent.backends.replay_runs import run_steps

    ok, table = run_steps(Path(args.out), args.target, args.jobs or os.cpu_count() or 1, args.steps)
    _summary(Path(args.out), table)
    return 0 if ok else 1


def cmd_warm(args) -> int:
    """One Triton cache for the node before any timed step: the compile-only replay of the
    probes', every evaluation's and the workload cells' launches, compiled for this node's GPU
    (its capability, warp size 32) by Triton's own compiler into CACHE, all cores at once and
    the longest steps first.  Workers then start from a copy (``tik-agent eval --warm-cache``):
    the keys are this node's triton and ptxas, so a cache built elsewhere would not match."""
    from tik_agent.backends.compile_only import target_capability
    from tik_agent.backends.compile_rehearsal import warm_steps
    from tik_agent.backends.replay_runs import run_steps

    target = args.target or _node_target()
    target_capability(target)  # a GPU the compile-only driver does not know: refused in one line
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    steps = args.steps or warm_steps()
    steps.sort(key=lambda step: -REHEARSAL.get(step, (0.0, 0.0))[1])  # the longest first
    ok, table = run_steps(Path(args.out), target, args.jobs or os.cpu_count() or 1, steps, cache=cache)
    _summary(Path(args.out), table)
    return 0 if ok else 1


def _node_target() -> str:
    """``sm_XY`` of this node's GPU (sm_90 without one: the rehearsal's stand-in)."""
    import torch

    if not torch.cuda.is_available():
        return "sm_90"
    major, minor = torch.cuda.get_device_capability(0)
    return f"sm_{major}{minor}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check_steps")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("env")
    e.add_argument("out")
    s = sub.add_parser("seeds")
    s.add_argument("dir")
    s.add_argument("--small", action="store_true")
    pr = sub.add_parser("probes")
    pr.add_argument("dir")
    pr.add_argument("out")
    pr.add_argument("--small", action="store_true")
    su = sub.add_parser("summarise")
    su.add_argument("out")
    su.add_argument("--evals", help="where the eval-SEED.json files are (default: OUT)")
    w = sub.add_parser("wheel")
    w.add_argument("run")
    w.add_argument("wheeldir")
    w.add_argument("out")
    w.add_argument("--site", required=True)
    c = sub.add_parser("compile")
    c.add_argument("out")
    c.add_argument("--target", default="sm_90")
    c.add_argument("--jobs", type=int, default=0, help="steps at a time (default: every CPU core)")
    c.add_argument("--steps", nargs="*", help="a subset of the steps (default: all)")
    wa = sub.add_parser("warm")
    wa.add_argument("cache")
    wa.add_argument("out")
    wa.add_argument("--target", help="sm_90, ... (default: this node's GPU)")
    wa.add_argument("--jobs", type=int, default=0, help="steps at a time (default: every CPU core)")
    wa.add_argument("--steps", nargs="*", help="a subset of the warm step's processes "
                    "(default: compile_rehearsal.warm_steps())")
    args = p.parse_args(argv)
    if _device() == "cpu" and args.cmd not in ("compile", "warm"):
        from tik_agent.backends import interpreter

        interpreter.activate()
    from tik_agent.errors import UsageError

    try:
        return {"env": cmd_env, "seeds": cmd_seeds, "probes": cmd_probes, "summarise": cmd_summarise,
                "wheel": cmd_wheel, "compile": cmd_compile, "warm": cmd_warm}[args.cmd](args)
    except UsageError as exc:
        print(f"gpu_check_steps {args.cmd}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
