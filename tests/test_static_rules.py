"""Static rules: legitimate kernels pass, every file in the adversarial corpus is caught."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tik_agent.sandbox import static
from tik_agent.sandbox.static import RULES, Violation, check_source, policy

CORPUS = Path(__file__).parent / "adversarial" / "static"
LEGIT = sorted((CORPUS / "legit").glob("*.py"))
EXPLOITS = sorted(CORPUS.glob("*.py"))

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
KERNEL = """

@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


def rules_of(source: str) -> set[str]:
    return {v.rule for v in check_source(source)}


def candidate(launcher_body: str, module: str = "") -> str:
    """A minimal candidate whose launcher runs ``launcher_body`` before launching."""
    body = textwrap.indent(textwrap.dedent(launcher_body).strip("\n"), "    ")
    return f"{HEADER}{module}{KERNEL}\n\ndef launch(x):\n{body}\n    _k[(1,)](x, x.numel(), BLOCK=128)\n    return x\n"


def test_corpus_is_present() -> None:
    assert len(LEGIT) == 17
    assert len(EXPLOITS) >= 25


@pytest.mark.parametrize("path", LEGIT, ids=lambda p: p.stem)
def test_legitimate_kernels_pass(path: Path) -> None:
    assert check_source(path.read_text(), str(path)) == []


@pytest.mark.parametrize("path", EXPLOITS, ids=lambda p: p.stem)
def test_exploit_is_rejected_by_expected_rule(path: Path) -> None:
    source = path.read_text()
    match = re.match(r"# expect: (\S+)", source)
    assert match, f"{path.name} lacks an '# expect: <rule>' header"
    expected = match.group(1)
    assert expected in RULES, f"{path.name} expects unknown rule {expected}"
    violations = check_source(source, str(path))
    assert expected in {v.rule for v in violations}, violations
    assert all(v.line >= 1 for v in violations)


def test_syntax_error_is_a_single_violation_with_its_line() -> None:
    violations = check_source("import torch\n\ndef f(:\n    pass\n", "bad.py")
    assert violations == [Violation("syntax", 3, violations[0].message)]
    assert "bad.py" in violations[0].message


def test_null_byte_is_a_syntax_violation() -> None:
    assert [v.rule for v in check_source("x = 1\0\n")] == ["syntax"]


def test_minimal_candidate_passes() -> None:
    assert check_source(candidate("n = x.numel()")) == []


@pytest.mark.parametrize(
    "launcher",
    [
        "x = x.contiguous().view(-1)",
        "M, N = x.shape[0], x.size(-1)",
        "s = x.stride(0) + x.dim() + x.element_size()",
        "ok = x.is_contiguous() and x.dtype == torch.float32 and x.device.type == 'cpu'",
        "big = torch.finfo(x.dtype).max > 0 and torch.iinfo(torch.int32).max > 0",
        "y = torch.empty((4, 4), dtype=torch.bfloat16, device=x.device)",
        "y = torch.empty_strided((4,), (1,), dtype=x.dtype)",
        "z = torch.zeros_like(x)",
        "n = triton.next_power_of_2(max(1, min(x.numel(), 4096)))",
        "grid = lambda meta: (triton.cdiv(x.numel(), meta['BLOCK']),)",
        "assert isinstance(x, torch.Tensor), 'need a tensor'",
        "if x.dim() != 1:\n    raise ValueError(f'bad shape {tuple(x.shape)}')",
        "with torch.cuda.device(x.device):\n    pass",
        "shape = tuple(int(d) for d in x.shape)",
        "t = x.t().reshape(-1).unsqueeze(0).permute(1, 0)",
        "for i in range(len(x.shape)):\n    pass",
    ],
)
def test_legitimate_launcher_idioms_pass(launcher: str) -> None:
    assert check_source(candidate(launcher)) == []


