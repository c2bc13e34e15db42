"""The evaluator against an adversarial corpus, and bit-preserving rewrites that must pass.

Each exploit is the rmsnorm seed with one edit that passes the static rules
(those have their own corpus in tests/adversarial/static) and must be caught
at run time, for the right reason.  A small grid keeps each evaluation to a
few seconds; the reference is computed once per module.
"""

from pathlib import Path

import pytest

from seedutil import SMALL_RMSNORM_EDITS, copy_seed, edit, small_rmsnorm
from shared import cached_reference
from tik_agent.judge.evaluate import compute_reference, evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome
from tik_agent.spec.cases import parity_cases
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

@pytest.fixture(scope="module")
def small_seed(tmp_path_factory):
    return load_spec(small_rmsnorm(tmp_path_factory.mktemp("seed")))


@pytest.fixture(scope="module")
def options():
    from conftest import DEVICE

    return EvalOptions(device=DEVICE, timeout_s=120, rounds=3, warmup=1)


@pytest.fixture(scope="module")
def reference(small_seed, options):
    return cached_reference(small_seed, options)


def _variant(spec, tmp_path: Path, edits: list[tuple[str, str]], name: str = "candidate.py") -> Path:
    path = tmp_path / name
    path.write_text(spec.source.read_text())
    for old, new in edits:
        edit(path, old, new)
    return path


# (id, edits to the seed, expected outcome, text expected in the reason)
EXPLOITS = [
    ("input-mutation", [("        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)",
                         "        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)\n"
                         "        tl.store(x_rows + c[None, :], y.to(x_ptr.dtype.element_ty), mask=mask)")],
     Outcome.INTEGRITY_FAILED, "[inputs]"),
    ("unwritten-output", [("        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)",
                           "        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask & (c < N - 1)[None, :])")],
     Outcome.INTEGRITY_FAILED, "[determinism]"),
    ("stale-memory-no-real-work", [("    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)", "    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)\n    M = 0")],
     Outcome.INTEGRITY_FAILED, "[determinism]"),
    ("no-kernel-launched", [("    _rms_norm_kernel[grid](", "    return y\n    _rms_norm_kernel[grid](")],
     Outcome.INTEGRITY_FAILED, "[launch]"),
    ("batch-variant-chunking", [("        BLOCK_N=BLOCK_N,", "        BLOCK_N=BLOCK_N if M > 2 else 128,")],
     Outcome.PARITY_FAILED, "[invariance]"),
    ("reduction-order-change", [("BLOCK_N = 1024", "BLOCK_N = 128")], Outcome.PARITY_FAILED, "[parity]"),
    ("shape-overfit", [("        BLOCK_N=BLOCK_N,", "        BLOCK_N=BLOCK_N if N in (256, 1000) else 128,")],
     Outcome.PARITY_FAILED, "hid:"),
    ("wrong-signature", [("def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6)",
                          "def rms_norm(inp: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6)"),
                         ("    if x.dim() != 2:", "    x = inp\n    if x.dim() != 2:")],
     Outcome.COMPILE_ERROR, "does not take"),
    ("triton-error", [("    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)", "    rstd = 1.0 / tl.no_such_function(sum_sq / N + eps)")],
     Outcome.COMPILE_ERROR, "no_such_function"),
    ("runtime-shape-error", [("        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)\n        lanes",
                              "        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)\n        x = tl.reshape(x, (BLOCK_N, ROWS))\n        lanes")],
     Outcome.COMPILE_ERROR, "compile error"),
    ("endless-loop", [("    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)", "    while M > 0:\n        M = M + 1\n    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)")],
     Outcome.TIMEOUT, "wall-clock limit"),
    ("host-exfiltration", [("import torch\n", "import torch\nimport os\n"), ("    x = x.contiguous()\n", "    x = x.contiguous()\n    os.environ.get('ANTHROPIC_API_KEY')\n")],
     Outcome.REJECTED_STATIC, "[import]"),
    ("syntax-error", [("def rms_norm(", "def rms_norm((")], Outcome.REJECTED_STATIC, "[syntax]"),
]


