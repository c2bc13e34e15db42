"""The CPU interpreter set-up on whichever triton is installed (CI runs this on 3.6 and 3.9)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tik_agent.backends import interpreter, interpreter_speed


@triton.jit
def _tiled_dot(a_ptr, b_ptr, c_ptr, M, N: tl.constexpr, K: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, N)
    acc = tl.zeros((BLOCK_M, N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < M, other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=rows[:, None] < M)


def _run(a, b, block_k=16, block_m=16):
    m, k = a.shape
    c = torch.empty(m, b.shape[1], dtype=torch.float32)
    _tiled_dot[(triton.cdiv(m, block_m),)](a, b, c, m, b.shape[1], k, BLOCK_M=block_m, BLOCK_K=block_k)
    return c


def _ordered(a, b, block_k):
    """The documented model: each k-block summed k = 0, 1, ... in fp32, then added to the accumulator."""
    a32, b32 = a.numpy().astype(np.float32), b.numpy().astype(np.float32)
    acc = np.zeros((a32.shape[0], b32.shape[1]), dtype=np.float32)
    for k0 in range(0, a32.shape[1], block_k):
        block = np.zeros_like(acc)
        for k in range(k0, k0 + block_k):
            block += a32[:, k:k + 1] * b32[k:k + 1, :]
        acc = acc + block
    return acc


def test_the_ordered_dot_is_installed():
    assert interpreter.is_active()
    builder = type(triton.runtime.interpreter.interpreter_builder)
    assert getattr(builder.create_dot, "_tik_ordered_dot", False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dot_follows_the_ordered_model_and_is_batch_invariant(dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(21, 64, generator=g).to(dtype)
    b = torch.randn(64, 16, generator=g).to(dtype)
    full = _run(a, b)
    assert torch.equal(full.view(torch.int32), torch.from_numpy(_ordered(a.float(), b.float(), 16)).view(torch.int32))
    for row in (0, 5, 20):  # a row's bits do not depend on its place in the tile
        assert torch.equal(_run(a[row:row + 1].contiguous(), b).view(torch.int32), full[row:row + 1].view(torch.int32))


def test_block_k_stays_visible_in_the_bits():
    # Negative control for the test above: a different k-blocking must not look identical.
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(16, 64, generator=g), torch.randn(64, 16, generator=g)
    assert not torch.equal(_run(a, b, block_k=16).view(torch.int32), _run(a, b, block_k=32).view(torch.int32))


@triton.jit
def _scaled(x, scale):
    return tl.exp(x * scale) / (1.0 + tl.abs(x))


@triton.jit
def _with_a_device_function(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, tl.sqrt(_scaled(x, 0.5) + tl.sum(x, axis=0)), mask=offs < n)


def _device_function_bits(n: int = 300) -> bytes:
    x = torch.randn(n, generator=torch.Generator().manual_seed(3))
    y = torch.empty_like(x)
    _with_a_device_function[(triton.cdiv(n, 64),)](x, y, n, BLOCK=64)
    return y.numpy().tobytes()


def test_the_builtin_names_cache_changes_no_bit_and_leaves_triton_language_as_it_was():
    """Speed only: the member walk of the interpreter's per-launch patching is listed once.
    The same kernel (a launch and a device-function call) gives the same bits under the
    interpreter's own walk, and after either, triton.language holds its builtins again."""
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    cached = triton_interpreter._patch_builtin
    if not getattr(cached, interpreter_speed.MARK, False):
        pytest.skip("this triton's _patch_builtin is not the one the cache was written against")
    load = tl.load
    with_cache = _device_function_bits()
    assert tl.load is load and tl.core.is_builtin(tl.load)
    import inspect

    def walk(pkg, builder, scope):  # the interpreter's own
        for name, member in inspect.getmembers(pkg):
            if tl.core.is_builtin(member):
                triton_interpreter._patch_attr(pkg, name, member, builder, scope)

    triton_interpreter._patch_builtin = walk
    try:
        assert _device_function_bits() == with_cache
    finally:
        triton_interpreter._patch_builtin = cached
    assert tl.load is load