@pytest.mark.parametrize(
    "module",
    [
        "BLOCK = 1024\n",
        "BLOCK: tl.constexpr = tl.constexpr(256)\n",
        "BLOCK = 64\nHALF = BLOCK // 2\n",
        "SHAPES = (1, (2, 3), 'x', None, True, -1.5)\n",
        "ACC_DTYPE = torch.float32\nOUT = tl.float16\n",
        "LOG2E = math.log2(math.e)\nINF = float('inf')\n",
    ],
)
def test_module_constants_pass(module: str) -> None:
    assert check_source(candidate("pass", module="import math\n" + module)) == []


def test_triton_import_forms_pass() -> None:
    source = (
        "from __future__ import annotations\n"
        "import torch\n"
        "from triton import jit, cdiv\n"
        "from triton import language as tl\n"
        "from triton.language.extra import libdevice\n"
        "from typing import Optional\n\n"
        "@jit\n"
        "def _k(x_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, libdevice.rsqrt(tl.load(x_ptr + offs)))\n\n"
        "def launch(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:\n"
        "    _k[(cdiv(x.numel(), 128),)](x, BLOCK=128)\n"
        "    return x\n"
    )
    assert check_source(source) == []


def test_kernel_dsl_methods_are_not_host_compute() -> None:
    source = HEADER + (
        "\n@triton.jit\n"
        "def _k(x_ptr, BLOCK: tl.constexpr):\n"
        "    x = tl.load(x_ptr + tl.arange(0, BLOCK)).to(tl.float32)\n"
        "    tl.store(x_ptr + tl.arange(0, BLOCK), x - tl.max(x, axis=0) + x.sum() * 0)\n"
    )
    assert check_source(source) == []


@pytest.mark.parametrize(
    ("launcher", "rule"),
    [
        ("print(x.shape)", "print"),
        ("y = x.float()", "host-compute"),
        ("x.zero_()", "host-compute"),
        ("x @= x", "host-compute"),
        ("y = x.clone()", "host-compute"),
        ("v = vars(x)", "forbidden-builtin"),
        ("g = globals()", "forbidden-builtin"),
        ("x.grad = None", "attribute-assignment"),
        ("del x[0]", "host-store"),
        ("c = x.__class__", "dunder"),
        ("s = 'x'.__len__", "dunder"),
        ("b = torch.backends.cudnn.enabled", "torch-api"),
        ("torch.set_default_dtype(torch.float64)", "torch-api"),
        ("f = torch.compile", "torch-api"),
        ("lib = torch.library", "torch-api"),
        ("e = torch.cuda.Event(enable_timing=True)", "torch-api"),
        ("t = torch", "torch-api"),
        ("c = torch._C", "torch-api"),
        ("ms = triton.testing.do_bench(lambda: None)", "triton-api"),
        ("c = triton.compiler", "triton-api"),
        ("def inner():\n    nonlocal x", "global"),
        ("s = '{x.__dict__}'", "dunder"),
        ("s = '{0[secret]}'.format({})", "introspection"),
        ("tb = None\nf = tb.tb_frame", "introspection"),
    ],
)
def test_launcher_exploits_are_rejected(launcher: str, rule: str) -> None:
    assert rule in rules_of(candidate(launcher))


@pytest.mark.parametrize(
    ("module", "rule"),
    [
        ("_SEEN = []\n", "module-state"),
        ("_SEEN = set()\n", "module-state"),
        ("_TABLE = {i: i for i in range(4)}\n", "module-state"),
        ("torch = None\n", "module-state"),
        ("X, Y = 1, []\n", "module-state"),
        ("for _ in range(2):\n    pass\n", "module-level"),
        ("try:\n    import os\nexcept ImportError:\n    pass\n", "module-level"),
        ("torch.empty(1)\n", "module-level"),
        ("BLOCK = 1\nBLOCK += 1\n", "module-level"),
        ("from torch import *\n", "import"),
        ("import torch.nn\n", "import"),
        ("from triton import testing\n", "import"),
        ("from triton import autotune\n", "autotune"),
        ("import importlib\n", "import"),
        ("import builtins\n", "import"),
        ("import gc\n", "import"),
        ("import pickle\n", "import"),
    ],
)
def test_module_level_exploits_are_rejected(module: str, rule: str) -> None:
    assert rule in rules_of(candidate("pass", module=module))


