"""The declared domain (issue 21, item 1): parsing at the edge, the default of a spec
without one, the bundled seeds' domains, and the layout classes and their views."""

import pytest
import torch

from seedutil import copy_seed, edit
from tik_agent.errors import SpecError
from tik_agent.spec.domain_text import describe
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import resolve
from tik_agent.spec.views import HUGE, HUGE_STRIDE, LAYOUTS, lay_out, layout_classes

SEEDS = ("rmsnorm", "add_rmsnorm", "logprobs", "matmul", "attention")


# --------------------------------------------------------------------------- the bundled seeds


@pytest.mark.parametrize("name", SEEDS)
def test_every_bundled_seed_declares_its_domain(name):
    spec = resolve(name)
    assert spec.domain.declared
    assert set(spec.domain.dims) == {"M", *spec.dims}
    assert spec.domain.dtypes == spec.parity.dtypes
    text = describe(spec.domain, spec.inputs, spec.layout)
    assert text[0].startswith("Certified domain (declared")
    assert any(line.startswith("  not certified:") for line in text) or name == "rmsnorm"


def test_the_bundled_domains_hold_what_real_models_call():
    rms = resolve("rmsnorm").domain
    assert {"x": "bfloat16", "weight": "float32"} in rms.combos()   # mixed precision
    assert {"x": "float32", "weight": "bfloat16"} not in rms.combos()
    assert "offset" in rms.layouts_of("weight") and "transposed" in rms.layouts_of("x")
    assert 1.1920928955078125e-07 in rms.kwargs["eps"] and 0.0078125 in rms.kwargs["eps"]  # torch's default eps
    targets = resolve("logprobs").domain.values["targets"]
    assert [s.value for s in targets.specials] == [-100] and "NaN" in targets.specials[0].result
    mm = resolve("matmul").domain
    assert "transposed" in mm.layouts_of("b") and "transposed" in mm.layouts_of("a")  # F.linear, weight grads
    assert 152064 in mm.dims["N"] and mm.dims["N"].judged_high("cpu") == 1024
    att = resolve("attention").domain
    assert att.layouts_of("k_cache") == ("contiguous",) and "row-strided" in att.layouts_of("q")
    assert att.fits({"Hq": 32, "Hkv": 8}) and not att.fits({"Hq": 28, "Hkv": 4}) and not att.fits({"D": 96})


# --------------------------------------------------------------------------- a spec without [domain]


def _without_domain(tmp_path, name="rmsnorm"):
    seed = copy_seed(name, tmp_path)
    text = (seed / "spec.toml").read_text()
    (seed / "spec.toml").write_text(text[: text.index("# What the kernel accepts")])
    return load_spec(seed)


def test_a_spec_without_a_domain_gets_what_its_grid_judges(tmp_path):
    spec = _without_domain(tmp_path)
    d = spec.domain
    assert not d.declared
    assert (d.dims["N"].low, d.dims["N"].high) == (512, 4096)   # the grid's and the workload's sizes
    assert d.dims["M"].high == 4 * 8192 + 1                      # what the above-grid cases reach
    assert d.combos() == [{"x": t, "weight": t} for t in spec.parity.dtypes]
    assert d.layouts_of("x") == ("contiguous", "row-strided") and d.layouts_of("weight") == ("contiguous",)
    assert (d.kwargs["eps"].low, d.kwargs["eps"].high) == (1e-6, 1e-6)
    assert "declares none" in describe(d, spec.inputs)[0]


# --------------------------------------------------------------------------- errors at the edge


