"""Speed only: Triton's interpreter, with the work it repeats for every program done once.

The interpreter runs a kernel one program at a time, and every operation of every program
goes through Triton's front end: result types built, shapes unwrapped and validated, the
language modules patched.  What those steps compute depends on the kernel's code and its
block shapes only, never on a program's data, so each is computed once and reused:

* ``_patch_builtin``: the builtins of the language modules listed once, not walked with
  ``inspect.getmembers`` on every launch and device-function call;
* ``_patch_lang``: no second patch of a language module inside one launch;
* ``_get_np_dtype``: the numpy dtype kept per Triton type;
* ``block_type.__init__``: a block shape's ints and element count validated once per shape;
* ``tensor.__init__``: a shape's constexprs built once per shape (they are never mutated);
* ``broadcast_impl_value``: two blocks of one shape are returned as they came, a pair of
  other shapes' result is worked out once, and a scalar is splat without rebuilding its
  block type through ``to_ir``;
* and what :mod:`tik_agent.backends.interpreter_work` installs: work whose answer is known
  or unused (bfloat16 casts, overflow checks nobody asserts).

Each replacement keeps what it replaces as ``__wrapped__`` (``benchmarks/bench_interpreter.py``
swaps them back, and ``tests/test_interpreter.py`` compares bits), and each is left out
where this Triton's piece is not the one it was written against.  None of this changes
what a kernel computes (the same values reach the same numpy operations) with one
exception the static rules close: blocks of one shape now share one shape object, so
``a.shape is b.shape`` would be True where Triton's compiler says False; the rule
``kernel-identity`` refuses object identity in kernels but ``is None``.
"""

from __future__ import annotations

import builtins
import logging

from tik_agent.backends import interpreter_work
from tik_agent.backends.interpreter_patch import MARK, written_against as _written_against

log = logging.getLogger(__name__)



def install() -> None:
    """Install every speed-up this Triton allows.  Idempotent; the interpreter must be on."""
    _install_builtin_names_cache()
    _install_nested_patch_skip()
    _install_dtype_cache()
    _install_block_type_cache()
    _install_tensor_shape_cache()
    _install_same_shape_broadcast()
    interpreter_work.install()


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
    if original is None or patch_attr is None or getattr(original, MARK, False):
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

    setattr(patch_builtin, MARK, True)
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
    if original is None or executor is None or getattr(original, MARK, False):
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

    setattr(patch_lang, MARK, True)
    patch_lang.__wrapped__ = original
    interpreter._patch_lang = patch_lang
    call.__wrapped__ = launch_call
    executor.__call__ = call


