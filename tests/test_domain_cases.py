"""The cases that judge a declared domain's axes (issue 21, item 2): one per layout class,
huge views, mixed dtypes, edges, keywords, the spread regime and special values, and one
drawn per evaluation near powers of two."""

import math
import random

import pytest
import torch

from seedutil import copy_seed
from tik_agent.judge.plan import per_evaluation_cases
from tik_agent.spec.cases import Case, case_kwargs, make_inputs
from tik_agent.spec.domain_cases import domain_cases, drawn_domain_case
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import resolve
from tik_agent.spec.views import gradient_layouts, layout_classes


def test_a_spec_without_a_domain_adds_no_cases(tmp_path):
    seed = copy_seed("rmsnorm", tmp_path)
    text = (seed / "spec.toml").read_text()
    (seed / "spec.toml").write_text(text[: text.index("# What the kernel accepts")])
    assert domain_cases(load_spec(seed), "cpu") == []   # its default is what its grid judges already

def test_rmsnorm_domain_cases_cover_every_axis():
    spec = resolve("rmsnorm")
    cases = domain_cases(spec, "cpu")
    layouts = {c.layout for c in cases}
    assert {"row-strided", "transposed", "column-strided", "offset", "huge-rows:x", "huge-columns:x"} <= layouts
    assert {tuple(c.dtypes.items()) for c in cases if c.dtypes} == {(("weight", "float32"),)}
    assert {c.dtype for c in cases if c.dtypes} == {"bfloat16", "float16"}
    assert {c.dims["N"] for c in cases if c.layout == "" and not c.dtypes and not c.kwargs and c.regime == "normal"} == {1, 8192}   # the edges (the CPU's largest)
    assert {c.kwargs["eps"] for c in cases if c.kwargs} == {1e-12, 1e-2}
    assert any(c.regime == "spread" and c.m == 7 for c in cases)
    assert all(c.once and not c.invariance for c in cases)   # parity cases, each full batch run once
    assert all(c.origin == "domain" for c in cases)
    fixed = {c.id for c in evaluation_cases(spec, "cpu")}
    assert {c.id for c in cases} <= fixed


def test_edges_beyond_what_the_cpu_affords_are_left_to_a_gpu_evaluation():
    spec = resolve("matmul")
    cpu = {(c.dims["K"], c.dims["N"]) for c in domain_cases(spec, "cpu") if c.layout == "" and not c.dtypes and not c.kwargs and c.regime == "normal"}
    cuda = {(c.dims["K"], c.dims["N"]) for c in domain_cases(spec, "cuda") if c.layout == "" and not c.dtypes and not c.kwargs and c.regime == "normal"}
    assert cpu == {(1, 1), (1024, 1), (1, 1024)}
    assert cuda == {(1, 1), (65536, 1), (1, 262144)}


def test_logprobs_draws_the_ignore_index_in_a_quarter_of_its_rows():
    spec = resolve("logprobs")
    (case,) = [c for c in domain_cases(spec, "cpu") if c.special]
    assert case.m == 7 and case.once
    targets = make_inputs(spec, case)[1]
    special = targets == -100
    assert 1 <= int(special.sum()) < case.m
    assert bool(((targets[~special] >= 0) & (targets[~special] < case.dims["V"])).all())


def test_the_inputs_of_a_case_take_its_layout_dtypes_and_keywords():
    spec = resolve("rmsnorm")
    base = Case(3, {"N": 64}, "bfloat16", "normal", 0)
    x, weight, dy = make_inputs(spec, Case(**{**base.to_dict(), "layout": "transposed", "dtypes": {"weight": "float32"},
                                              "kwargs": {"eps": 1e-3}, "once": True}))
    assert layout_classes(x) == {"transposed"} and layout_classes(dy) == {"transposed"}   # gradients too
    assert layout_classes(weight) == {"contiguous"}  # the weight does not declare transposed
    assert (x.dtype, weight.dtype) == (torch.bfloat16, torch.float32)
    assert case_kwargs(spec, Case(**{**base.to_dict(), "kwargs": {"eps": 1e-3}})) == {"eps": 1e-3}
    plain = make_inputs(spec, base)
    assert [t.dtype for t in plain[:2]] == [torch.bfloat16, torch.bfloat16]


def test_the_spread_regime_reaches_the_row_scales_neither_normal_nor_large_draws():
    spec = resolve("rmsnorm")
    x = make_inputs(spec, Case(64, {"N": 256}, "float32", "spread", 0))[0]
    rms = x.pow(2).mean(dim=1).sqrt()
    assert float(rms.min()) < 0.1 and float(rms.max()) > 1000
    assert bool(((rms > 8) & (rms < 1000)).any())


