"""A dimension of size 1 is never stepped along, so its stride is no part of a layout.

torch sets it freely: a (1, N) row of a transposed (N, 1) tensor has strides (1, 1),
its contiguous copy (N, 1).  Comparing whole stride tuples made the wheel's verify()
report "the kernel changed its input 'x'" for a certified M = 1 transposed case, and
then a rows-alone vs full-batch stride mismatch, on bits that were the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from packageutil import render_package
from tik_agent.bits import layout_strides, meta_difference
from tik_agent.spec.seeds import BUNDLED_DIR


def _row_of_a_transposed_column(n: int = 15) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float16).reshape(n, 1).t()


def test_a_size_one_dimension_s_stride_is_not_compared():
    row = _row_of_a_transposed_column()
    assert row.stride() == (1, 1) and row.clone(memory_format=torch.contiguous_format).stride() == (15, 1)
    assert layout_strides(row) == (1,)
    assert meta_difference(row.clone(memory_format=torch.contiguous_format), row) is None


def test_a_timed_calls_output_digest_ignores_a_size_one_stride_too():
    """The timed-call check compares digests of the candidate's and the seed's outputs: an
    honest (1, N) output laid out either way has one digest; a real layout change does not."""
    from tik_agent.bits import output_digest

    row = _row_of_a_transposed_column()
    assert output_digest(row) == output_digest(row.clone(memory_format=torch.contiguous_format))
    view = torch.arange(15.0).reshape(5, 3).t()
    assert output_digest(view) != output_digest(view.contiguous())   # negative control


def test_a_real_stride_difference_is_still_reported():
    """Negative control: a transposed (3, 5) view against its contiguous copy."""
    view = torch.zeros(5, 3).t()
    assert "strides (1, 3), expected (5, 1)" == meta_difference(view.contiguous(), view)


CHECK = """
import json, importlib, sys
from {name} import _cases, _verify
spec = _cases.load_spec()
kernel = getattr(importlib.import_module("{name}.kernel"), spec.entry)
seed = getattr(importlib.import_module("{name}._seed_kernel"), spec.entry)
row = _cases.Case(id="t", m=1, dims={{"N": 15}}, dtype="float16", regime="spread", seed=1435979911,
                  invariance=True, subbatches=2, certified="passed", layout="transposed")
print(json.dumps(_verify._check_case(spec, row, kernel, seed, "cpu").__dict__))
"""


@pytest.mark.slow  # a fresh interpreter runs the kernel (a few launches of one row)
def test_the_wheel_s_verify_passes_an_m1_transposed_case(tmp_path):
    """The case of the flaky verify (a drawn hidden-invariance row, float16, transposed x)."""
    dest, name = render_package(tmp_path, BUNDLED_DIR / "rmsnorm")
    env = dict(os.environ, PYTHONPATH=str(dest), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", CHECK.format(name=name)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = json.loads(proc.stdout.splitlines()[-1])
    assert check["passed"], check
