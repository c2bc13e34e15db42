"""The attention seed: correct against float64, and one set of bits per token
whatever the launch (decode alone, prefill chunks split anywhere, a full
forward, other company, other cache placement, rows per program)."""

import pytest
import torch

from bitassert import assert_same_bits
from tik_agent.sandbox.harness import load_kernel
from tik_agent.spec.cases import Case
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent.spec.sequences import Chunk, Launch, build_launch, full_launch, lengths

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

SPEC = load_spec(BUNDLED_DIR / "attention")
SCALE = 0.125


@pytest.fixture(scope="module")
def kernel():
    return load_kernel(SPEC.source, "test")


def _dims(hkv=2, d=64, context=20, chunk=5, page=8):
    return {"Hq": 4, "Hkv": hkv, "D": d, "L": context, "Q": chunk, "P": page}


def _forward_inputs(case, launch):
    """The forward's inputs of a launch (the upstream gradient do follows them)."""
    return build_launch(SPEC, case, launch)[: len(SPEC.inputs)]


def _run(kernel, case, launch):
    return kernel.attention(*_forward_inputs(case, launch), scale=SCALE)


def _reference(case, launch):
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("_attention_reference", SPEC.reference)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module.reference(*_forward_inputs(case, launch), scale=SCALE)


def _rows(launch, tokens):
    index = {t: r for r, t in enumerate(launch.tokens)}
    return torch.tensor([index[t] for t in tokens])


@pytest.mark.parametrize("mix", ["decode", "prefill", "mixed"])
@pytest.mark.parametrize("hkv,d", [(4, 64), (2, 128), (1, 64)])
def test_close_to_float64(kernel, mix, hkv, d):
    chunk = {"decode": 1, "prefill": 20, "mixed": 5}[mix]
    dims = _dims(hkv=hkv, d=d, chunk=chunk)
    case = Case(3, dims, "float32", "normal", 0)
    launch = full_launch(SPEC, 3, dims)
    got, expected = _run(kernel, case, launch), _reference(case, launch)
    assert got.shape == (len(launch.tokens), 4, d) and got.dtype == torch.float32
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-5)
    if mix == "mixed":  # the mix holds a decode, a chunk and a whole prefill
        news = [new for _, new in lengths(SPEC, 3, dims)]
        assert news[0] == 1 and 1 < news[1] <= 5 and news[2] > 5


@pytest.mark.parametrize("dtype, splits, regime", [
    ("float32", (1,), "normal"), ("float32", (3, 16, 17), "normal"), ("bfloat16", (7,), "normal"),
    ("float16", (8, 9), "normal"), ("float16", (15,), "normal"),
    # NaN and inf in q and the caches: a dot shares its k and v tiles between rows, and a
    # row must not meet the non-finite entries of positions it does not see
    ("float32", (3, 16, 17), "special"), ("bfloat16", (7,), "special"),
])
def test_decode_chunks_and_forward_agree_bit_for_bit(kernel, dtype, splits, regime):
    """A token decoded alone, inside prefill chunks split anywhere, and inside a
    full forward next to another sequence: the same bits."""
    _decode_chunks_and_forward_agree(kernel, dtype, splits, regime)


def _decode_chunks_and_forward_agree(kernel, dtype, splits, regime):
    dims = _dims(hkv=2, context=20, chunk=20)
    case = Case(2, dims, dtype, regime, 1)
    length = lengths(SPEC, 2, dims)[0][0]
    forward = Launch("forward", (Chunk(0, 0, length), Chunk(1, 0, lengths(SPEC, 2, dims)[1][0])), placement=1)
    reference = _run(kernel, case, forward)
    bounds = [0, *[s for s in splits if s < length], length]
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        piece = Launch("piece", (Chunk(0, a, b),), placement=2 + n)
        assert_same_bits(reference[_rows(forward, piece.tokens)], _run(kernel, case, piece), f"chunk [{a},{b})")
    for p in (0, splits[0], length - 1):
        decode = Launch("decode", (Chunk(0, p, p + 1),), placement=7 + p)
        assert_same_bits(reference[_rows(forward, decode.tokens)], _run(kernel, case, decode), f"decode of {p}")


def test_a_dot_that_lets_unseen_infinities_in_is_caught(tmp_path):
    """Negative control: without zeroing the v tile's non-finite entries, 0 * inf
    in the tile's dot reaches the rows before an inf of their own sequence in a
    prefill, not in their decode."""
    from seedutil import copy_seed, edit

    seed = copy_seed("attention", tmp_path)
    edit(seed / "kernel.py", "        v = tl.where(_finite(v), v.to(tl.float32), 0.0).to(v.dtype)\n", "")
    leaky = load_kernel(seed / "kernel.py", "leaky")
    with pytest.raises(AssertionError, match="differ|mismatch|NaN|nan"):
        _decode_chunks_and_forward_agree(leaky, "float32", (3, 16, 17), "special")


