"""The CPU path: Triton's interpreter, made deterministic where it is not.

Two facts from measurement (see docs/cpu-interpreter.md) shape this module:

* ``TRITON_INTERPRET=1`` must be in the environment *before* ``import triton``;
  set later, jitted functions fail with an error about kernel scope.
* The interpreter computes ``tl.dot`` with ``np.matmul``, i.e. BLAS, whose
  summation order depends on where a row sits inside the tile.  A tiled matmul
  is then not batch invariant even though its Triton program is.  We replace
  the builder's ``create_dot`` with an ordered fp32 rank-1 update over the
  dot's own k-block, added to the accumulator afterwards: every output element
  then sees the same roundings whatever the tile's M/N shape, while the k-block
  size (``BLOCK_K``, split-K) stays visible in the bits.  That models the
  property a GPU kernel with a fixed ``BLOCK_K`` has, without claiming to
  model the GPU's bits.

Nothing here touches the CUDA path: :func:`activate` refuses to run when Triton
was already imported without the interpreter, and nothing patches anything
unless it is called.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

from tik_agent.backends import interpreter_speed
from tik_agent.errors import UsageError

log = logging.getLogger(__name__)

_ORDERED_DOT_MARK = "_tik_ordered_dot"


def activate() -> None:
    """Turn the interpreter on and install the ordered dot. Idempotent.

    Must be called before anything imports ``triton``.
    """
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError(
            "triton was imported before the CPU interpreter was enabled; "
            "set TRITON_INTERPRET=1 before importing triton"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    # The interpreter evaluates kernels with numpy, which warns on every
    # overflow and NaN that the special-value regimes produce on purpose.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=re.escape(__name__))
    _install_ordered_dot()
    interpreter_speed.install()


def is_active() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _install_ordered_dot() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder_cls = type(interpreter.interpreter_builder)
    if getattr(builder_cls.create_dot, _ORDERED_DOT_MARK, False):
        return

    def _as_fp32(handle):
        data = handle.data
        dtype = handle.dtype.scalar
        if dtype == tl.bfloat16 or (dtype.primitive_bitwidth == 8 and dtype.is_floating()):
            # bf16 (and fp8) tensors are held as raw integer patterns.
            return interpreter._convert_float(data, dtype, tl.float32, None).view(np.float32)
        return data.astype(np.float32)

    def ordered_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        a32 = _as_fp32(a)
        b32 = _as_fp32(b)
        # One tl.dot call sums its own k-block first, k = 0, 1, ... in order,
        # then adds that block's sum to the accumulator it was given.  Every
        # output element sees the same fp32 roundings whatever its position in
        # the tile and whatever the tile's M/N shape; the k-block size (and so
        # BLOCK_K or a split-K) stays visible in the bits, as it is on a GPU.
        block = np.zeros(a32.shape[:-1] + b32.shape[-1:], dtype=np.float32)
        for k in range(a32.shape[-1]):
            block += a32[..., :, k : k + 1] * b32[..., k : k + 1, :]
        acc = d.data.astype(np.float32) + block
        return interpreter.TensorHandle(acc.astype(d.data.dtype, copy=False), d.dtype.scalar)

    setattr(ordered_dot, _ORDERED_DOT_MARK, True)
    builder_cls.create_dot = ordered_dot
    log.debug("installed the ordered fp32 dot in the Triton interpreter")