def _install_dtype_cache() -> None:
    """Speed only: the interpreter's ``_get_np_dtype`` builds its table of numpy dtypes on
    every call (about a twentieth of an interpreted kernel's time); the answer for a Triton
    type never changes, so it is kept per type (a block type's is its element type's)."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_get_np_dtype", None)
    if original is None or getattr(original, MARK, False):
        return
    known: dict = {}
    block_type = interpreter.tl.block_type

    def get_np_dtype(tt_dtype):
        # A block type is unhashable (it defines __eq__ alone) and maps to its element's dtype,
        # a pointer's included: the answer of its element type.
        if isinstance(tt_dtype, block_type):
            tt_dtype = tt_dtype.element_ty
        try:
            return known[tt_dtype]
        except KeyError:
            found = known[tt_dtype] = original(tt_dtype)
            return found
        except TypeError:  # unhashable: as the interpreter does it
            return original(tt_dtype)

    setattr(get_np_dtype, MARK, True)
    get_np_dtype.__wrapped__ = original
    interpreter._get_np_dtype = get_np_dtype


# What the constructors below were written against (triton 3.6 and 3.9 alike): the names their
# code uses and its constants (the name's format pieces among them).  Another Triton's
# constructor may do more, and is then left as it is.
_BLOCK_TYPE_CODE = (frozenset({"TypeError", "_unwrap_shape", "element_ty", "isinstance", "list", "name",
                               "numel", "shape", "tuple", "validate_block_shape"}),
                    (None, "0d block_type is forbidden", "<", ", ", ">"))
_TENSOR_CODE = (frozenset({"__init__", "constexpr", "dtype", "handle", "is_block", "math", "numel", "prod",
                           "scalar", "shape", "super", "tuple", "type"}),
                ("Not called by user code.", (), None))


def _install_block_type_cache() -> None:
    """Every operation of every program builds its result's ``block_type``, whose constructor
    unwraps the shape, wraps it in a new ``tl.tuple`` (typing each element) and validates it
    each time: about a fifth of an interpreted matmul.  A shape of ints (or constexpr ints),
    given as a list or a ``tl.tuple``, that was built once gets that build's ``tl.tuple``,
    element count and name again; any other shape, and any first sight of one, goes through
    the constructor as shipped.  The shared ``tl.tuple`` is never mutated: only the compiler's
    tuple assignment does that, on a kernel's own tuples."""
    from triton.language import core

    original = core.block_type.__init__
    if not _written_against(original, _BLOCK_TYPE_CODE):
        log.debug("block_type.__init__ is not the one its cache was written against; left as it is")
        return
    constexpr, tl_tuple = core.constexpr, core.tuple
    known: dict[tuple[int, ...], tuple] = {}

    def init(self, element_ty, shape):
        dims = None
        if type(shape) is list or type(shape) is tl_tuple:
            dims = tuple(s.value if type(s) is constexpr else s for s in shape)
            if any(type(d) is not int for d in dims):
                dims = None
        built = known.get(dims) if dims else None
        if built is None:
            original(self, element_ty, shape)
            if dims and type(self.shape) is tl_tuple and tuple(self.shape.values) == dims:
                known[dims] = (self.shape, self.numel, str(self.shape))
            return
        self.element_ty = element_ty
        self.shape, self.numel, spelled = built
        self.name = f"<{spelled}, {element_ty}>"

    setattr(init, MARK, True)
    init.__wrapped__ = original
    core.block_type.__init__ = init


def _install_tensor_shape_cache() -> None:
    """Every value of every program is a ``tl.tensor`` whose constructor wraps its type's
    shape and element count in new constexprs.  Those are immutable, so one tuple of them per
    shape serves every tensor of that shape; the fields are the constructor's own."""
    from triton.language import core

    original = core.tensor.__init__
    if not _written_against(original, _TENSOR_CODE) or core.base_value.__init__ is not object.__init__:
        log.debug("tensor.__init__ is not the one its cache was written against; left as it is")
        return
    known: dict[object, tuple] = {}

    def init(self, handle, type):  # the parameter keeps the constructor's name: callers pass it by keyword
        # A block type's name spells its shape (``<['1', '16'], fp32>``), and a hit must also
        # hold the very shape object stored: the block-type cache gives every block of one
        # shape that object, while an int subclass spelled like an int (an IntEnum member)
        # or a shape built elsewhere is another object.  Every other type has no shape.
        block = type.is_block()
        key = getattr(type, "name", None) if block else ()
        shape = type.shape if block else None
        try:
            stored, numel, wrapped = known[key]
        except (KeyError, TypeError):
            stored = wrapped = None
        if wrapped is None or stored is not shape:  # a hit is the very shape object stored
            original(self, handle, type)
            if key is not None and (not block or all(builtins.type(d) is int for d in type.shape)):
                known[key] = (shape, self.numel, self.shape)
            return
        self.handle = handle
        self.numel = numel
        self.type = type
        self.dtype = type.scalar
        self.shape = wrapped

    setattr(init, MARK, True)
    init.__wrapped__ = original
    core.tensor.__init__ = init


# broadcast_impl_value's names in triton 3.9 (make_tensor) and 3.6 (tensor); the interpreter's create_splat's.
_BROADCAST_NAMES = frozenset({"ValueError", "append", "block_type", "builder", "create_broadcast",
                              "create_expand_dims", "create_splat", "enumerate", "get_block_shapes", "handle",
                              "is_block", "len", "range", "scalar", "str", "tl", "to_ir", "type", "values",
                              "with_element_ty"})


