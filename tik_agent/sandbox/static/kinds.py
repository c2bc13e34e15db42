"""The vocabulary of the type inference: the kinds of value host code can hold, and
what library calls, attributes and methods give back."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from tik_agent.sandbox.static import policy

INT, FLOAT, BOOL, STR, NONE = "int", "float", "bool", "str", "none"
SIZE, DTYPE, DEVICE, INFO = "size", "dtype", "device", "info"  # shapes/plain tuples, torch.dtype, finfo & co
TENSOR, UNKNOWN, META, RANGE = "tensor", "unknown", "meta", "range"
FUNC, KERNEL, MODULE, API, BUILTIN = "function", "kernel", "module", "api", "builtin"

PLAIN = frozenset({INT, FLOAT, BOOL, STR, NONE, SIZE, DTYPE, DEVICE, INFO})
TENSOR_LIKE = frozenset({TENSOR, UNKNOWN})
_TL_DTYPES = frozenset(
    {"float16", "bfloat16", "float32", "float64", "int1", "int8", "int16", "int32", "int64",
     "uint8", "uint16", "uint32", "uint64", "float8e4nv", "float8e5"}
)  # fmt: skip
API_RESULTS = {
    **{f"torch.{name}": TENSOR for name in policy.TORCH_ALLOCATORS},
    "triton.cdiv": INT, "triton.next_power_of_2": INT, "torch.finfo": INFO, "torch.iinfo": INFO,
    "torch.cuda.get_device_properties": INFO, "torch.cuda.current_device": INT,
    "torch.cuda.is_available": BOOL, "torch.is_tensor": BOOL, "torch.device": DEVICE, "torch.Size": SIZE,
    "triton.constexpr": INT, "triton.language.constexpr": INT,
}  # fmt: skip
BUILTIN_RESULTS = {
    "int": INT, "len": INT, "round": INT, "float": FLOAT, "bool": BOOL, "isinstance": BOOL,
    "any": BOOL, "all": BOOL, "str": STR, "repr": STR, "format": STR, "range": RANGE, "slice": SIZE,
}  # fmt: skip


def constant_type(value: object) -> str:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, (str, bytes)):
        return STR
    return NONE if value is None or value is Ellipsis else UNKNOWN


def api_type(path: str) -> str:
    if policy.is_namespace(path):
        return MODULE
    if path.startswith("torch.") and path[6:] in policy.TORCH_DTYPES:
        return DTYPE
    if path.startswith(policy.DSL + ".") and path.rsplit(".", 1)[1] in _TL_DTYPES:
        return DTYPE
    if path.startswith("math.") and path != "math.inf" and path[5:] in ("pi", "e", "tau", "nan", "inf"):
        return FLOAT
    return API


def attribute_type(receiver: str, attr: str) -> Iterable[str]:
    if receiver == NONE:  # reading an attribute of None raises: it adds no type
        return set()
    if receiver in TENSOR_LIKE:
        return set(policy.TENSOR_ATTRS.get(attr, UNKNOWN).split("|"))
    table = {DEVICE: policy.DEVICE_ATTRS, DTYPE: policy.DTYPE_ATTRS}.get(receiver)
    if table is not None and attr in table:
        return set(table[attr].split("|"))
    if receiver == INFO:
        return {INT, FLOAT, STR}
    return {UNKNOWN}


def method_type(receiver: str, method: str, call: ast.Call) -> Iterable[str]:
    if receiver == NONE:
        return set()
    if receiver in TENSOR_LIKE:
        if method in policy.TENSOR_METADATA_METHODS:
            kinds = policy.TENSOR_METADATA_METHODS[method].split("|")
            return {kinds[0] if not call.args and len(kinds) > 1 else kinds[-1]} if len(kinds) > 1 else {kinds[0]}
        return {TENSOR} if method in policy.TENSOR_VIEW_METHODS else {UNKNOWN}
    if receiver == SIZE and method in policy.SIZE_METHODS:
        return {INT}
    if receiver == STR and method in policy.STR_METHODS:
        return {STR, BOOL, SIZE}
    return {UNKNOWN}
