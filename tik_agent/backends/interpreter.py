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

from tik_agent.errors import UsageError

log = logging.getLogger(__name__)

_ORDERED_DOT_MARK = "_tik_ordered_dot"
_NAMES_CACHE_MARK = "_tik_builtin_names"


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
    _install_builtin_names_cache()
    _install_nested_patch_skip()
    _install_dtype_cache()


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


def _install_builtin_names_cache() -> None:
    """Speed only: the interpreter re-patches ``triton.language`` on every launch and every
    device-function call, each time walking the modules with ``inspect.getmembers`` (a tenth
    of a kernel's interpreted time, measured on rmsnorm).  The names of their builtins never
    change, so they are listed once; each call still reads every member and patches exactly
    those that are builtins then, as the original does.  Left alone where the interpreter's
    helper is not the one this was written against."""
    import inspect

    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_builtin", None)
    patch_attr = getattr(interpreter, "_patch_attr", None)
    if original is None or patch_attr is None or getattr(original, _NAMES_CACHE_MARK, False):
        return
    if list(inspect.signature(original).parameters) != ["pkg", "builder", "scope"]:
        log.debug("interpreter._patch_builtin has another signature; its member walk is left uncached")
        return
    from triton.language.core import is_builtin

    names: dict[int, tuple[object, tuple[str, ...]]] = {}

    def patch_builtin(pkg, builder, scope):
        known = names.get(id(pkg))
        if known is None or known[0] is not pkg:
            known = (pkg, tuple(name for name, member in inspect.getmembers(pkg) if is_builtin(member)))
            names[id(pkg)] = known
        for name in known[1]:
            member = getattr(pkg, name)
            if is_builtin(member):
                patch_attr(pkg, name, member, builder, scope)

    setattr(patch_builtin, _NAMES_CACHE_MARK, True)
    patch_builtin.__wrapped__ = original
    interpreter._patch_builtin = patch_builtin


class _Unpatched:
    """The scope of a patch that was not needed: nothing to restore."""

    def restore(self) -> None:
        pass


def _install_nested_patch_skip() -> None:
    """Speed only: a device function called inside a launch (``@triton.jit`` helpers, and
    ``tl.sum`` and the like) patches the language modules its globals hold on every call; the
    launch restores its own patch when it ends and nothing restores a device function's, so
    within a launch a module once patched stays patched, and a repeat installs equivalent
    closures.  Inside a launch, a call whose modules are all patched already patches nothing.
    Left alone where the interpreter's pieces are not the ones this was written against."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang", None)
    executor = getattr(interpreter, "GridExecutor", None)
    if original is None or executor is None or getattr(original, _NAMES_CACHE_MARK, False):
        return
    tl, core = interpreter.tl, interpreter.tl.core
    launch: dict = {"depth": 0, "patched": frozenset()}

    def languages(fn) -> frozenset[int]:
        return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is core)

    def patch_lang(fn):
        langs = languages(fn)
        if launch["depth"] and langs <= launch["patched"]:
            return _Unpatched()
        scope = original(fn)
        if launch["depth"]:  # patched until the launch ends: nothing restores a patch before that
            launch["patched"] |= langs
        return scope

    launch_call = executor.__call__

    def call(self, *args, **kwargs):
        outer = launch["patched"]
        launch["depth"] += 1
        launch["patched"] = frozenset()
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            launch["depth"] -= 1
            launch["patched"] = outer

    setattr(patch_lang, _NAMES_CACHE_MARK, True)
    patch_lang.__wrapped__ = original
    interpreter._patch_lang = patch_lang
    call.__wrapped__ = launch_call
    executor.__call__ = call


def _install_dtype_cache() -> None:
    """Speed only: the interpreter's ``_get_np_dtype`` builds its table of numpy dtypes on
    every call (about a twentieth of an interpreted kernel's time); the answer for a Triton
    type never changes, so it is kept per type."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_get_np_dtype", None)
    if original is None or getattr(original, _NAMES_CACHE_MARK, False):
        return
    known: dict = {}

    def get_np_dtype(tt_dtype):
        try:
            return known[tt_dtype]
        except KeyError:
            found = known[tt_dtype] = original(tt_dtype)
            return found
        except TypeError:  # unhashable: as the interpreter does it
            return original(tt_dtype)

    setattr(get_np_dtype, _NAMES_CACHE_MARK, True)
    get_np_dtype.__wrapped__ = original
    interpreter._get_np_dtype = get_np_dtype
