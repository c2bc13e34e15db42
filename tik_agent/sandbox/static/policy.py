"""The policy tables: which modules, APIs, builtins and attributes a kernel file may use.

Allowlists throughout: what a launcher needs (allocation, views, metadata and a
launch) is small and stable, so anything not listed here is rejected.
"""

from __future__ import annotations

import builtins
import re

# Modules a candidate may import (plus the DSL namespaces of triton.language, below).
ALLOWED_MODULES = frozenset({"torch", "triton", "triton.language", "math", "typing", "enum", "__future__"})

TRITON_API = frozenset(
    f"triton.{name}" for name in ("jit", "cdiv", "next_power_of_2", "heuristics", "language", "Config", "constexpr")
)

# typing and enum import sys, functools and friends, so only the names a kernel file
# uses are allowed; math holds only pure functions and constants.
STDLIB_API = frozenset(
    [f"typing.{name}" for name in ("Any", "Optional", "Union", "Tuple", "List", "Dict", "Sequence", "Callable")]
    + ["enum.Enum", "enum.IntEnum", "enum.auto", "__future__.annotations"]
)

# triton.language is allowed as a whole, except what its modules import: builtins,
# inspect, knobs, the C extension, importlib machinery, the runtime driver.  A chain may
# only walk through DSL namespaces and may not end on one of those internals
# (tl.core.builtins.open, tl.extra.module_finder, tl.target_info.driver ...).
DSL = "triton.language"
DSL_NAMESPACES = frozenset(
    {"extra", "cuda", "hip", "libdevice", "math", "standard", "random", "utils", "gdc", "target_info"}
)
DSL_INTERNALS = frozenset(
    {
        "core", "semantic", "tl", "builtins", "inspect", "ir", "knobs", "typing", "pkgutil", "os", "sys",
        "module", "modules", "module_finder", "module_from_spec", "module_name", "spec", "driver", "wraps",
        # Under the CPU interpreter, running a kernel injects the interpreter's own
        # globals into the DSL modules (tl.standard.interpreter_builder, numpy helpers).
        "interpreter_builder", "np_erf_fp32", "np_erf_fp64", "np_umulhi_u64", "partial", "dataclass",
        "annotations", "is_pkg", "np", "numpy", "time", "textwrap", "dataclasses", "triton", "ast",
        "functools", "jit",
    }
)  # fmt: skip

TORCH_DTYPES = (
    "float16", "bfloat16", "float32", "float64", "half", "float", "double",
    "int8", "int16", "int32", "int64", "uint8", "int", "long", "short", "bool",
    "float8_e4m3fn", "float8_e5m2",
)  # fmt: skip
TORCH_ALLOCATORS = ("empty", "empty_like", "empty_strided", "zeros", "zeros_like")
TORCH_API = frozenset(
    f"torch.{name}"
    for name in (
        *TORCH_DTYPES, *TORCH_ALLOCATORS,
        "dtype", "Tensor", "Size", "device", "finfo", "iinfo", "is_tensor",
        "cuda.current_device", "cuda.get_device_properties", "cuda.is_available", "cuda.device",
    )
)  # fmt: skip

# Objects that are namespaces: they may be named only by the import statement itself,
# never bound, passed, returned or stored (that is how an alias escapes resolution).
_NAMESPACE_PATHS = frozenset({*ALLOWED_MODULES, "torch.cuda"})

FORBIDDEN_BUILTINS = frozenset(
    {
        "open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars",
        "getattr", "setattr", "delattr", "breakpoint", "input", "help", "exit", "quit",
        "memoryview", "dir", "object", "super", "classmethod", "staticmethod", "property",
    }
)  # fmt: skip

# Builtins a kernel file may use at all; the numeric ones take only plain values on
# the host (sum(x) or max(a, b) over tensors is torch compute through Python).
NUMERIC_BUILTINS = frozenset({"int", "float", "bool", "abs", "min", "max", "round", "sum", "divmod", "pow",
                              "range", "reversed", "sorted", "any", "all", "str", "repr", "format"})
OTHER_BUILTINS = frozenset({"len", "tuple", "list", "dict", "isinstance", "type", "enumerate", "zip", "slice",
                            "print", "True", "False", "None", "NotImplemented", "Ellipsis"})
EXCEPTIONS = frozenset(n for n in dir(builtins) if n.endswith(("Error", "Exception")) or n == "Warning")
ALLOWED_BUILTINS = NUMERIC_BUILTINS | OTHER_BUILTINS | EXCEPTIONS
ALL_BUILTINS = frozenset(dir(builtins))

# Attributes that walk from a generator, coroutine, traceback or function to frames,
# code objects and the globals of whoever called the candidate (the harness).
INTROSPECTION_ATTRS = frozenset(
    {
        "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
        "tb_frame", "tb_next", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
        "co_code", "co_consts", "func_globals",
    }
)  # fmt: skip

# Tensor methods known to compute (or copy, convert, synchronise) on the host side;
# reported as host compute rather than as an unlisted attribute.
HOST_COMPUTE_METHODS = frozenset(
    {
        "sum", "mean", "exp", "log", "log_softmax", "softmax", "matmul", "mm", "bmm", "addmm",
        "einsum", "norm", "pow", "sqrt", "rsqrt", "mul", "add", "sub", "div", "square", "gather",
        "scatter", "index_select", "max", "min", "amax", "amin", "logsumexp", "cumsum", "clone",
        "float", "half", "bfloat16", "double", "to", "type", "cpu", "cuda", "numpy", "tolist",
        "item", "record_stream", "backward", "register_hook", "pin_memory", "masked_fill",
        "where", "abs", "neg", "var", "std", "prod", "argmax", "argmin", "sort", "topk", "type_as",
    }
)  # fmt: skip

