"""The wheel enforces its certificate's domain (issue 21, item 4): the certificate lists it
in words, ``python -m <package>`` prints it, and the op and the drop-in refuse a call
outside it with ``NotCertifiedError`` naming what was outside and the certified range,
while calls inside it (mixed precision, views, the ignore index) run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from packageutil import render_package, run_fresh
from seedutil import copy_seed, edit
from tik_agent.export.builder import _distribution_record
from tik_agent.export.certificate import build_certificate
from tik_agent.export.project import distribution
from tik_agent.export.source import ExportSource
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent.spec.schema import load_spec

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # fresh interpreters that import torch and triton

# Runs the calls ``CALLS`` names in a fresh interpreter; each gives "ok <dtype>" or the error's text.
PROBE = """
    import json, torch
    import {pkg} as pkg
    results = {{}}
    def probe(label, fn):
        try:
            out = fn()
            results[label] = "ok " + str(out.dtype)
        except pkg.NotCertifiedError as exc:
            results[label] = "refused: " + str(exc)
    {calls}
    print(json.dumps(results))
"""


def _body(name: str, calls: str) -> str:
    return PROBE.format(pkg=name, calls=textwrap.dedent(calls).strip().replace("\n", "\n    "))


def _probe(tmp_path, seed: str, calls: str) -> dict:
    path, name = render_package(tmp_path, BUNDLED_DIR / seed)
    return run_fresh(path, _body(name, calls))


def _certificate(seed: str) -> dict:
    spec = load_spec(BUNDLED_DIR / seed)
    kernel = (BUNDLED_DIR / seed / "kernel.py").read_bytes()
    evaluation = {"outcome": "passed", "environment": {"device": "cpu"}, "cases": []}
    source = ExportSource(run_id="test", commit="c" * 40, root_commit="r" * 40, attempt_id=None, parent_commit=None,
                          spec=spec, spec_source=b"", seed_source=kernel, kernel_source=kernel, evaluation=evaluation,
                          trailers={}, ancestry=())
    dist = distribution(spec.name, source.commit)
    return build_certificate(source, _distribution_record(dist, spec.entry))


def test_the_certificate_lists_the_domain_in_words_and_in_full():
    cert = _certificate("rmsnorm")["domain"]
    assert cert["declared"] and cert["dims"]["N"] == {"min": 1, "max": 32768, "cpu": 8192}
    assert {"x": "bfloat16", "weight": "float32"} in cert["combos"]
    assert cert["kwargs"]["eps"] == {"min": 1e-12, "max": 0.01}
    text = "\n".join(cert["text"])
    for words in ("dimensions: M (rows) 1 to 1048576; N 1 to 32768", "or weight float32 with x",
                  "x contiguous, row-strided, transposed, column-strided or offset", "eps 1e-12 to 0.01",
                  "raise NotCertifiedError"):
        assert words in text, text
    matmul = _certificate("matmul")["domain"]
    assert matmul["judged_up_to"] == {"K": 1024, "N": 1024}   # a CPU certificate says what it did not judge
    assert "judged on cpu up to K 1024, N 1024" in "\n".join(matmul["text"])
    assert "-100: NaN in its row" in "\n".join(_certificate("logprobs")["domain"]["text"])


def test_python_m_prints_the_domain(tmp_path):
    path, name = render_package(tmp_path, BUNDLED_DIR / "rmsnorm")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(path)
    proc = subprocess.run([sys.executable, "-m", name, "--domain"], env=env, capture_output=True, text=True,
                          timeout=300, cwd=path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cert = json.loads((path / name / "certificate.json").read_text())
    assert proc.stdout.strip().splitlines() == cert["domain"]["text"]
    readme = (path / "README.md").read_text()
    assert "## The certified domain" in readme and cert["domain"]["text"][1] in readme


def test_rmsnorm_refuses_what_it_did_not_certify_and_runs_the_rest(tmp_path):
    r = _probe(tmp_path, "rmsnorm", """
        x, w = torch.randn(4, 64), torch.randn(64)
        probe("plain", lambda: pkg.rms_norm(x, w))
        probe("bf16 x, fp32 weight", lambda: pkg.rms_norm(x.bfloat16(), w))
        probe("transposed x", lambda: pkg.rms_norm(torch.randn(64, 4).t(), w))
        probe("offset weight", lambda: pkg.rms_norm(x, torch.randn(65)[1:]))
        probe("fp32 x, bf16 weight", lambda: pkg.rms_norm(x, w.bfloat16()))
        probe("wide", lambda: pkg.rms_norm(torch.randn(1, 32769), torch.randn(32769)))
        probe("eps", lambda: pkg.rms_norm(x, w, 0.5))
        probe("broadcast", lambda: pkg.rms_norm(torch.randn(1, 64).expand(4, 64), w))
        probe("3-d", lambda: pkg.rms_norm(torch.randn(2, 2, 64), w))
        probe("op itself", lambda: torch.ops.tik_kernel_rmsnorm.rms_norm(x, w, 0.5))
        with pkg.enabled():
            probe("routed mixed", lambda: torch.nn.functional.rms_norm(x.bfloat16(), [64], w))
            probe("routed broadcast", lambda: torch.nn.functional.rms_norm(torch.randn(1, 64).expand(4, 64), [64], w))
            probe("routed eps", lambda: torch.nn.functional.rms_norm(x, [64], w, 0.5))
    """)
    for label in ("plain", "transposed x", "offset weight", "routed broadcast"):
        assert r[label] == "ok torch.float32", (label, r[label])
    assert r["bf16 x, fp32 weight"] == r["routed mixed"] == "ok torch.bfloat16"
    assert "dtypes x float32, weight bfloat16 are not a certified combination" in r["fp32 x, bf16 weight"]
    assert "x bfloat16, weight float32" in r["fp32 x, bf16 weight"]     # the certified ones are listed
    assert r["wide"].endswith("dimension N = 32769 is outside the certified range 1 to 32768")
    assert r["eps"].endswith("eps=0.5 is outside the certified range 1e-12 to 0.01")
    assert r["op itself"] == r["eps"] and r["routed eps"] == r["eps"]
    assert "x is a broadcast view (strides (0, 1)" in r["broadcast"]
    assert "x has 3 dimensions (2, 2, 64); certified: 2 (M, N)" in r["3-d"]


def test_logprobs_takes_the_ignore_index_and_refuses_other_targets(tmp_path):
    r = _probe(tmp_path, "logprobs", """
        logits = torch.randn(3, 50)
        probe("ignore index", lambda: pkg.token_logprobs(logits, torch.tensor([4, -100, 7])))
        results["nan at"] = torch.isnan(pkg.token_logprobs(logits, torch.tensor([4, -100, 7]))).nonzero().flatten().tolist()
        probe("shifted ids", lambda: pkg.token_logprobs(logits, torch.arange(0, 8)[1::2][:3]))
        probe("negative", lambda: pkg.token_logprobs(logits, torch.tensor([4, -5, 7])))
        probe("past the vocabulary", lambda: pkg.token_logprobs(logits, torch.tensor([4, 50, 7])))
        probe("int32 ids", lambda: pkg.token_logprobs(logits, torch.tensor([4, 5, 7], dtype=torch.int32)))
    """)
    assert r["ignore index"] == "ok torch.float32" and r["shifted ids"] == "ok torch.float32"
    assert r["nan at"] == [1]   # the seed's defined result for the ignore index
    assert "targets holds -5; certified values: 0 to 49, or -100 (NaN in its row" in r["negative"]
    assert "targets holds 50" in r["past the vocabulary"]
    assert r["int32 ids"].endswith("targets is int32; certified: int64")


def test_matmul_and_attention_refuse_outside_and_route_the_layouts_models_use(tmp_path):
    mm = _probe(tmp_path / "mm", "matmul", """
        a, w = torch.randn(5, 16), torch.randn(8, 16)
        probe("linear's w.t()", lambda: pkg.matmul(a, w.t()))
        probe("wide K", lambda: pkg.matmul(torch.randn(1, 65537), torch.randn(65537, 1)))
        probe("mixed", lambda: pkg.matmul(a, w.t().double()))
        probe("broadcast a", lambda: pkg.matmul(torch.randn(1, 16).expand(5, 16), w.t()))
        with pkg.enabled():
            probe("routed linear", lambda: torch.nn.functional.linear(a, w))
            probe("routed broadcast", lambda: torch.mm(torch.randn(1, 16).expand(5, 16), w.t()))
    """)
    assert mm["linear's w.t()"] == mm["routed linear"] == mm["routed broadcast"] == "ok torch.float32"
    assert mm["wide K"].endswith("dimension K = 65537 is outside the certified range 1 to 65536")
    assert "are not a certified combination" in mm["mixed"] and "broadcast view" in mm["broadcast a"]
    att = _probe(tmp_path / "att", "attention", """
        q, kc = torch.randn(2, 4, 64), torch.randn(3, 8, 2, 64)
        cu, table = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([[0, 1]], dtype=torch.int32)
        lens = torch.tensor([9], dtype=torch.int32)
        probe("decode and chunk", lambda: pkg.attention(q, kc, kc, cu, lens, table, 0.125))
        probe("scale", lambda: pkg.attention(q, kc, kc, cu, lens, table, 2.0))
        probe("head dim", lambda: pkg.attention(torch.randn(2, 4, 96), torch.randn(3, 8, 2, 96),
                                                torch.randn(3, 8, 2, 96), cu, lens, table, 0.1))
        probe("ratio", lambda: pkg.attention(torch.randn(2, 6, 64), kc, kc, cu, lens, table, 0.125))
        probe("context", lambda: pkg.attention(q, kc, kc, cu, torch.tensor([131073], dtype=torch.int32), table, 0.1))
        probe("cache view", lambda: pkg.attention(q, kc[:, :, :1], kc[:, :, :1], cu, lens, table, 0.125))
    """)
    assert att["decode and chunk"] == "ok torch.float32"
    assert att["scale"].endswith("scale=2.0 is outside the certified range 0.001 to 1.0")
    assert att["head dim"].endswith("dimension D = 96 is outside the certified range 64 or 128")
    assert "Hq = 6 over Hkv = 2 is not a certified ratio" in att["ratio"]
    assert "a context length (L) of 131073 is outside the certified range 1 to 131072" in att["context"]
    assert "k_cache is a row-strided view" in att["cache view"]


def test_the_backward_op_checks_its_calls_and_autograd_hands_it_judged_gradients(tmp_path):
    """The backward op is callable on its own (torch.ops): it refuses forward inputs outside
    the domain and upstream gradients of another shape, dtype or an unjudged layout.  Autograd
    hands over what the loss gives (``.sum()``: a broadcast view, which no case judged); the
    forward op's gradient copies it into a judged layout first, so training never meets the
    refusal, and the kernel is never called with the broadcast view (the negative control
    lifts that copy and the kernel sees it)."""
    r = _probe(tmp_path, "logprobs", """
        from tik_kernel_logprobs import _autograd, _domain, _views
        bop = torch.ops.tik_kernel_logprobs.token_logprobs_backward
        logits, targets = torch.randn(3, 50), torch.tensor([4, 9, 7])
        ones = torch.ones(3)
        probe("contiguous dout", lambda: bop(logits, targets, ones)[0])
        probe("offset dout", lambda: bop(logits, targets, torch.ones(4)[1:])[0])
        probe("broadcast dout", lambda: bop(logits, targets, torch.ones(1).expand(3))[0])
        probe("strided dout", lambda: bop(logits, targets, torch.ones(6)[::2])[0])  # logits declares the class
        probe("short dout", lambda: bop(logits, targets, torch.ones(2))[0])
        probe("fp64 dout", lambda: bop(logits, targets, ones.double())[0])
        probe("bad target", lambda: bop(logits, torch.tensor([4, -5, 7]), ones)[0])
        seen, kernel = [], _autograd._kernel_backward
        def recording(logits, targets, dout):
            seen.append(sorted(_views.layout_classes(dout)))
            return kernel(logits, targets, dout)
        _autograd._kernel_backward = recording
        def summed():
            x = logits.clone().requires_grad_()
            pkg.token_logprobs(x, targets).sum().backward()
            return x.grad
        grad = summed()
        results["sum bits"] = torch.equal(grad.view(torch.int32), kernel(logits, targets, ones)[0].view(torch.int32))
        results["sum saw"] = seen[-1]
        _domain.conform_grad = lambda g: g   # negative control: autograd's gradient as it comes
        probe("sum without the copy", summed)
        results["control saw"] = seen[-1]
    """)
    assert r["contiguous dout"] == r["offset dout"] == r["strided dout"] == "ok torch.float32"
    name = "tik_kernel_logprobs.token_logprobs_backward"
    assert r["broadcast dout"].startswith(f"refused: {name}: dout is a broadcast view (strides (0,)")
    assert "certified layouts of upstream gradients of its form: column-strided, contiguous, offset" \
        in r["broadcast dout"]
    assert r["short dout"] == (f"refused: {name}: dout has shape (2,); certified: (3,), the shape of the "
                               "output for these inputs")
    assert r["fp64 dout"].startswith(f"refused: {name}: dout is float64; certified: float32")
    assert r["bad target"].startswith(f"refused: {name}: targets holds -5")
    assert r["sum bits"] is True and r["sum saw"] == ["contiguous"]
    assert r["sum without the copy"].startswith("refused: ") and "broadcast view" in r["sum without the copy"]
    assert r["control saw"] == ["contiguous"]   # the refusal came first: the kernel never saw the view
    rms = _probe(tmp_path / "rms", "rmsnorm", """
        bop = torch.ops.tik_kernel_rmsnorm.rms_norm_backward
        x, w = torch.randn(4, 64), torch.randn(64)
        probe("transposed dy", lambda: bop(x, w, torch.randn(64, 4).t())[0])
        probe("broadcast dy", lambda: bop(x, w, torch.ones(1, 64).expand(4, 64))[0])
        probe("eps", lambda: bop(x, w, torch.randn(4, 64), 0.5)[0])
        def summed():
            xg = x.clone().requires_grad_()
            pkg.rms_norm(xg, w).sum().backward()
            return xg.grad
        probe("sum", summed)
    """)
    assert rms["transposed dy"] == rms["sum"] == "ok torch.float32"
    assert "dy is a broadcast view" in rms["broadcast dy"]
    assert rms["eps"].endswith("eps=0.5 is outside the certified range 1e-12 to 0.01")


JUDGED_BACKWARD_CALLS = """
    import json, random, sys
    sys.path.insert(0, {repo!r})
    import torch
    from tik_agent.judge.plan import per_evaluation_cases
    from tik_agent.spec.cases import case_kwargs, make_inputs
    from tik_agent.spec.grid import evaluation_cases
    from tik_agent.spec.schema import load_spec
    from {pkg} import _domain
    spec = load_spec({seed!r})
    cases = evaluation_cases(spec, "cpu") + per_evaluation_cases(spec, "cpu", [], random.Random(0))
    grads = len(spec.backward.grads)
    refused, calls = [], 0
    for case in cases:
        if case.layout.startswith("huge"):   # no gradient takes a huge form
            continue
        inputs = make_inputs(spec, case)
        calls += 1
        try:
            _domain.check_backward("op", inputs[:-grads], inputs[-grads:], list(spec.backward.grads),
                                   case_kwargs(spec, case))
        except _domain.NotCertifiedError as exc:
            refused.append(case.id + ": " + str(exc))
    print(json.dumps({{"calls": calls, "refused": refused}}))