@pytest.mark.parametrize("regime", ["normal", "special", "spread"])
def test_inputs_drawn_on_the_device_are_the_cpus_own_bits_on_the_cpu(regime):
    """Timed inputs are drawn where they run (``on_device``); on the CPU that is the same stream."""
    spec = resolve("logprobs")
    case = Case(9, {"V": 300}, "bfloat16", regime, 3, special=True)
    moved, drawn = make_inputs(spec, case), make_inputs(spec, case, "cpu", on_device=True)
    assert [t.dtype for t in drawn] == [t.dtype for t in moved]
    assert all(torch.equal(a.view(torch.int16) if a.is_floating_point() else a,
                           b.view(torch.int16) if b.is_floating_point() else b) for a, b in zip(moved, drawn))
    assert not torch.equal(moved[0], make_inputs(spec, Case(9, {"V": 300}, "bfloat16", regime, 4, special=True))[0])


def test_timed_calls_and_graph_slots_draw_their_inputs_on_the_device(monkeypatch):
    """A 2048 x 152064 logits input takes seconds on one CPU thread: per-call inputs are the device's draw."""
    from tik_agent.sandbox import graphs, timed

    asked = []

    def spy(spec, case, device="cpu", *, on_device=False):
        asked.append((device, on_device))
        return make_inputs(spec, case, "cpu")

    monkeypatch.setattr(timed, "make_inputs", spy)
    monkeypatch.setattr(graphs, "make_inputs", spy)
    spec = resolve("rmsnorm")
    cell = min(spec.workload_for("cpu"), key=lambda c: c.m)
    timed.cell_call(spec, cell, lambda *a, **k: None, 5, "cuda")
    graphs._slots(spec, cell, "cuda", 5, 2, 2)
    assert asked == [("cuda", True), ("cuda", True)]


@pytest.mark.cuda
def test_a_device_draw_is_on_the_device_and_repeats_bit_for_bit():
    spec = resolve("logprobs")
    case = Case(64, {"V": 4096}, "bfloat16", "normal", 1)
    first, again = (make_inputs(spec, case, "cuda", on_device=True) for _ in range(2))
    assert all(t.is_cuda for t in first)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_a_case_id_changes_only_with_the_domain_axes_it_sets():
    plain = Case(3, {"N": 64}, "float32", "normal", 0)
    assert plain.id == "par:M=3,N=64:float32:normal:s0"   # ids of the grid before domains are kept
    marked = Case(**{**plain.to_dict(), "layout": "offset", "kwargs": {"eps": 0.01}, "once": True})
    assert marked.id == "par:M=3,N=64:float32:normal:s0:offset:eps=0.01"
    assert Case.from_dict(marked.to_dict()) == marked and Case.from_dict(marked.to_dict()).once


@pytest.mark.parametrize("name", ["rmsnorm", "logprobs", "matmul", "attention"])
def test_a_drawn_case_lies_in_the_domain_near_powers_of_two_with_drawn_keywords(name):
    spec = resolve(name)
    seen_kwargs = set()
    for seed in range(20):
        case = drawn_domain_case(spec, "cpu", random.Random(seed))
        assert case.origin == "drawn" and spec.domain.fits({"M": case.m, **case.dims})
        for dim, value in case.dims.items():
            span = spec.domain.dims[dim]
            if not span.values and dim not in ("Hq", "Hkv"):
                k = round(math.log2(max(value, 1)))
                assert min(abs(value - 2**k), abs(value - 2**(k + 1))) <= 1 or value == span.low, (dim, value)
                assert value <= span.judged_high("cpu")
        seen_kwargs |= {repr(sorted(case.kwargs.items()))}
    if spec.kwargs:
        assert len(seen_kwargs) > 10   # a keyword value of its own in (nearly) every evaluation


def test_an_evaluation_draws_its_domain_case_from_its_secret():
    spec = resolve("rmsnorm")
    first = per_evaluation_cases(spec, "cpu", [], random.Random(1))
    again = per_evaluation_cases(spec, "cpu", [], random.Random(1))
    other = per_evaluation_cases(spec, "cpu", [], random.Random(2))
    assert [c.id for c in first] == [c.id for c in again] != [c.id for c in other]
    assert sum(1 for c in first if c.kwargs) == 1


@pytest.mark.parametrize("name", ["rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention"])
def test_the_gradients_a_layout_case_generates_are_the_ones_the_wheel_takes(name):
    """The wheel's backward op takes upstream gradients in the layouts of
    ``gradient_layouts`` only: each one the grid generates must be among them (else the
    wheel refuses what was judged), and a broadcast one never is (autograd's ``.sum()``)."""
    spec = resolve(name)
    assert spec.backward is not None
    declared = {c for i in spec.inputs for c in spec.domain.layouts_of(i.name)}
    grads = len(spec.backward.grads)
    seen = set()
    for case in (c for c in domain_cases(spec, "cpu") if c.layout and ":" not in c.layout):
        for g in make_inputs(spec, case)[-grads:]:
            classes = layout_classes(g)
            assert classes <= gradient_layouts(declared, g), (case.id, classes)
            seen |= classes
            spread = g.expand(2, *g.shape)   # what a loss's .sum() hands over: refused, or copied
            assert not layout_classes(spread) <= gradient_layouts(declared, spread)
    assert seen - {"contiguous"}   # the gradients did take layouts other than contiguous
