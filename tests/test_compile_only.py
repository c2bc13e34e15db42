"""Compile-only mode (tik_agent.backends.compile_only): each launch compiles for sm_90 through
Triton's own compiler and ptxas, and nothing runs.  Run in a fresh process, without the
interpreter the suite turns on."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # Triton's real compiler and ptxas: seconds per variant

ROOT = Path(__file__).parents[1]

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def launch(x, y, block=128, warps=4):
    scale[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block, num_warps=warps)
'''


# A bundled seed's kernel module as ``k`` in compile-only mode for sm_90, bf16 inputs x (64 x 4096)
# and w, and ``out`` for what a TTGIR test reads.
SEED_KERNEL = """
import importlib.util, json
from tik_agent.backends import compile_only
compile_only.activate(90)
import torch
spec = importlib.util.spec_from_file_location("k", "%s/seed_kernels/{seed}/kernel.py")
k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)
x = torch.empty(64, 4096, dtype=torch.bfloat16)
w = torch.empty(4096, dtype=torch.bfloat16)
out = {{}}
"""


def _run(tmp_path: Path, body: str, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "tiny.py").write_text(KERNEL)
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    clean.update(PYTHONPATH=f"{ROOT}:{tmp_path}", TRITON_CACHE_DIR=str(tmp_path / "cache"), **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=clean, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


def test_a_launch_compiles_for_sm90_and_runs_nothing(tmp_path):
    proc = _run(tmp_path, """
        import json
        from tik_agent.backends import compile_only
        compile_only.activate(90)
        import torch
        import tiny

        x, y = torch.ones(1000), torch.zeros(1000)
        with compile_only.recording() as found:
            tiny.launch(x, y)                 # compiles
            tiny.launch(x, y)                 # the same variant: known
            tiny.launch(x[:992], y[:992])     # n divisible by 16: another specialisation
            tiny.launch(x, y, block=256, warps=8)
        first = found[0]
        with compile_only.recording() as wide:  # four floats a thread
            tiny.launch(x, y, block=512)
            tiny.launch(x[:992], y[:992], block=512)
        print(json.dumps({
            "untouched": bool((y == 0).all()),
            "grids": [l.grid for l in found], "warps": [l.num_warps for l in found],
            "compiled": [l.compiled_s > 0 for l in found], "variants": len({l.variant for l in found}),
            "arch": first.compiled.metadata.target.arch, "ptx": ".target sm_90" in first.compiled.asm["ptx"],
            "resources": compile_only.resources(first),
            "loads": [compile_only.resources(l)["load_bytes"] for l in wide]}))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["untouched"]  # no program ran: y is still zeros, not 2s
    assert facts["grids"] == [[8, 1, 1], [8, 1, 1], [8, 1, 1], [4, 1, 1]]  # cdiv(n, BLOCK), as Triton computes it
    assert facts["warps"] == [4, 4, 4, 8]
    assert facts["compiled"] == [True, False, True, True] and facts["variants"] == 3
    assert facts["arch"] == 90 and facts["ptx"]
    assert facts["resources"]["registers"] > 0 and facts["resources"]["spill_bytes"] == 0
    # four floats a thread: 1000 is not divisible by 16, so the mask may change within them and
    # each is a load of its own; 992 is, and they are one 16-byte load
    assert facts["loads"] == [[4], [16]], facts["loads"]


def test_compile_only_refuses_the_interpreter(tmp_path):
    proc = _run(tmp_path, """
        from tik_agent.backends import compile_only
        compile_only.activate(90)
    """, env={"TRITON_INTERPRET": "1"})
    assert proc.returncode != 0 and "unset TRITON_INTERPRET" in proc.stderr


def test_an_unknown_target_is_bad_usage():
    from tik_agent.backends.compile_only import target_capability
    from tik_agent.errors import UsageError

    assert target_capability("sm_90") == 90
    with pytest.raises(UsageError, match="sm_91"):
        target_capability("sm_91")


def test_a_failed_rehearsal_step_says_why_in_the_log(tmp_path):
    """A step's process that fails prints its last lines under the step's line, so the
    check's log.txt says why (a seed that did not compile showed only "exit 1")."""
    proc = _run(tmp_path, f"""
        from pathlib import Path
        from tik_agent.backends.replay_runs import run_steps
        ok, _ = run_steps(Path({str(tmp_path)!r}), "sm_90", 1, ["probes-nosuchseed"])
        print("ok" if ok else "failed")
    """)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("compile probes-nosuchseed: exit 1") and lines[-1] == "failed"
    assert "unknown step 'probes-nosuchseed'" in lines[1]