_SPLAT_NAMES = frozenset({"TensorHandle", "_get_np_dtype", "block_type", "data", "dtype", "full", "isinstance", "np",
                          "scalar", "shape", "tl"})


def _install_same_shape_broadcast() -> None:
    """Every binary operation broadcasts its operands first, through the front end: a third
    of an interpreted attention.  Three cases are answered without the walk, as shipped:

    * two blocks of one shape: with the block-type cache they hold the very same shape
      object, and are returned unchanged;
    * two blocks of one rank and other shapes: the result shape of that pair of shape
      objects is worked out once (the shipped rule: a 1 takes the other side's size, equal
      sizes stay), and each operand whose shape differs is broadcast to it as shipped;
    * a block and a scalar: the scalar is splat as shipped, except that the interpreter's
      ``create_splat``, which reads only its type's shape, gets the block type itself rather
      than its IR type (the same shape, rebuilt on every call by ``to_ir``).

    Anything else (ranks that differ, sizes that do not broadcast, another builder, shapes
    that are not ints) goes to the shipped function."""
    from triton.language import core, semantic
    from triton.runtime import interpreter

    cls = getattr(semantic, "TritonSemantic", None)
    original = getattr(cls, "broadcast_impl_value", None)
    maker = next((m for m in ("make_tensor", "tensor") if _written_against(original, (_BROADCAST_NAMES | {m}, None))),
                 None)
    builder_cls = getattr(interpreter, "InterpreterBuilder", None)
    if maker is None or builder_cls is None:
        log.debug("broadcast_impl_value is not the one its fast path was written against; left as it is")
        return
    splat_ok = _written_against(getattr(builder_cls, "create_splat", None), (_SPLAT_NAMES, None))
    block_type = core.block_type
    pairs: dict[tuple[int, int], tuple] = {}

    def result_shape(ls, rs):
        """(lhs shape, rhs shape, result dims, lhs changes, rhs changes), or None: shipped."""
        key = (id(ls), id(rs))
        known = pairs.get(key)
        if known is not None and known[0] is ls and known[1] is rs:
            return known
        if type(ls) is not core.tuple or type(rs) is not core.tuple or len(ls) != len(rs):
            return None
        left, right = tuple(ls.values), tuple(rs.values)
        if any(type(d) is not int for d in left + right):
            return None
        ret = []
        for a, b in zip(left, right):
            if a == 1:
                ret.append(b)
            elif b == 1 or b == a:
                ret.append(a)
            else:
                return None
        known = pairs[key] = (ls, rs, tuple(ret), left != tuple(ret), right != tuple(ret))
        return known

    def broadcast_impl_value(self, lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        lhs_block, rhs_block = lhs_ty.is_block(), rhs_ty.is_block()
        if lhs_block and rhs_block:
            if lhs_ty.shape is rhs_ty.shape:
                return lhs, rhs
            if type(self.builder) is builder_cls:
                known = result_shape(lhs_ty.shape, rhs_ty.shape)
                if known is not None:
                    make = getattr(self, maker)
                    if known[3]:
                        lhs = make(self.builder.create_broadcast(lhs.handle, list(known[2])),
                                   block_type(lhs_ty.scalar, list(known[2])))
                    if known[4]:
                        rhs = make(self.builder.create_broadcast(rhs.handle, list(known[2])),
                                   block_type(rhs_ty.scalar, list(known[2])))
                    return lhs, rhs
        elif lhs_block != rhs_block and splat_ok and type(self.builder) is builder_cls:
            make = getattr(self, maker)
            if lhs_block:
                rhs_ty = lhs_ty.with_element_ty(rhs_ty.scalar)
                return lhs, make(self.builder.create_splat(rhs_ty, rhs.handle), rhs_ty)
            lhs_ty = rhs_ty.with_element_ty(lhs_ty.scalar)
            return make(self.builder.create_splat(lhs_ty, lhs.handle), lhs_ty), rhs
        return original(self, lhs, rhs)

    setattr(broadcast_impl_value, MARK, True)
    broadcast_impl_value.__wrapped__ = original
    cls.broadcast_impl_value = broadcast_impl_value
