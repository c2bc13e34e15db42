"""32-bit offsets where the domain reaches past 2**31 elements (tik_agent/judge/offsets.py):
an index from tl.program_id or a loop, times a size or stride a launch passes, must be
widened to int64 first; the bundled seeds are, and kernels that are not are refused."""

import textwrap
from pathlib import Path

import pytest

from seedutil import copy_seed, edit
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.offsets import narrow_offsets, needs_wide_offsets
from tik_agent.outcomes import Outcome
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import resolve

CORPUS = Path(__file__).parent / "adversarial" / "domain"

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, M, N, stride_x, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
{body}


def launch(x):
    M, N = x.shape
    y = torch.empty_like(x)
    _k[(M,)](x, y, M, N, x.stride(0), BLOCK=1024)
    return y
"""


def _found(body: str) -> list[str]:
    source = KERNEL.format(body=textwrap.indent(textwrap.dedent(body).strip(), "    "))
    return [f.message.split("'")[1] for f in narrow_offsets(source)]


@pytest.mark.parametrize("name", ["rmsnorm", "add_rmsnorm", "logprobs", "matmul"])
def test_the_bundled_row_seeds_compute_their_offsets_in_64_bits(name):
    spec = resolve(name)
    assert needs_wide_offsets(spec)
    assert narrow_offsets(spec.source.read_text()) == []


def test_the_rule_applies_only_where_the_domain_reaches_two_to_the_31(tmp_path):
    assert not needs_wide_offsets(resolve("attention"))   # the sequences layout: heads times small strides
    seed = copy_seed("rmsnorm", tmp_path)
    edit(seed / "spec.toml", "M = { min = 1, max = 1048576 }", "M = { min = 1, max = 65536 }")
    assert needs_wide_offsets(load_spec(seed))            # 65536 x 32768 = 2**31 elements: offsets reach it
    edit(seed / "spec.toml", "M = { min = 1, max = 65536 }", "M = { min = 1, max = 65535 }")
    assert not needs_wide_offsets(load_spec(seed))        # one row fewer: every offset fits in 31 bits


@pytest.mark.parametrize("body, narrow", [
    ("tl.store(y_ptr + pid * N + cols, tl.load(x_ptr + pid * stride_x + cols))", ["pid * N", "pid * stride_x"]),
    ("row = pid.to(tl.int64)\ntl.store(y_ptr + row * N + cols, tl.load(x_ptr + row * stride_x + cols))", []),
    ("off = tl.cast(pid, tl.int64) * stride_x\ntl.store(y_ptr + off + cols, 0.0)", []),
    ("r = pid * 2 + 1\ntl.store(y_ptr + r * N, 0.0)", ["r * N"]),
    ("tl.store(y_ptr + pid * BLOCK + cols, 0.0)", []),                  # a constexpr: not a size
    ("for s in range(0, M, BLOCK):\n    tl.store(y_ptr + (s + cols) * stride_x, 0.0)", ["(s + cols) * stride_x"]),
    ("t = tl.load(x_ptr + pid.to(tl.int64))\ntl.store(y_ptr + t * N, 0.0)", []),   # a loaded value: not an index
])
def test_an_index_times_a_size_is_narrow_unless_widened_first(body, narrow):
    assert sorted(_found(body)) == narrow


def test_a_size_passed_by_keyword_or_from_a_shape_counts():
    source = KERNEL.format(body="    tl.store(y_ptr + pid * N + cols, 0.0)").replace(
        "_k[(M,)](x, y, M, N, x.stride(0), BLOCK=1024)", "_k[(M,)](x, y, M, N=x.shape[1], stride_x=7, BLOCK=1024)")
    assert [f.message.split("'")[1] for f in narrow_offsets(source)] == ["pid * N"]
    unused = source.replace("N=x.shape[1]", "N=7")
    assert narrow_offsets(unused) == []   # a literal is no size a call's data sets


@pytest.mark.parametrize("launch", [
    "_k[(M,)](x, y, M, int(x.shape[1]), 7, BLOCK=1024)",                    # a size through a call
    "strides = x.stride()\n    _k[(M,)](x, y, M, 5, strides[0], BLOCK=1024)",  # through a subscript
    "n = x.numel() // M\n    _k[(M,)](x, y, M, n, 7, BLOCK=1024)",            # through arithmetic
    "w = int(k)\n    k = x.shape[1]\n    _k[(M,)](x, y, M, w, 7, BLOCK=1024)",  # bound before its source
    "_k[(M,)](x, y, M, len(x[0]), 7, BLOCK=1024)",                          # len() of a row
])
def test_a_size_laundered_on_the_host_still_counts(launch):
    """Each launch once passed its size as something the rule did not recognise as one."""
    source = KERNEL.format(body="    tl.store(y_ptr + pid * N + cols, tl.load(x_ptr + pid * stride_x + cols))")
    source = source.replace("_k[(M,)](x, y, M, N, x.stride(0), BLOCK=1024)", launch)
    assert [f.message.split("'")[1] for f in narrow_offsets(source)], launch
    # Control: the same launch with literals in the two size slots is not refused.
    literal = source.replace("pid * N", "pid * 5").replace("pid * stride_x", "pid * 7")
    assert narrow_offsets(literal) == []


def test_evaluate_refuses_a_kernel_that_copies_then_multiplies_in_32_bits(tmp_path):
    """int32_offsets_copied.py is bit-exact on every case (its inputs are contiguous copies,
    so no huge view reaches it): its source is what gives it away, before anything runs."""
    verdict = evaluate(resolve("rmsnorm"), CORPUS / "int32_offsets_copied.py", EvalOptions(device="cpu"))
    assert verdict.outcome is Outcome.REJECTED_STATIC
    assert "[offset-width] 'rows[:, None] * N' in _rms_norm_kernel" in verdict.reason
    assert verdict.cases == [] and {v["rule"] for v in verdict.static_violations} == {"offset-width"}
