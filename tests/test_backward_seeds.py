"""Backward entries of the bundled seeds: gradients close to float64 autograd,
per-row gradients batch invariant, batch reductions with the seed's bits at
every batch size; and negative controls that each check can fail."""

import pytest
import torch

from bitassert import assert_same_bits
from tik_agent.errors import SpecError
from tik_agent.judge.seedcheck import check_seed
from tik_agent.sandbox.harness import load_seed_entry
from tik_agent.spec.cases import Case, make_inputs
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent.spec.schema import load_spec

from seedutil import copy_seed, edit

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

SMALL = {"rmsnorm": {"N": 300}, "add_rmsnorm": {"N": 300}, "logprobs": {"V": 700}, "matmul": {"K": 40, "N": 24}}


def _cases(name: str, dtypes=("float32", "bfloat16")) -> list[Case]:
    dims = SMALL[name]
    out = [Case(m, dims, dtype, regime, 0) for m, dtype, regime in
           ((1, dtypes[0], "normal"), (5, dtypes[-1], "normal"), (3, dtypes[0], "zero"), (4, dtypes[0], "special"))]
    out.append(Case(6, dims, dtypes[0], "normal", 1, invariance=True, subbatches=1))
    return out


@pytest.mark.parametrize("name", sorted(SMALL))
def test_seed_backward_passes_its_own_checks(name):
    spec = load_spec(BUNDLED_DIR / name)
    assert spec.backward is not None
    report = check_seed(spec, "cpu", _cases(name), stop_at_first=False)
    assert report.passed, report.first_failure
    counts = report.counts_by_check()
    assert counts["invariance"] == 1 and counts["reference"] >= 3