def test_a_device_function_inside_a_launch_does_not_patch_the_language_again(monkeypatch):
    """Speed only: inside a launch, a device function (``_scaled``, ``tl.sum``) patches the
    language only where nothing has yet, so the patches per launch do not grow with its
    programs.  Same bits as the interpreter's own repeats, and after either, triton.language
    holds its builtins again."""
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    skipping, launch = triton_interpreter._patch_lang, triton_interpreter.GridExecutor.__call__
    if not hasattr(skipping, "__wrapped__"):
        pytest.skip("this triton's _patch_lang is not the one the skip was written against")
    core = triton_interpreter._patch_lang_core
    patches = []  # one per language module patched
    monkeypatch.setattr(triton_interpreter, "_patch_lang_core", lambda *a: patches.append(1) or core(*a))
    load = tl.load

    def counted(n: int) -> tuple[bytes, int]:
        patches.clear()
        bits = _device_function_bits(n)
        return bits, len(patches)

    (one, ours_one), (five, ours_five) = counted(64), counted(300)   # 1 and 5 programs
    assert ours_one == ours_five and tl.load is load and tl.core.is_builtin(tl.load)
    # negative control: as shipped, every program's calls patch again
    monkeypatch.setattr(triton_interpreter, "_patch_lang", skipping.__wrapped__)
    monkeypatch.setattr(triton_interpreter.GridExecutor, "__call__", launch.__wrapped__)
    (one_shipped, shipped_one), (five_shipped, shipped_five) = counted(64), counted(300)
    assert (one_shipped, five_shipped) == (one, five)
    assert shipped_five > shipped_one >= ours_one and tl.load is load


def test_the_numpy_dtype_table_is_kept_per_type():
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    cached = triton_interpreter._get_np_dtype
    if not hasattr(cached, "__wrapped__"):
        pytest.skip("this triton's _get_np_dtype is not the one the cache was written against")
    types = [tl.float32, tl.bfloat16, tl.float16, tl.int1, tl.int8, tl.uint64, tl.pointer_type(tl.float32),
             tl.block_type(tl.float32, [16]), tl.block_type(tl.bfloat16, [4, 8]),
             tl.block_type(tl.pointer_type(tl.int32), [2])]
    assert [cached(t) for t in types] == [cached.__wrapped__(t) for t in types]
    assert [cached(t) for t in types] == [np.dtype(x) for x in (np.float32, np.uint16, np.float16, bool, np.int8,
                                                                np.uint64, np.uint64, np.float32, np.uint16,
                                                                np.uint64)]


def _block_type_fields(t) -> tuple:
    return (type(t.shape).__name__, [(type(d).__name__, repr(d)) for d in t.shape], t.numel, t.name,
            t.element_ty)


def test_block_types_built_from_the_cache_are_the_constructors_own():
    """Speed only: a block shape is unwrapped and validated once.  The second build of every
    shape (a list of ints, of constexprs, a tl.tuple, with another element type) has the
    fields the shipped constructor gives: the same tl.tuple type, element types, count and
    name; shapes the constructor refuses are still refused, each time."""
    from triton.language import core

    interpreter.activate()
    cached = core.block_type.__init__
    if not hasattr(cached, "__wrapped__"):
        pytest.skip("this triton's block_type is not the one the cache was written against")
    c = tl.constexpr
    shapes = [[16], [4, 8], [c(4), c(8)], [c(2), 64], [1, 1], [True], [1]]
    elements = [tl.float32, tl.bfloat16, tl.pointer_type(tl.int32)]

    def build(ctor):
        core.block_type.__init__ = ctor
        try:
            made = [tl.block_type(e, list(s)) for _ in range(2) for s in shapes for e in elements]
            made += [tl.block_type(tl.float16, t.shape) for t in made[:6]]   # from a tl.tuple, as with_element_ty does
            refused = []
            for bad in ([], [3], [4, 6], [2.0], (4, 8)):
                try:
                    tl.block_type(tl.float32, bad)
                    refused.append(None)
                except (TypeError, ValueError, AssertionError) as exc:
                    refused.append(type(exc).__name__)
            return [_block_type_fields(t) for t in made], refused
        finally:
            core.block_type.__init__ = cached

    ours, shipped = build(cached), build(cached.__wrapped__)
    assert ours == shipped
    assert shipped[1] == ["TypeError", "ValueError", "ValueError", "TypeError", "AssertionError"]
    assert ("bool", "True") in ours[0][5 * len(elements)][1]   # [True] is kept as the constructor keeps it


