"""Speed only: work of Triton's interpreter whose answer is known or never read, done cheaply
or not at all, with the bits the shipped pieces give (``tests/test_interpreter.py``).

Each replacement keeps what it replaces as ``__wrapped__`` and is left out where this
Triton's piece is not the one it was written against, as in
:mod:`tik_agent.backends.interpreter_speed`.
"""

from __future__ import annotations

import logging

from tik_agent.backends.interpreter_patch import MARK, written_against

log = logging.getLogger(__name__)


def install() -> None:
    _install_bf16_casts()
    _install_unasserted_overflow_skip()


# _convert_float's names in triton 3.6, and in 3.9 (its FNUZ float8 branch adds two).
_CONVERT_NAMES = frozenset({"ROUNDING_MODE", "RTNE", "_ir", "any", "astype", "exponent_bias", "fp_mantissa_width",
                            "frombuffer", "getattr", "int32", "maximum", "minimum", "np", "primitive_bitwidth",
                            "range", "reshape", "shape", "tobytes", "zeros_like"})


def _install_bf16_casts() -> None:
    """The interpreter casts bfloat16 to float32 and back through ``_convert_float``, a
    generic walk over sign, exponent and mantissa with a loop over mantissa bits for
    subnormals: a fifth of an interpreted bfloat16 rmsnorm.  Its answers are kept exactly:

    * bfloat16 -> float32: a table of all 65536 answers, computed by the shipped function
      itself (which flushes bfloat16 subnormals to zero, unlike a GPU; the table keeps that);
    * float32 -> bfloat16 without a rounding mode (what ``cast_impl`` asks): for every input
      that is not a float32 subnormal the shipped walk keeps the exponent (the widths and
      biases are equal) and drops the low 16 mantissa bits, i.e. the top half of the word;
      a block holding any subnormal goes to the shipped function.

    Every other conversion (float8, a rounding mode) goes to the shipped function."""
    import numpy as np
    from triton.runtime import interpreter

    original = getattr(interpreter, "_convert_float", None)
    tl = getattr(interpreter, "tl", None)
    if tl is None or not written_against(original, *((_CONVERT_NAMES | extra, None) for extra in
                                                      (frozenset(), frozenset({"float8e4b8", "float8e5b16", "tl"})))):
        log.debug("_convert_float is not the one its fast casts were written against; left as it is")
        return
    bf16, fp32 = tl.bfloat16, tl.float32
    table: list = []

    def widen(data):
        if not table:
            table.append(original(np.arange(1 << 16, dtype=np.uint16), bf16, fp32, None).astype(np.uint32))
        return table[0][np.ascontiguousarray(data).view(np.uint16)].reshape(np.shape(data))

    def narrow(data):
        bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
        subnormal = ((bits & np.uint32(0x7F800000)) == 0) & ((bits & np.uint32(0x007FFFFF)) != 0)
        if subnormal.any():
            return None
        return (bits >> np.uint32(16)).astype(np.uint16).reshape(np.shape(data))

    def convert_float(input, input_dtype, output_dtype, rounding_mode):
        out = None
        if rounding_mode is None and isinstance(input, np.ndarray):
            if input_dtype == bf16 and output_dtype == fp32 and input.dtype.itemsize == 2:
                out = widen(input)
            elif input_dtype == fp32 and output_dtype == bf16 and input.dtype == np.float32:
                out = narrow(input)
        return original(input, input_dtype, output_dtype, rounding_mode) if out is None else out

    setattr(convert_float, MARK, True)
    convert_float.__wrapped__ = original
    interpreter._convert_float = convert_float


# binary_op_sanitize_overflow_impl's names in triton 3.6 and 3.9.
_SANITIZE_NAMES = frozenset({"__name__", "and_", "builder", "cast", "device_assert", "get_int_max_value",
                             "get_int_min_value", "greater_equal", "int64", "int_bitwidth", "is_int", "less_equal",
                             "options", "sanitize_overflow", "scalar", "scalar_constant", "tl", "type"})


def _install_unasserted_overflow_skip() -> None:
    """Every 32-bit integer add, sub and mul (every offset a kernel computes) is checked for
    overflow: both operands cast to int64, the operation redone, compared with the type's
    range, and the answer handed to ``device_assert``, which drops it unless the launch has
    ``debug`` on.  That is a fifth of an interpreted rmsnorm spent on a value nobody reads.
    With ``debug`` off and the operands of one integer type (what the shipped function
    asserts first), it returns at once, as the shipped one would after the dropped assert;
    anything else goes to the shipped function."""
    from triton.language import semantic

    cls = getattr(semantic, "TritonSemantic", None)
    original = getattr(cls, "binary_op_sanitize_overflow_impl", None)
    assert_fn = getattr(cls, "device_assert", None)
    if not written_against(original, (_SANITIZE_NAMES, None)) or \
            not written_against(assert_fn, *((frozenset({"builder", "options", "debug", "or_", "not_", maker,
                                                          "create_assert", "handle", "tl", "void"}), None)
                                            for maker in ("make_tensor", "tensor"))):
        log.debug("binary_op_sanitize_overflow_impl is not the one its skip was written against; left as it is")
        return

    def sanitize_overflow(self, lhs, rhs, binary_op):
        scalar = lhs.type.scalar
        if not self.builder.options.debug and scalar == rhs.type.scalar and scalar.is_int():
            return None
        return original(self, lhs, rhs, binary_op)

    setattr(sanitize_overflow, MARK, True)
    sanitize_overflow.__wrapped__ = original
    cls.binary_op_sanitize_overflow_impl = sanitize_overflow