def test_print_inside_kernel_is_rejected() -> None:
    source = HEADER + (
        "\n@triton.jit\n"
        "def _k(x_ptr, BLOCK: tl.constexpr):\n"
        "    tl.static_print(BLOCK)\n"
        "    print('hi')\n"
    )
    assert [v.rule for v in check_source(source)] == ["print", "print"]


def test_decorators_other_than_jit_and_heuristics_are_rejected() -> None:
    source = candidate("pass") + "\n\n@launch\ndef other(x):\n    return x\n"
    assert rules_of(source) == {"decorator"}


def test_violation_reports_the_offending_line() -> None:
    source = candidate("a = 1\nb = x.sum()")
    [violation] = check_source(source)
    assert source.splitlines()[violation.line - 1].strip() == "b = x.sum()"
    assert violation.rule == "host-compute"


def test_every_rule_has_a_summary_and_a_rationale_comment() -> None:
    registered = []
    for module in sorted(Path(static.__file__).parent.glob("*.py")):
        lines = module.read_text().splitlines()
        registered += [(lines, i) for i, line in enumerate(lines) if line.startswith("@rule(")]
    assert len(registered) == len(RULES)
    for lines, index in registered:
        comment: list[str] = []
        cursor = index - 1
        while cursor >= 0 and lines[cursor].startswith("#"):
            comment.insert(0, lines[cursor])
            cursor -= 1
        assert comment and comment[0].startswith("# Rationale:"), lines[index]
    assert all(rule.summary for rule in RULES.values())


@pytest.mark.parametrize(
    ("launcher", "rule"),
    [
        ("o = tl.core.builtins.open", "triton-api"),
        ("k = tl.core.knobs", "triton-api"),
        ("c = tl.random.tl", "triton-api"),
        ("e = triton.language.extra.pkgutil", "triton-api"),
        ("m = typing.sys.modules", "stdlib-api"),
        ("s = enum.sys", "stdlib-api"),
        ("f = typing.get_type_hints", "stdlib-api"),
        ("m = math.sqrt.x", "stdlib-api"),
        ("c = _k.cache", "kernel-attribute"),
        ("f = _k.fn", "kernel-attribute"),
    ],
)
def test_module_internals_are_rejected(launcher: str, rule: str) -> None:
    module = "import math\nimport typing\nimport enum\n"
    assert rule in rules_of(candidate(launcher, module=module))


def test_import_of_dsl_internals_is_rejected() -> None:
    assert "import" in rules_of(candidate("pass", module="import triton.language.core as core\n"))
    assert "import" in rules_of(candidate("pass", module="from triton.language.core import builtins\n"))


def test_dsl_internals_of_the_installed_triton_are_rejected() -> None:
    """Walk triton.language as installed: every public name that is not DSL must fail.

    A kernel is run first: under the interpreter that injects the interpreter's
    globals into the DSL modules, which is what a candidate in the worker sees.
    """
    import importlib
    import types

    import torch

    from tik_agent.sandbox.harness import load_seed_entry
    from tik_agent.spec.seeds import resolve

    load_seed_entry(resolve("rmsnorm"))(torch.randn(2, 8), torch.randn(8), torch.randn(2, 8))  # x, weight, dy

    safe_types = {"JITFunction", "InterpretedFunction", "ConstexprFunction", "int", "bool", "EnumType"}
    safe_types |= {"_Feature", "TypeVar", "_SpecialGenericAlias"}
    namespaces = ["triton.language"]
    checked = 0
    leaks: list[str] = []
    while namespaces:
        module = importlib.import_module(namespaces.pop())
        for name in (n for n in dir(module) if not n.startswith("_")):
            value = getattr(module, name)
            path = f"{module.__name__}.{name}"
            if isinstance(value, types.ModuleType):
                if name in policy.DSL_NAMESPACES and value.__name__ == path:
                    namespaces.append(path)
                    continue
                dsl = value.__name__.split(".")[-1] in policy.DSL_NAMESPACES | {"language"}
                safe = dsl and value.__name__.startswith("triton.language")
            else:
                origin = getattr(value, "__module__", None) or type(value).__module__
                safe = origin.startswith("triton.language") or type(value).__name__ in safe_types
                safe = safe or name in {"jit", "constexpr_function"}
            checked += 1
            if not safe and policy.api_allowed(path):
                leaks.append(f"{path} ({type(value).__name__})")
    assert checked > 100
    assert leaks == []