def test_the_ttgir_shows_which_add_rmsnorm_knobs_change_a_tree_on_sm90(tmp_path):
    """add_rmsnorm's docstring: on sm_90 DW_BLOCK_N = 512 splits a chunk's row sum over two warps
    and 1024 does not (so it is part of the numerics there); dx's row sums read the same at 1 and
    4 rows a program.  Negative control: the dx kernel's layout at 8 warps is another one."""
    proc = _run(tmp_path, SEED_KERNEL.format(seed="add_rmsnorm") % ROOT + textwrap.dedent("""
        for dw, rows, warps in ((512, 4, 4), (1024, 4, 4), (512, 1, 4), (512, 4, 8)):
            k.DW_BLOCK_N, k.BWD_ROWS_PER_PROGRAM, k.NUM_WARPS = dw, rows, warps
            with compile_only.recording() as found:
                k.add_rms_norm_backward(x, x, w, x, x, 1e-6)
            out[f"{dw},{rows},{warps}"] = {l.kernel.split(".")[-1]: compile_only.reductions(l) for l in found}
        print(json.dumps(out))
    """))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    chunks = {key: v["_add_rms_norm_dw_chunks_kernel"] for key, v in got.items()}
    dx = {key: v["_add_rms_norm_dx_kernel"] for key, v in got.items()}
    assert [r["axis"] for r in chunks["512,4,4"]] == [0] and chunks["512,4,4"][0]["shape"] == [16, 512]
    assert "warpsPerCTA = [2, 2]" in chunks["512,4,4"][0]["layout"]
    assert "warpsPerCTA = [1, 4]" in chunks["1024,4,4"][0]["layout"]
    tree = lambda found: [(r["axis"], r["layout"]) for r in found]  # a row's adds: the axis and the layout
    assert [r["shape"] for r in dx["512,4,4"]] == [[4, 1024]] * 2 and [r["shape"] for r in dx["512,1,4"]] == [[1, 1024]] * 2
    assert tree(dx["512,4,4"]) == tree(dx["512,1,4"])
    assert tree(dx["512,4,8"]) != tree(dx["512,4,4"])


def test_the_warm_step_fills_one_cache_that_a_second_replay_only_reads(tmp_path):
    """A node's warm cache (scripts/gpu_check_steps.py warm): its processes compile into one
    folder, and the same launches made again in new processes find every variant there (a
    worker on the node then compiles only what a candidate adds).  Negative control: another
    target's keys are not in it, and the same launches for it add variants."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    out.mkdir()
    steps = ["probes-logprobs:NUM_WARPS=8"]
    warm = lambda target: subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check_steps.py"), "warm", str(cache), str(out),
         "--target", target, "--jobs", "2", "--steps", *steps],
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300)
    from tik_agent.backends.replay_runs import cache_variants

    first = warm("sm_90")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    filled = cache_variants(cache)
    report = json.loads((out / "compile.json").read_text())
    assert filled > 0 and report["cache"] == str(cache) and [r["step"] for r in report["steps"]] == steps
    # The variants' C launchers are built where libcuda is (a node); here the reason they were not is kept.
    (row,) = report["steps"]
    assert row["launchers_built"] > 0 or "libcuda" in row["launcher_error"], row
    assert "the node's warm Triton cache, for sm_90" in (out / "summary.md").read_text()
    again = warm("sm_90")
    assert again.returncode == 0 and cache_variants(cache) == filled     # every variant found, none added
    other = warm("sm_80")
    assert other.returncode == 0 and cache_variants(cache) > filled      # control: new keys compile


def test_rmsnorm_dx_on_one_row_a_program_keeps_the_16_row_tree_and_the_forwards_on_sm90(tmp_path):
    """rmsnorm's dx on a GPU takes one row a program (the forward's tile) where the CPU takes 16:
    on sm_90 both row sums of dx read the same layout at 16 rows and at 1, and the forward's row
    sum too, so each row's adds form the same tree.  Negative control: 8 warps is another layout."""
    proc = _run(tmp_path, SEED_KERNEL.format(seed="rmsnorm") % ROOT + textwrap.dedent("""
        for rows, warps in ((16, 4), (1, 4), (1, 8)):
            k.BWD_ROWS_PER_PROGRAM, k.NUM_WARPS = rows, warps
            with compile_only.recording() as found:
                k.rms_norm_backward(x, w, x, 1e-6)
                k.rms_norm(x, w)
            out[f"{rows},{warps}"] = {l.kernel.split(".")[-1]: compile_only.reductions(l) for l in found}
        print(json.dumps(out))
    """))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    tree = lambda found: [(r["axis"], r["layout"]) for r in found]
    dx = {key: v["_rms_norm_dx_kernel"] for key, v in got.items()}
    assert [r["shape"] for r in dx["16,4"]] == [[16, 1024]] * 2 and [r["shape"] for r in dx["1,4"]] == [[1, 1024]] * 2
    assert tree(dx["16,4"]) == tree(dx["1,4"]) and "warpsPerCTA = [1, 4]" in dx["1,4"][0]["layout"]
    assert tree(got["1,4"]["_rms_norm_kernel"]) == tree(dx["1,4"])[:1]
    assert tree(dx["1,8"]) != tree(dx["1,4"])