# --- what a launcher may read from a value, by the value's inferred type (infer.py).
# Tensors (and values of unknown type, which may be tensors).  data_ptr is left out:
# an address is a cache key, and nothing a launcher does needs it.
TENSOR_ATTRS = {
    "shape": "size", "dtype": "dtype", "device": "device", "ndim": "int", "is_cuda": "bool",
    "itemsize": "int", "nbytes": "int", "requires_grad": "bool", "T": "tensor", "mT": "tensor",
}  # fmt: skip
TENSOR_METADATA_METHODS = {
    "numel": "int", "dim": "int", "element_size": "int", "nelement": "int", "ndimension": "int",
    "get_device": "int", "is_contiguous": "bool", "is_floating_point": "bool",
    "size": "size|int", "stride": "size|int",
}  # fmt: skip
TENSOR_VIEW_METHODS = frozenset(
    {
        "view", "reshape", "flatten", "unsqueeze", "squeeze", "transpose", "t", "permute", "expand",
        "expand_as", "view_as", "contiguous", "narrow", "select", "unflatten", "movedim", "unbind",
        "split", "chunk", "new_empty", "new_zeros", "new_empty_strided",
    }
)  # fmt: skip
DEVICE_ATTRS = {"type": "str", "index": "int|none"}
DTYPE_ATTRS = {"itemsize": "int", "is_floating_point": "bool", "is_signed": "bool", "is_complex": "bool"}
INFO_ATTRS = frozenset(
    {
        "max", "min", "eps", "tiny", "bits", "resolution", "smallest_normal",
        "multi_processor_count", "name", "total_memory", "major", "minor", "warp_size",
        "L2_cache_size", "regs_per_multiprocessor", "max_threads_per_multi_processor",
        "shared_memory_per_block", "shared_memory_per_block_optin", "shared_memory_per_multiprocessor",
    }
)  # fmt: skip
STR_METHODS = frozenset({"startswith", "endswith", "lower", "upper", "strip", "join", "format", "split"})
SIZE_METHODS = frozenset({"numel", "index", "count"})

# Under the interpreter a DSL value (tl.tensor) holds a numpy array in .handle, which
# reaches numpy, ctypes and files: kernel code may read only what the DSL documents.
# constexpr.value is left out: it hands back the raw Python object a launch passed.
DSL_VALUE_ATTRS = frozenset(
    {
        "T", "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and",
        "atomic_cas", "atomic_load", "atomic_max", "atomic_min", "atomic_or", "atomic_poll",
        "atomic_store", "atomic_xchg", "atomic_xor", "broadcast_to", "cast", "cdiv", "ceil", "cos",
        "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather",
        "histogram", "item", "log", "log2", "logical_and", "logical_or", "max", "min", "permute",
        "ravel", "reduce", "reduce_or", "reshape", "rsqrt", "sigmoid", "sin", "softmax", "sort",
        "split", "sqrt", "sqrt_rn", "store", "sum", "to", "trans", "view", "xor_sum",
        "shape", "dtype", "type", "numel", "element_ty", "scalar", "primitive_bitwidth",
        "is_floating", "is_int", "is_ptr", "is_block", "is_bool", "is_int_signed", "is_int_unsigned",
        "is_fp16", "is_bf16", "is_fp32", "is_fp64", "is_fp8", "is_standard_floating",
    }
)  # fmt: skip

DUNDER = re.compile(r"__[A-Za-z]\w*__")


def api_allowed(path: str) -> bool:
    """Whether a dotted path (``torch.empty``, ``tl.extra.libdevice.rsqrt``) may be used."""
    if path in TORCH_API or path in TRITON_API or path in STDLIB_API or path == DSL:
        return True
    if path.startswith("math."):
        return path.count(".") == 1
    if path.startswith(DSL + "."):
        *namespaces, name = path[len(DSL) + 1 :].split(".")
        return (
            all(n in DSL_NAMESPACES for n in namespaces)
            and name not in DSL_INTERNALS
            and not name.startswith("_")
            # Inside a DSL sub-module, capitalised names are the classes it imports
            # (typing aliases, and the interpreter's GridExecutor, InterpreterBuilder ...).
            and not (namespaces and name[:1].isupper())
        )
    return False


def api_prefix_allowed(path: str) -> bool:
    """True if ``path`` is allowed or leads to something allowed (``from torch import cuda``)."""
    return api_allowed(path) or any(entry.startswith(path + ".") for entry in TORCH_API | TRITON_API)


def module_allowed(module: str) -> bool:
    return module in ALLOWED_MODULES or (module.startswith(DSL + ".") and api_allowed(module))


def is_namespace(path: str) -> bool:
    """Whether ``path`` names a module or DSL namespace rather than a function, class or constant."""
    if path in _NAMESPACE_PATHS:
        return True
    if path.startswith(DSL + "."):
        return all(part in DSL_NAMESPACES for part in path[len(DSL) + 1 :].split("."))
    return False