def test_tensors_share_their_shapes_constexprs_and_keep_the_constructors_fields():
    """Speed only: a tensor's shape and element count are wrapped in constexprs once per
    shape.  Fields match the shipped constructor's for block and scalar types, and the
    kernels' bits do not move (negative control: as shipped, every tensor wraps anew)."""
    from triton.language import core
    from triton.runtime.interpreter import TensorHandle

    interpreter.activate()
    cached = core.tensor.__init__
    if not hasattr(cached, "__wrapped__"):
        pytest.skip("this triton's tensor is not the one the cache was written against")
    import enum

    class Width(enum.IntEnum):   # spelled '16' like the int: same type name, another shape
        B16 = 16

    types = [tl.block_type(tl.float32, [4, 8]), tl.block_type(tl.int32, [16]), tl.float32,
             tl.block_type(tl.float32, [True]), tl.block_type(tl.float32, [1]),
             tl.block_type(tl.float32, [16]), tl.block_type(tl.float32, [Width.B16])]
    handle = TensorHandle(np.zeros(1, np.float32), tl.float32)

    def fields(t):
        return (type(t.shape).__name__, [(type(d).__name__, repr(d.value)) for d in t.shape],
                repr(t.numel.value), t.type is not None, t.dtype)

    def build(ctor):
        core.tensor.__init__ = ctor
        try:
            made = [tl.tensor(handle, ty) for _ in range(2) for ty in types]
            return made, [fields(t) for t in made], _device_function_bits()
        finally:
            core.tensor.__init__ = cached

    ours, ours_fields, ours_bits = build(cached)
    shipped, shipped_fields, shipped_bits = build(cached.__wrapped__)
    assert ours_fields == shipped_fields and ours_bits == shipped_bits
    assert ours[0].shape is ours[len(types)].shape            # one tuple per shape...
    assert shipped[0].shape is not shipped[len(types)].shape  # ...where the constructor makes one per tensor
    again = ours[len(types):]   # the second build of each type, from the cache where it has one
    assert [repr(d.value) for d in again[3].shape] == ["True"] and again[3].shape is not again[4].shape


def test_blocks_of_one_shape_are_broadcast_as_shipped():
    """Speed only: two blocks of one shape (the same shape object, as the block-type cache
    gives them) come back as they went in, which is what the shipped broadcast returns after
    walking their dimensions; any other pair goes through the shipped broadcast.  The kernels'
    bits are the same either way."""
    from triton.language import semantic
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    fast = semantic.TritonSemantic.broadcast_impl_value
    if not hasattr(fast, "__wrapped__"):
        pytest.skip("this triton's broadcast is not the one the fast path was written against")
    sem = semantic.TritonSemantic(triton_interpreter.interpreter_builder)

    def block(shape, dtype=tl.float32):
        ty = tl.block_type(dtype, list(shape))
        return tl.tensor(triton_interpreter.TensorHandle(np.zeros(shape, np.float32), dtype), ty)

    a, b = block((4, 8)), block((4, 8))
    assert a.type.shape is b.type.shape                        # what the fast path relies on
    for op in (fast, fast.__wrapped__):
        left, right = op(sem, a, b)
        assert left is a and right is b
        wide, row = op(sem, block((4, 8)), block((1, 8)))          # not one shape: broadcast
        assert [d for d in row.type.shape] == [4, 8] and row.handle.data.shape == (4, 8)
    semantic.TritonSemantic.broadcast_impl_value = fast.__wrapped__
    try:
        shipped = _device_function_bits()
    finally:
        semantic.TritonSemantic.broadcast_impl_value = fast
    assert _device_function_bits() == shipped