@pytest.mark.parametrize("old, new, expected", [
    ('x = ["contiguous", "row-strided", "transposed"', 'x = ["contiguous", "diagonal", "transposed"',
     "domain.layouts.x[1]: unknown layout"),
    ('weight = ["contiguous", "column-strided", "offset"]', 'weight = ["contiguous", "row-strided"]',
     "domain.layouts.weight[1]: row-strided needs at least two dimensions"),
    ('weight = ["contiguous", "column-strided", "offset"]', 'weight = ["offset"]',
     'domain.layouts.weight: expected a list'),
    ("N = { min = 1, max = 32768, cpu = 8192 }", "N = { min = 1, max = 2000 }", "domain.dims.N: the grid or a workload cell uses N = 2101"),
    ("N = { min = 1, max = 32768, cpu = 8192 }", "N = { min = 0, max = 32768 }", "domain.dims.N.min: expected an integer >= 1"),
    ("N = { min = 1, max = 32768, cpu = 8192 }", "N = { min = 9, max = 3 }", "domain.dims.N: min is above max"),
    ("N = { min = 1, max = 32768, cpu = 8192 }", "", "domain.dims.N: missing"),
    ("eps = { min = 1e-12, max = 1e-2 }", "eps = { min = 1e-3, max = 1e-2 }", "domain.kwargs.eps: the spec's own value 1e-06"),
    ("eps = { min = 1e-12, max = 1e-2 }", "eps = { low = 1e-3 }", "domain.kwargs.eps.low: unknown field"),
    ("mixed = [{ weight = \"float32\" }]", "mixed = [{ weight = \"float64\" }]", "domain.mixed[0].weight: expected one of"),
    ("mixed = [{ weight = \"float32\" }]", "mixed = [{ dy = \"float32\" }]", "domain.mixed[0].dy: not an input"),
    ("[domain]\n", "[domain]\ndtypes = [\"float64\"]\n", "domain.dtypes[0]: not a parity dtype"),
    ("[domain]\n", "[domain]\nshapes = 3\n", "domain.shapes: unknown field"),
])
def test_a_malformed_domain_is_one_line_naming_file_field_and_value(tmp_path, old, new, expected):
    seed = copy_seed("rmsnorm", tmp_path)
    edit(seed / "spec.toml", old, new)
    with pytest.raises(SpecError) as info:
        load_spec(seed)
    message = str(info.value)
    assert str(seed / "spec.toml") in message and expected in message and "\n" not in message


def test_integer_values_and_ratios_are_checked_against_the_spec(tmp_path):
    seed = copy_seed("logprobs", tmp_path)
    edit(seed / "spec.toml", "special = [{ value = -100,", "special = [{ value = 5,")
    with pytest.raises(SpecError, match=r"domain.values.targets.special\[0\].value: a special value lies below min"):
        load_spec(seed)
    seed = copy_seed("attention", tmp_path / "a")
    edit(seed / "spec.toml", "values = [1, 2, 4, 8, 16, 32, 64] }", "values = [4] }")
    with pytest.raises(SpecError, match="domain.ratios: the grid or a workload cell uses"):
        load_spec(seed)


# --------------------------------------------------------------------------- layout classes and views


@pytest.mark.parametrize("shape", [(5, 7), (3, 4, 6), (7,)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layout_view_holds_the_same_values_in_its_class(shape, layout):
    t = torch.randn(shape)
    view = lay_out(t, layout)
    assert torch.equal(view, t)
    expected = layout if layout != "offset" else "contiguous"
    if len(shape) < 2 and layout in ("row-strided", "transposed"):
        expected = "contiguous"  # classes of two dimensions leave a 1-D tensor alone
    assert expected in layout_classes(view)
    assert ("offset" in layout_classes(view)) == (layout == "offset")
    if layout == "offset":
        assert view.storage_offset() % 2 == 1  # an odd element: not 16-byte aligned


def test_layout_classes_of_the_views_models_pass():
    x = torch.randn(8, 12)
    assert layout_classes(x) == {"contiguous"}
    assert layout_classes(x[:, :6]) == {"row-strided"}            # a slice of a fused projection
    assert layout_classes(torch.randn(12, 8).t()) == {"transposed"}   # F.linear's w.t()
    assert layout_classes(x[:, ::2]) == {"column-strided"}
    assert layout_classes(x[1:]) == {"contiguous", "offset"}
    assert layout_classes(torch.randn(1, 12).expand(8, 12)) == {"broadcast"}
    assert layout_classes(x[:1, :6]) == {"contiguous"}             # one row: torch counts it contiguous


@pytest.mark.parametrize("kind", HUGE)
def test_a_huge_view_puts_its_third_row_past_two_to_the_31_without_touching_it(kind):
    t = torch.randn(3, 3, dtype=torch.bfloat16)
    view = lay_out(t, kind)
    assert torch.equal(view, t)
    stride = max(view.stride())
    assert stride == HUGE_STRIDE < 2**31 <= 2 * stride   # a 32-bit stride whose third row lies past 2**31