@pytest.fixture(scope="module")
def verdict_of(small_seed, options, reference, tmp_path_factory):
    """The verdict on the seed with ``edits``, evaluated once per module (two tests read the
    reduction-order change's)."""
    verdicts: dict = {}

    def get(edits, opts=options):
        key = (repr(edits), opts)
        if key not in verdicts:
            candidate = _variant(small_seed, tmp_path_factory.mktemp("variant"), edits)
            verdicts[key] = evaluate(small_seed, candidate, opts, reference=reference)
        return verdicts[key]

    return get


@pytest.mark.parametrize("name,edits,outcome,reason", EXPLOITS, ids=[e[0] for e in EXPLOITS])
def test_exploit_is_rejected_for_the_right_reason(options, verdict_of, name, edits, outcome, reason):
    opts = options if name != "endless-loop" else EvalOptions(device=options.device, timeout_s=8, rounds=1)
    verdict = verdict_of(edits, opts)
    assert verdict.outcome is outcome, f"{name}: {verdict.outcome.value}: {verdict.reason}"
    assert reason in (verdict.reason or ""), verdict.reason
    assert not verdict.passed


def test_parity_failure_reports_the_first_mismatch(verdict_of):
    verdict = verdict_of([("BLOCK_N = 1024", "BLOCK_N = 128")])  # the reduction-order change's
    mm = verdict.first_mismatch
    assert mm is not None and mm["expected_bits"] != mm["actual_bits"] and mm["ulps"] >= 1
    assert mm["case"].startswith("par:") or mm["case"].startswith("inv:")


REWRITES = [
    ("rows-per-program-4", [("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 4")]),
    ("rows-per-program-16", [("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 16")]),
    ("num-warps", [("NUM_WARPS = 4", "NUM_WARPS = 8")]),
    ("renamed-and-reformatted", [("    sum_sq = tl.sum(lanes, axis=1)\n    rstd = 1.0 / tl.sqrt(sum_sq / N + eps)",
                                  "    total = tl.sum(lanes, axis=1)\n    mean_sq = total / N\n    rstd = 1.0 / tl.sqrt(mean_sq + eps)")]),
]


@pytest.mark.parametrize("name,edits", REWRITES, ids=[r[0] for r in REWRITES])
def test_bit_preserving_rewrite_passes(small_seed, options, reference, tmp_path, name, edits):
    candidate = _variant(small_seed, tmp_path, edits)
    verdict = evaluate(small_seed, candidate, options, reference=reference)
    # The same bits and about the same speed: accepted, or "slower" when the machine is busy.
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    assert verdict.cases_passed == len(verdict.cases) > len(reference.cases)  # fixed cases, then drawn ones
    assert verdict.speedup is not None and verdict.timer


@pytest.fixture(scope="module")
def eight_rows(small_seed, options, reference, tmp_path_factory):
    """8 rows a program against the seed and a parent of 4 (one evaluation, two tests)."""
    # The parent does 4 rows a program, the seed 1: a gap that no load on the machine
    # closes (with 2 rows the parent once came out no faster than the seed under load).
    tmp_path = tmp_path_factory.mktemp("eight")
    parent = _variant(small_seed, tmp_path, [("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 4")], "parent.py")
    candidate = _variant(small_seed, tmp_path, [("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 8")])
    return evaluate(small_seed, candidate, options, reference=reference, parent=parent)


def test_faster_variant_is_measured_faster(eight_rows):
    assert eight_rows.passed and eight_rows.speedup > 1.5, eight_rows.speedup


def test_parent_timing_is_reported(eight_rows):
    assert eight_rows.passed and eight_rows.speedup_vs_parent is not None
    assert eight_rows.speedup > eight_rows.speedup_vs_parent > 0


def test_a_seed_that_is_not_deterministic_is_refused(tmp_path, options):
    from tik_agent.errors import SpecError

    seed = copy_seed("rmsnorm", tmp_path)
    for old, new in SMALL_RMSNORM_EDITS.items():
        edit(seed / "spec.toml", old, new)
    edit(seed / "kernel.py", "        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)",
         "        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask & (c > 0)[None, :])")
    spec = load_spec(seed)
    # One case is enough: every case runs twice on differently poisoned memory, and the
    # unwritten first column differs in each.
    with pytest.raises(SpecError, match="the seed fails its own checks"):
        compute_reference(spec, EvalOptions(device=options.device, timeout_s=120, timing=False),
                          cases=parity_cases(spec)[:1])