def test_absurd_nesting_is_rejected_not_crashing() -> None:
    assert [v.rule for v in check_source("x = " + "-" * 100_000 + "1")] == ["syntax"]


SEEDS = sorted((Path(__file__).resolve().parents[1] / "seed_kernels").glob("*/kernel.py"))


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.parent.name)
def test_bundled_seed_kernels_pass(path: Path) -> None:
    assert check_source(path.read_text(), str(path)) == []


# --------------------------------------------------------------- name resolution and type inference

HEURISTIC_KERNEL = """

@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


def typed_candidate(launcher_body: str, module: str = "", params: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(launcher_body).strip("\n"), "    ")
    return (f"{HEADER}{HEURISTIC_KERNEL}{module}\n\ndef launch(x{params}):\n{body}\n"
            "    _k[(1,)](x, x.numel(), BLOCK=128)\n    return x\n")


@pytest.mark.parametrize(
    "launcher",
    [
        "*batch, N = x.shape\nM = x.numel() // N",
        "M = x.shape[0] if x.dim() > 1 else 1",
        "num_warps = 4 if x.shape[-1] <= 2048 else 8",
        "BLOCK = max(16, triton.next_power_of_2(x.shape[-1]))",
        "x2 = x.view(-1, x.shape[-1])\nM, N = x2.shape\nT = M * N",
        "def grid(META):\n    return (triton.cdiv(x.numel(), META['BLOCK']),)\n_k[grid](x, x.numel(), BLOCK=64)",
        "_k[lambda meta: (triton.cdiv(meta['n'], meta['BLOCK']),)](x, x.numel(), BLOCK=64)",
        "out_dtype = x.dtype if x.dtype != torch.float64 else torch.float32\ny = torch.empty_like(x, dtype=out_dtype)",
        "y = torch.empty(x.shape[:-1] + (4,), device=x.device, dtype=x.dtype)",
        "sm = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1\n"
        "programs = min(sm * 4, x.shape[0])",
        "M, N = x.shape\nif N > 65536:\n    raise ValueError(f'N={N} too large')",
        "rows = x.shape[0]\nblock = 1\nwhile block < rows:\n    block *= 2",
        "s = x.size()\nn = s[0] * s[1]",
        "if (n := x.numel()) > 4:\n    half = n // 2",
        "for d in x.shape:\n    twice = d * 2",
        "scale = eps * 2",
        "y = x.new_empty((4,))\nz = x.new_zeros((4,))\nw = x.expand(2, -1).transpose(0, 1)[1:]",
        "label = x.device.type.upper() + ':' + str(x.device.index)",
    ],
)
def test_inferred_plain_values_may_compute(launcher: str) -> None:
    assert check_source(typed_candidate(launcher, params=", eps: float = 1e-6"), entry="launch") == []


def test_helpers_are_typed_by_their_call_sites_when_the_entry_is_known() -> None:
    helper = "\n\ndef _blocks(n):\n    return triton.cdiv(n, 128)\n"
    source = typed_candidate("n = _blocks(x.numel())\nm = n * 2", module=helper)
    assert check_source(source, entry="launch") == []
    # Negative control: without the entry, _blocks may be what the harness calls with a tensor.
    assert "host-compute" in {v.rule for v in check_source(source)}
    # ... and a call site that passes a tensor makes the helper's operator host compute.
    assert "host-compute" in {v.rule for v in check_source(typed_candidate("n = _blocks(x)", module=helper),
                                                            entry="launch")}


@pytest.mark.parametrize(
    ("plain_form", "tensor_form"),
    [
        ("n = x.numel() * 2", "n = x * 2"),
        ("n = -x.shape[0]", "n = -x"),
        ("ok = x.shape[0] > 1", "ok = x > 1"),
        ("n = sum(x.shape)", "n = sum(x)"),
        ("n = int(x.shape[0])", "n = int(x[0])"),
        ("s = f'{x.shape}'", "s = f'{x}'"),
        ("y = x[: x.shape[0]]", "y = x[x.view(-1)]"),
        ("if x.numel():\n    pass", "if x:\n    pass"),
        ("n = triton.cdiv(x.numel(), 2)", "n = triton.cdiv(x, 2)"),
    ],
)
def test_operators_need_plain_operands(plain_form: str, tensor_form: str) -> None:
    assert check_source(typed_candidate(plain_form), entry="launch") == []
    assert "host-compute" in {v.rule for v in check_source(typed_candidate(tensor_form), entry="launch")}


def test_the_corpus_covers_every_rule_of_issue_9() -> None:
    expected = {re.match(r"# expect: (\S+)", p.read_text()).group(1) for p in EXPLOITS}
    new_rules = {"namespace-value", "unlisted-attribute", "kernel-store", "kernel-scope", "dsl-attribute"}
    assert new_rules | {"host-compute", "mutable-default", "forbidden-builtin"} <= expected
    assert new_rules <= set(RULES)


@pytest.mark.parametrize(
    "source",
    [
        "m = tl.math",
        "f = lambda ns=tl.extra.libdevice: ns",
        "pair = (1, tl)",
        "_helper(torch)",
    ],
)
def test_namespaces_are_never_values(source: str) -> None:
    violations = check_source(candidate(source, module="\n\ndef _helper(m):\n    return 1\n"))
    assert "namespace-value" in {v.rule for v in violations}


def test_namespaces_used_in_place_pass() -> None:
    source = HEADER + (
        "from triton.language.extra import libdevice\n\n"
        "@triton.jit\n"
        "def _k(x_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    x = tl.load(x_ptr + offs)\n"
        "    tl.store(x_ptr + offs, libdevice.rsqrt(tl.math.exp(x)) + tl.extra.libdevice.rsqrt(x))\n"
    )
    assert check_source(source) == []


@pytest.mark.parametrize(
    "launcher",
    [
        "y = x.view(-1)\nz = y.mul(2)",
        "m = {'a': x}\nz = m['a'] * 2",
        "for a, b in [(x, x)]:\n    c = a + b",
        "s = x.shape\nz = s * x",
        "f = torch.empty_like\nz = f(x) + 1",
        "z = torch.finfo(x.dtype)\nw = z.max * x",
        "it = x.unbind(0)\nw = it[0] + it[1]",
        "g = (lambda v: v * 2)(x)",
        "def h(v=1):\n    return v + 1\nw = h(v=x)",
        "w = min(x.shape[0], x)",
        "a, *rest = x, x\nq = rest[0] * 2",
        "q = x.new_zeros(4) * 2",
        "q = x.size(0).bit_length()",
        "t = type(x)\nq = t.mul(x, 2)",
        "q = torch.zeros_like(x)\nq += x",
        "q = x.view(torch.int32) ^ 1",
        "q = x[x > 0]",
        "with torch.cuda.device(x.device) as d:\n    q = d * 2",
        "q = x.shape.index(x)",
        "q = '%s' % x",
        "q = x.detach()",
    ],
)
def test_host_compute_in_disguise_is_rejected(launcher: str) -> None:
    assert check_source(candidate(launcher), entry="launch") != []


@pytest.mark.parametrize(
    "kernel_line",
    ["q = x_ptr.dtype.element_ty.to_ir(None)", "f = tl.load\nq = f.fn", "q = tl.math.exp.fn", "q = n.handle"],
)
def test_kernel_escapes_are_rejected(kernel_line: str) -> None:
    body = textwrap.indent(kernel_line, "    ")
    source = HEADER + f"\n@triton.jit\ndef _k(x_ptr, n, BLOCK: tl.constexpr):\n{body}\n"
    assert check_source(source) != []


def test_an_optional_output_argument_passes() -> None:
    source = candidate("if out is None:\n    out = torch.empty_like(x)\nassert out.stride(0) >= 0 and out.shape == x.shape")
    source = source.replace("def launch(x):", "def launch(x, out=None):")
    assert check_source(source, entry="launch") == []
    # ... but the tensor side of it still may not compute.
    assert "host-compute" in rules_of(source.replace("assert out.stride(0)", "out = out * 2\n    assert out.stride(0)"))


@pytest.mark.parametrize("test, refused", [
    ("a.shape is b.shape", True),
    ("a.type.shape is not b.type.shape", True),
    ("a is b", True),
    ("BIAS is None", False),
    ("None is not BIAS", False),
    ("a.shape == b.shape", False),
])
def test_object_identity_in_a_kernel_is_refused_except_against_none(test, refused) -> None:
    """``is`` in a kernel tells front ends apart (the interpreter's shared shape objects);
    only a test against None passes, and identity in host code is not this rule's."""
    source = f'''
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, BIAS, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs)
    b = a + 1.0
    if {test}:
        a = b
    tl.store(x_ptr + offs, a)


def run(x, bias=None):
    if bias is None:
        bias = x
    _k[(1,)](x, None, BLOCK=16)
    return x
'''
    rules = {v.rule for v in check_source(source, "k.py")}
    assert ("kernel-identity" in rules) is refused, rules


@pytest.mark.parametrize("line, refused", [
    # Flows a kernel needs: masks, loop bounds, tile counts, grouped orders, data arithmetic.
    ("y = tl.where(offs < n, a / n, a)", False),
    ("y = a * (1.0 / n)", False),                           # a reciprocal, precomputed
    ("y = a + (tl.program_id(0) % (n * 2)) + tl.cdiv(n, BLOCK) * tl.program_id(0)", False),  # tile orders
    ("y = tl.where(a < n, a, 0.0)", False),                # a bound check of loaded data
    ("y = _pick(offs, n)", False),                          # the helper's parameter holds an index
    ("y = a\n    for t in range(tl.program_id(0), n, tl.num_programs(0)):\n        y += 1.0", False),
    ("y = a * 2 if CHOSEN else a", False),                  # a constexpr: the launch's own choice
    # Switches on run-time arguments alone.
    ("y = tl.where(n % 7 == 3, a * 2, a)", True),
    ("y = a * 2 if n > 64 else a", True),
    ("y = a * (n >> 12)", True),
    ("y = a\n    for t in range(0, (n + 15) // 16):\n        y += 1.0", False),  # a hand-written cdiv as a trip count
    ("y = a * tl.cdiv(n, BLOCK)", True),                    # a floor of sizes scales data
    ("y = a * (tl.cdiv(n + 8, 13) - tl.cdiv(n + 7, 13))", True),  # n % 13 == 5, no comparison
    ("y = a * tl.minimum(n, 1)", True),
    ("y = _pick(n, n)", True),    # the helper compares two sizes here, an index and a size below
    ("y = a\n    while n > 8:\n        y = y * 2\n        n = n // 2", True),
    ("y = a * 2 if tl.num_programs(0) > 4 else a", True),   # the grid is a function of the sizes
])
def test_a_kernel_never_switches_on_its_run_time_arguments_alone(line, refused) -> None:
    source = f'''
import torch
import triton
import triton.language as tl


@triton.jit
def _pick(i, limit):
    return tl.where(i < limit, 1.0, 0.0)


@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr, CHOSEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    {line}
    tl.store(x_ptr + offs, y + _pick(offs, n), mask=offs < n)


def run(x):
    _k[(1,)](x, x.numel(), BLOCK=16, CHOSEN=x.numel() > 8)
    return x
'''
    rules = {v.rule for v in check_source(source, "k.py")}
    assert ("size-switch" in rules) is refused, rules
    assert rules <= {"size-switch"}, rules


def test_a_refusal_of_the_whole_kernel_is_shown_beside_the_switches_inside_it() -> None:
    """*args is refused for the kernel as a whole; a switch in its body must not hide that reason."""
    source = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, n, *rest, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    y = a * 2 if n > 64 else a
    tl.store(x_ptr + offs, y, mask=offs < n)


def run(x):
    _k[(1,)](x, x.numel(), BLOCK=16)
    return x
'''
    messages = [v.message for v in check_source(source, "k.py") if v.rule == "size-switch"]
    assert any("*args" in m for m in messages), messages
    assert any("'n > 64'" in m for m in messages), messages


@pytest.mark.parametrize("piece, refused", [
    ("tl.max(tl.load(x_ptr + start + offs, mask=start + offs < n, other=0.0), axis=0)", False),
    ("n * 1.0", True),  # negative control: sizes alone reach the helper in the end
])
def test_a_helper_in_a_loop_is_judged_by_what_its_arguments_hold_once_settled(piece, refused) -> None:
    """A first pass reads the call in the loop before the loop's loads reach its arguments, and
    makes a context of sizes alone for the helper; no call makes that context once the analysis
    settles, so it is not judged (logprobs' fold of its pieces was refused for it)."""
    source = f'''
import torch
import triton
import triton.language as tl


@triton.jit
def _fold(acc, value):
    return tl.maximum(acc, value)


@triton.jit
def _piece(x_ptr, offs, start, n):
    return {piece}


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.full((), float("-inf"), tl.float32)
    for start in range(0, n, BLOCK):
        acc = _fold(acc, _piece(x_ptr, offs, start, n))
    tl.store(y_ptr, acc)


def run(x):
    y = torch.empty((), dtype=torch.float32)
    _k[(1,)](x, y, x.numel(), BLOCK=16)
    return y
'''
    rules = {v.rule for v in check_source(source, "k.py")}
    assert ("size-switch" in rules) is refused, rules
    assert rules <= {"size-switch"}, rules


@pytest.mark.parametrize("first, refused", [
    ("g = n", True),                                  # sizes alone at one binding, data at the other
    ("g = tl.load(x_ptr + offs + 1, mask=offs < n)", False),  # negative control: data at both
])
def test_a_name_rebound_from_sizes_to_data_is_refused_when_a_helper_tests_it(first, refused) -> None:
    """A name holds all its bindings, so a helper given it sees sizes and data at once and its
    test looks like one on data; the first pass's context of sizes alone, which used to flag
    it, is no longer judged (893a1c8), so passing such a name to a helper counts as testing it
    (a red team's S1: ``gx = num_heads; _is(gx, 32); gx = tl.load(...)``)."""
    source = f'''
import torch
import triton
import triton.language as tl


@triton.jit
def _is(x, want):
    return tl.where(x == want, 1.0, 0.0)


@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    {first}
    flag = _is(g, 32)
    g = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(x_ptr + offs, g * flag, mask=offs < n)


def run(x):
    _k[(1,)](x, x.numel(), BLOCK=16)
    return x
'''
    rules = {v.rule for v in check_source(source, "k.py")}
    assert ("size-switch" in rules) is refused, rules
    assert rules <= {"size-switch"}, rules