@pytest.mark.parametrize("name", sorted(SMALL))
def test_gradients_match_torch_autograd_in_fp32(name):
    spec = load_spec(BUNDLED_DIR / name)
    step = load_seed_entry(spec)
    inputs = make_inputs(spec, Case(7, SMALL[name], "float32", "normal", 3))
    out = step(*inputs, **spec.kwargs)
    n = len(spec.inputs)
    leaves = [t.clone().requires_grad_() if i.name in spec.backward.wrt else t for i, t in zip(spec.inputs, inputs)]
    if name == "rmsnorm":
        y = (torch.nn.functional.rms_norm(leaves[0], (leaves[0].shape[1],), leaves[1], eps=spec.kwargs["eps"]),)
    elif name == "add_rmsnorm":
        s = leaves[0] + leaves[1]
        y = (torch.nn.functional.rms_norm(s, (s.shape[1],), leaves[2], eps=spec.kwargs["eps"]), s)
    elif name == "logprobs":
        y = (torch.log_softmax(leaves[0], -1).gather(1, leaves[1][:, None])[:, 0],)
    else:
        y = (leaves[0] @ leaves[1],)
    wrt = [t for i, t in zip(spec.inputs, leaves) if i.name in spec.backward.wrt]
    grads = torch.autograd.grad(y, wrt, inputs[n:])
    for got, want in zip(out[len(spec.outputs):], grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _weight_gradient_across_batches(spec, m_small, m_large):
    """dweight of the first m_small rows, run alone and as the rows of a larger batch padded with zeros."""
    step = load_seed_entry(spec)
    x, w, dy = make_inputs(spec, Case(m_large, SMALL["rmsnorm"], "float32", "normal", 0))
    alone = step(x[:m_small], w, dy[:m_small], **spec.kwargs)[2]
    padded_dy = torch.cat([dy[:m_small], torch.zeros_like(dy[m_small:])])
    return alone, step(x, w, padded_dy, **spec.kwargs)[2]


def test_rmsnorm_dweight_order_is_fixed_by_row_index_not_batch():
    """Zero rows appended to the batch add exact zeros: with an order that depends
    only on the row index, dweight keeps its bits."""
    alone, padded = _weight_gradient_across_batches(load_spec(BUNDLED_DIR / "rmsnorm"), 20, 37)
    assert_same_bits(alone, padded, "dweight of 20 rows vs the same rows padded to 37")


# The dweight row chunk made a function of the batch (a fixed number of splits).
BATCH_CHUNK_EDIT = ("row_chunk = ROW_CHUNK", "row_chunk = max(2, triton.next_power_of_2(triton.cdiv(M, 2)))")


@pytest.mark.parametrize("name", ["rmsnorm", "add_rmsnorm"])
def test_batch_dependent_reduction_order_is_caught(tmp_path, name):
    """Negative control: a dweight whose row chunk follows the batch (a fixed number
    of splits instead of a fixed split size) differs from the seed's bits."""
    seed = copy_seed(name, tmp_path)
    edit(seed / "kernel.py", *BATCH_CHUNK_EDIT)
    bad, good = load_spec(seed), load_spec(BUNDLED_DIR / name)
    case = Case(33, SMALL[name], "float32", "normal", 0)
    inputs = make_inputs(good, case)
    expected = load_seed_entry(good)(*inputs, **good.kwargs)
    got = load_seed_entry(bad)(*inputs, **bad.kwargs)
    n = len(good.outputs)
    for k in range(n, len(expected) - 1):
        assert_same_bits(expected[k], got[k], f"{good.checked_outputs[k].name} is per row and unaffected")
    assert n < len(expected) - 1
    assert not torch.equal(expected[-1].view(torch.int32), got[-1].view(torch.int32)), "dweight should differ"


def test_add_rmsnorm_dresidual_that_follows_the_batch_is_caught(tmp_path):
    """Negative control for a per-row gradient: a dresidual that depends on M fails
    check-seed's invariance (rows alone against the full batch)."""
    seed = copy_seed("add_rmsnorm", tmp_path)
    edit(seed / "kernel.py", "        tl.store(dr_ptr + r64 * stride_drm + c[None, :], g, mask=mask)\n",
         "        tl.store(dr_ptr + r64 * stride_drm + c[None, :], (g.to(tl.float32) * (1.0 + 0.01 * (M > 1)))"
         ".to(dr_ptr.dtype.element_ty), mask=mask)\n")
    report = check_seed(load_spec(seed), "cpu", [Case(6, SMALL["add_rmsnorm"], "float32", "normal", 1,
                                                      invariance=True, subbatches=1)], stop_at_first=False)
    assert not report.passed and "dresidual" in report.first_failure.message


@pytest.mark.parametrize("table, problem", [
    ('grads = ["dy"]', 'grads = ["dy", "dz"]'),
    ('wrt = ["x", "weight"]', 'wrt = ["x", "bias"]'),
    ('entry = "rms_norm_backward"', 'entry = "rms_norm_bwd"'),
    ('wrt = ["x", "weight"]', 'wrt = ["x", "weight"]\nfoo = 1'),
])
def test_backward_table_is_validated(tmp_path, table, problem):
    seed = copy_seed("rmsnorm", tmp_path)
    edit(seed / "spec.toml", table, problem)
    with pytest.raises(SpecError, match="backward"):
        load_spec(seed)


def test_training_cell_needs_a_backward_entry(tmp_path):
    seed = copy_seed("rmsnorm", tmp_path)
    text = (seed / "spec.toml").read_text()
    start = text.index("[backward]")
    end = text.index("[tunables]")
    (seed / "spec.toml").write_text(text[:start] + text[end:])
    with pytest.raises(SpecError, match=r"workload\[\d\]\.backward"):
        load_spec(seed)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("regime", ["normal", "special"])
@pytest.mark.parametrize("name, value", [("BWD_ROWS_PER_PROGRAM", 1), ("BWD_ROWS_PER_PROGRAM", 4),
                                         ("DW_BLOCK_N", 256), ("DW_BLOCK_N", 512),
                                         ("DW_COMBINE_N", 128), ("DW_COMBINE_N", 32)])
def test_rmsnorm_backward_work_distribution_keeps_the_bits(dtype, regime, name, value, monkeypatch):
    """Rows per dx program and columns per dweight program only distribute the work: the
    seed's values on the CPU (16, 2048, 2048) are the interpreter's cheapest, any other gives
    the same bits, among them the GPU's (1 row, 128 columns a combine program)."""
    from tik_agent.sandbox.harness import load_kernel

    spec = load_spec(BUNDLED_DIR / "rmsnorm")
    kernel = load_kernel(spec.source, "test")
    x, w, dy = make_inputs(spec, Case(37, {"N": 2101}, dtype, regime, 0))
    seed = kernel.rms_norm_backward(x, w, dy)
    monkeypatch.setattr(kernel, name, value)
    for grad, a, b in zip(("dx", "dweight"), seed, kernel.rms_norm_backward(x, w, dy)):
        assert_same_bits(a, b, f"{grad} with {name}={value}")


def test_rows_alone_keep_one_batch_reduced_gradient_not_one_per_row():
    """The matmul step's db (K x N) is a reduction over the batch: a large invariance case run
    row by row must not hold one db per row (on a GPU, 4096 rows of 32 MiB each).  Counted with
    weak references at each row's call: the rows' outputs and da stay (they are joined), the rows'
    dbs are gone but row 0's and the one just returned."""
    import weakref

    from tik_agent.sandbox.harness import Runner

    spec = load_spec(BUNDLED_DIR / "matmul")
    entry = load_seed_entry(spec)
    names = [o.name for o in spec.checked_outputs]
    alive: dict[str, list] = {name: [] for name in names}  # per output: the most alive at one call
    refs: dict[str, list] = {name: [] for name in names}

    def counting(*args, **kwargs):
        if args[0].shape[0] == 1:  # a row alone
            for name in names:
                alive[name].append(sum(r() is not None for r in refs[name]))
        out = entry(*args, **kwargs)
        if args[0].shape[0] == 1:
            for name, t in zip(names, out):
                refs[name].append(weakref.ref(t))
        return out

    case = Case(8, {"K": 24, "N": 16}, "float32", "normal", 0, invariance=True, subbatches=1)
    outputs = Runner(counting, spec, "cpu").run_case(case)
    assert names == ["output", "da", "db"] and len(refs["db"]) >= 8
    assert max(alive["db"]) <= 2, alive["db"]
    # Control: the per-row outputs that are joined are all held, so the count sees what is kept.
    assert max(alive["output"]) >= 7 and max(alive["da"]) >= 7, (alive["output"], alive["da"])
    assert [t.shape[0] for t in outputs.rows] == [8, 8, 24]  # output and da joined, row 0's db