def test_broadcasts_of_other_shapes_and_splats_are_the_shipped_ones():
    """Blocks of one rank and other shapes (either side, twice: the second from the memo),
    blocks and scalars of other dtypes (either side), pointers splat, and the pairs the fast
    path leaves to the shipped function (ranks that differ, sizes that do not broadcast):
    each result's type and data are the shipped function's."""
    from triton.language import semantic
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    fast = semantic.TritonSemantic.broadcast_impl_value
    if not hasattr(fast, "__wrapped__"):
        pytest.skip("this triton's broadcast is not the one the fast path was written against")
    sem = semantic.TritonSemantic(triton_interpreter.interpreter_builder)
    rng = np.random.default_rng(1)

    def block(shape, dtype=tl.float32, np_dtype=np.float32):
        data = rng.standard_normal(shape).astype(np_dtype)
        return tl.tensor(triton_interpreter.TensorHandle(data, dtype), tl.block_type(dtype, list(shape)))

    def scalar(value, dtype, np_dtype):
        return tl.tensor(triton_interpreter.TensorHandle(np.array(value, np_dtype), dtype), dtype)

    def seen(pair):
        return [(t.type.name, t.handle.data.dtype, t.handle.data.shape, t.handle.data.tobytes(), t.handle.dtype)
                for t in pair]

    pairs = [(block((16, 1)), block((1, 8))), (block((1, 8)), block((16, 8))), (block((4, 8)), block((4, 1))),
             (block((2, 1, 4), tl.int32, np.int32), block((2, 4, 1))),
             (block((8,)), scalar(3, tl.int32, np.int32)), (scalar(2.5, tl.float16, np.float16), block((4, 4))),
             (scalar(7, tl.int64, np.int64), block((2, 4), tl.int32, np.int32)),
             (scalar(4096, tl.pointer_type(tl.float32), np.uint64), block((16,), tl.int32, np.int32)),
             (block((8,)), block((4, 8))), (block((4, 8)), block((8,)))]
    for _ in range(2):
        for lhs, rhs in pairs:
            assert seen(fast(sem, lhs, rhs)) == seen(fast.__wrapped__(sem, lhs, rhs)), (lhs.type, rhs.type)
    for op in (fast, fast.__wrapped__):
        with pytest.raises(ValueError, match="incompatible dimensions at index 1: 8 and 4"):
            op(sem, block((4, 8)), block((4, 4)))

@triton.jit
def _shape_probes(out_ptr, BLOCK: tl.constexpr):
    # What the static rules leave to a kernel that wants to know whether two shapes are one
    # object (``is`` is refused by kernel-identity): containment tries identity first.
    offs = tl.arange(0, BLOCK)
    a = tl.zeros([BLOCK], tl.float32)
    b = tl.full([BLOCK], 1.0, tl.float32)
    n = 0.0
    if a.shape in (b.shape,):
        n = n + 1.0
    if a.type.shape in [b.type.shape]:
        n = n + 2.0
    if a.shape[0] in (b.shape[0],):
        n = n + 4.0
    tl.store(out_ptr + offs, b * n)


def test_shared_shape_objects_are_not_seen_through_containment():
    """Attack on the shared shapes: ``in`` tries identity, then equality, and equal shapes
    are equal either way, so the shipped pieces and the caches store the same bits."""
    from triton.language import core, semantic

    interpreter.activate()
    pieces = [(core.block_type, "__init__"), (core.tensor, "__init__"),
              (semantic.TritonSemantic, "broadcast_impl_value")]
    ours = [getattr(owner, name) for owner, name in pieces]
    if not all(hasattr(fn, "__wrapped__") for fn in ours):
        pytest.skip("this triton's pieces are not the ones the caches were written against")
    got = []
    try:
        for shipped in (False, True):
            for (owner, name), fn in zip(pieces, ours):
                setattr(owner, name, fn.__wrapped__ if shipped else fn)
            out = torch.zeros(4)
            _shape_probes[(1,)](out, BLOCK=4)
            got.append(out.tolist())
    finally:
        for (owner, name), fn in zip(pieces, ours):
            setattr(owner, name, fn)
    assert got[0] == got[1] == [7.0] * 4


def test_every_piece_is_installed_on_the_tritons_it_was_written_against():
    """The tests above skip where a piece was left out; on the pinned Tritons (3.6 for the
    nodes, 3.9 here) every piece must be in, or a changed version check would go unseen."""
    from triton.language import core, semantic
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    if not triton.__version__.startswith(("3.6.", "3.9.")):
        pytest.skip(f"triton {triton.__version__}: the pieces may be left out here")
    pieces = [triton_interpreter._patch_builtin, triton_interpreter._patch_lang, triton_interpreter._get_np_dtype,
              core.block_type.__init__, core.tensor.__init__, semantic.TritonSemantic.broadcast_impl_value,
              triton_interpreter._convert_float, semantic.TritonSemantic.binary_op_sanitize_overflow_impl]
    assert all(getattr(fn, interpreter_speed.MARK, False) for fn in pieces)


def _casts():
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    fast = triton_interpreter._convert_float
    if not hasattr(fast, "__wrapped__"):
        pytest.skip("the fast casts are left out on this triton")
    return fast, fast.__wrapped__