"""


@pytest.mark.parametrize("variant", ["bundled", "mixed x", "no offset"])
def test_the_wheel_takes_every_backward_call_the_grid_judged(tmp_path, variant):
    """Every parity call the grid makes of the backward (forward inputs, upstream gradients,
    keywords) passes the wheel's own check of it: else training inside the certified domain
    is refused.  The variants: a mixed combination that changes the first float input (the
    gradient takes the case's dtype, not that input's), and a domain without offset views."""
    seed = copy_seed("rmsnorm", tmp_path / "seeds")
    if variant == "mixed x":
        edit(seed / "spec.toml", 'mixed = [{ weight = "float32" }]', 'mixed = [{ x = "float32" }]')
    if variant == "no offset":
        edit(seed / "spec.toml", 'x = ["contiguous", "row-strided", "transposed", "column-strided", "offset"]',
             'x = ["contiguous", "row-strided"]')
        edit(seed / "spec.toml", 'weight = ["contiguous", "column-strided", "offset"]', 'weight = ["contiguous"]')
    path, name = render_package(tmp_path / "pkg", seed)
    r = run_fresh(path, textwrap.dedent(JUDGED_BACKWARD_CALLS).format(repo=str(REPO), pkg=name, seed=str(seed)))
    assert r["calls"] > 50 and r["refused"] == [], r["refused"][:5]


def test_training_on_slices_of_a_gradient_hands_the_backward_a_fresh_copy(tmp_path):
    """Backward through ``torch.cat`` of two calls hands the second an offset slice of the
    upstream gradient, contiguous already: with offset views outside the domain the copy
    must be a fresh tensor (``contiguous()`` would return the offset view, and the backward
    op would refuse it)."""
    seed = copy_seed("rmsnorm", tmp_path / "seeds")
    edit(seed / "spec.toml", 'x = ["contiguous", "row-strided", "transposed", "column-strided", "offset"]',
         'x = ["contiguous", "row-strided"]')
    edit(seed / "spec.toml", 'weight = ["contiguous", "column-strided", "offset"]', 'weight = ["contiguous"]')
    path, name = render_package(tmp_path / "pkg", seed)
    r = run_fresh(path, _body(name, """
        from tik_kernel_rmsnorm import _autograd
        seen, kernel = [], _autograd._kernel_backward
        def recording(x, weight, dy, eps):
            seen.append(dy.storage_offset())
            return kernel(x, weight, dy, eps)
        _autograd._kernel_backward = recording
        a, b, w = torch.randn(4, 64, requires_grad=True), torch.randn(4, 64, requires_grad=True), torch.randn(64)
        def step():
            out = torch.cat([pkg.rms_norm(a, w), pkg.rms_norm(b, w)])
            out.backward(torch.randn(8, 64))
            return b.grad
        probe("cat", step)
        results["offsets"] = seen
        bop = torch.ops.tik_kernel_rmsnorm.rms_norm_backward
        probe("offset dy", lambda: bop(a.detach(), w, torch.randn(5, 64)[1:])[0])
    """))
    assert r["cat"] == "ok torch.float32" and r["offsets"] == [0, 0]
    assert "dy is an offset view (strides (64, 1), offset 64)" in r["offset dy"]


def test_a_certificate_from_before_domains_keeps_the_old_checks(tmp_path):
    path, name = render_package(tmp_path, BUNDLED_DIR / "rmsnorm")
    cert_file = path / name / "certificate.json"
    cert = json.loads(cert_file.read_text())
    del cert["domain"]
    cert_file.write_text(json.dumps(cert))
    r = run_fresh(path, _body(name, """
        x, w = torch.randn(4, 64), torch.randn(64)
        probe("eps", lambda: pkg.rms_norm(x, w, 0.5))
        with pkg.enabled():
            probe("routed mixed", lambda: torch.nn.functional.rms_norm(x.bfloat16(), [64], w))
    """))
    assert r["eps"] == "ok torch.float32"
    assert r["routed mixed"].startswith("refused: aten::rms_norm: mixed dtypes")