def test_a_non_finite_query_or_gradient_poisons_only_the_slots_its_row_sees(kernel):
    """dk and dv of a cache slot sum over the queries that see it: an inf in one
    query's column d makes that column of dk NaN in the slots up to the query's
    position, and every slot past it keeps finite gradients."""
    dims = _dims(hkv=1, context=20, chunk=20)
    case = Case(1, dims, "float32", "normal", 3)
    launch = full_launch(SPEC, 1, dims)
    inputs = build_launch(SPEC, case, launch)
    n = len(SPEC.inputs)
    q, do = inputs[0].clone(), inputs[n]
    length, new = int(inputs[4][0]), q.shape[0]
    t, d = new // 3, 5
    pos = length - new + t
    q[t, 0, d] = float("inf")
    _, dk, dv = kernel.attention_backward(q, *inputs[1:n], do, scale=SCALE)
    table, page = inputs[5][0].long(), dk.shape[1]
    slots = torch.arange(length)
    dk_seq, dv_seq = (g[table[slots // page], slots % page, 0] for g in (dk, dv))  # (positions, D)
    assert torch.isnan(dk_seq[: pos + 1, d]).all()
    assert torch.isfinite(dk_seq[pos + 1:]).all() and torch.isfinite(dv_seq[pos + 1:]).all()
    assert pos + 1 < length
    # The same for an inf in the upstream gradient: dv's column d, whose tile product
    # would otherwise take the row's zeroed entry.
    do = do.clone()
    do[t, 0, d] = float("inf")
    _, dk, dv = kernel.attention_backward(inputs[0], *inputs[1:n], do, scale=SCALE)
    dk_seq, dv_seq = (g[table[slots // page], slots % page, 0] for g in (dk, dv))
    assert torch.isnan(dv_seq[: pos + 1, d]).all()
    assert torch.isfinite(dk_seq[pos + 1:]).all() and torch.isfinite(dv_seq[pos + 1:]).all()


@pytest.mark.parametrize("block_q, heads, dtype", [(1, 1, "float32"), (16, 4, "float32"), (2, 1, "bfloat16"), (16, 4, "bfloat16")])
def test_rows_per_program_keep_the_bits(kernel, block_q, heads, dtype, monkeypatch):
    """The tunables the offline agent explores: programs of more or fewer rows."""
    dims = _dims(hkv=1, d=64, context=24, chunk=5)
    case = Case(4, dims, dtype, "special", 0)
    launch = full_launch(SPEC, 4, dims)
    seed = _run(kernel, case, launch)
    monkeypatch.setattr(kernel, "BLOCK_Q", block_q)
    monkeypatch.setattr(kernel, "HEADS_PER_PROGRAM", heads)
    assert_same_bits(seed, _run(kernel, case, launch), f"BLOCK_Q={block_q}, HEADS_PER_PROGRAM={heads}")


def test_other_company_and_placement_keep_the_bits(kernel):
    dims = _dims(hkv=2, context=24, chunk=5)
    case = Case(4, dims, "float32", "normal", 0)
    full = full_launch(SPEC, 4, dims)
    out = _run(kernel, case, full)
    other = Launch("other", (full.chunks[3], full.chunks[1]), placement=5)  # another order, NaN-free garbage
    assert_same_bits(out[_rows(full, other.tokens)], _run(kernel, case, other), "sequences 3 and 1")


def test_placements_differ_but_hold_the_same_context():
    """The generator itself: two placements shuffle blocks and garbage differently,
    and gathering each sequence's slots through its table gives the same keys."""
    dims = _dims(context=20, chunk=5)
    case = Case(3, dims, "float32", "normal", 0)
    full = full_launch(SPEC, 3, dims)
    one = build_launch(SPEC, case, full)
    two = build_launch(SPEC, case, Launch("full", full.chunks, placement=1))
    assert one[3].dtype == one[4].dtype == one[5].dtype == torch.int32
    assert int(one[3][-1]) == one[0].shape[0] and torch.isnan(one[1]).any() and not torch.isnan(two[1]).any()
    assert not torch.equal(one[5][:, :2], two[5][:, :2])
    for s, length in enumerate(one[4].tolist()):
        slots = torch.arange(length)
        keys = [k[t[s, slots // 8].long(), slots % 8] for k, t in ((one[1], one[5]), (two[1], two[5]))]
        assert_same_bits(keys[0], keys[1], f"sequence {s}")