def test_bf16_widening_gives_the_shipped_bits_for_every_value():
    """All 65536 bfloat16 words, as a block of two dimensions and as a strided view."""
    fast, shipped = _casts()
    words = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    for block in (words, words[:, ::3], words[7]):
        got = fast(block, tl.bfloat16, tl.float32, None)
        assert got.shape == block.shape and got.dtype == np.uint32
        assert np.array_equal(got, shipped(block, tl.bfloat16, tl.float32, None))
    assert fast(words[0, 1:2], tl.bfloat16, tl.float32, None)[0] == 0   # the shipped flush of a subnormal, kept


def test_bf16_narrowing_gives_the_shipped_bits():
    """Random words of every exponent, the edges of each class (zeros, the smallest and
    largest normals, infinities, NaNs with low and high payloads), and blocks with a
    subnormal, which go to the shipped function.  (All 2^32 words were compared once on
    triton 3.6 and 3.9: no difference.)"""
    fast, shipped = _casts()
    rng = np.random.default_rng(0)
    edges = np.array([0, 0x80000000, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
                      0x7F800001, 0x7FC00000, 0xFFFFFFFF, 0x7F80FFFF, 0x3F80FFFF, 0x3F818000], dtype=np.uint32)
    normal = np.concatenate([edges, rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)])
    normal = normal[~(((normal & 0x7F800000) == 0) & ((normal & 0x7FFFFF) != 0))]
    normal = normal[: len(normal) // 2 * 2]
    for block in (normal.view(np.float32), normal.view(np.float32).reshape(-1, 2)[:, 1]):
        assert np.array_equal(fast(block, tl.float32, tl.bfloat16, None), shipped(block, tl.float32, tl.bfloat16, None))
    subnormals = np.array([0x00500000, 1, 0x80000001, 0x007FFFFF, 0x00400000, 0x3F800000], dtype=np.uint32).view(np.float32)
    assert np.array_equal(fast(subnormals, tl.float32, tl.bfloat16, None),
                          shipped(subnormals, tl.float32, tl.bfloat16, None))
    assert fast(subnormals[:1], tl.float32, tl.bfloat16, None)[0] == 0x20   # the shipped walk's, a shift gives 0x50


def test_a_bf16_kernel_gives_the_same_bits_with_the_fast_casts(monkeypatch):
    """Through a kernel: a bfloat16 load widened, scaled and narrowed, fast and shipped."""
    from triton.runtime import interpreter as triton_interpreter

    fast, shipped = _casts()

    @triton.jit
    def scale(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs).to(tl.float32)
        tl.store(y_ptr + offs, (x * 1.37 + 0.5).to(tl.bfloat16))

    x = torch.randn(4096).mul_(torch.logspace(-30, 30, 4096)).to(torch.bfloat16)
    outs = []
    for fn in (fast, shipped):
        monkeypatch.setattr(triton_interpreter, "_convert_float", fn)
        y = torch.empty_like(x)
        scale[(1,)](x, y, BLOCK=4096)
        outs.append(y.view(torch.int16))
    assert torch.equal(outs[0], outs[1])


@triton.jit
def _offsets(x_ptr, y_ptr, stride, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    big = i * stride + stride          # int32: wraps for the later lanes
    tl.store(y_ptr + i, big - tl.load(x_ptr + i))


def test_an_unasserted_overflow_check_is_skipped_with_the_same_bits(monkeypatch):
    """debug off: the wrapped int32 offsets are the shipped ones; debug on: the shipped check
    runs and its assert fires, with the skip installed as without it."""
    from triton.language import semantic
    from triton.runtime import interpreter as triton_interpreter

    interpreter.activate()
    fast = semantic.TritonSemantic.binary_op_sanitize_overflow_impl
    if not hasattr(fast, "__wrapped__"):
        pytest.skip("the overflow-check skip is left out on this triton")
    x = torch.arange(64, dtype=torch.int32)
    outs = []
    for fn in (fast, fast.__wrapped__):
        monkeypatch.setattr(semantic.TritonSemantic, "binary_op_sanitize_overflow_impl", fn)
        y = torch.empty_like(x)
        _offsets[(1,)](x, y, 2**26, BLOCK=64)
        outs.append(y)
    assert torch.equal(outs[0], outs[1]) and outs[0].min() < 0 < outs[0].max()   # some lanes wrapped
    builder = triton_interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", triton_interpreter.InterpreterOptions(debug=True))
    for fn in (fast, fast.__wrapped__):
        monkeypatch.setattr(semantic.TritonSemantic, "binary_op_sanitize_overflow_impl", fn)
        with pytest.raises(Exception, match="overflow detected"):
            _offsets[(1,)](x, torch.empty_like(x), 2**26, BLOCK=64)
