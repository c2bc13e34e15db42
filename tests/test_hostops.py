"""Host compute caught at run time: the host-ops mode around every judged call.

The host-compute corpus (tests/adversarial/hostops) holds rmsnorm variants whose host
edit the static rules reject; with those rules out of the way, only the mode
stands between them and an accepted verdict, which the negative controls show.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from pathlib import Path

import pytest
import torch

from tik_agent.sandbox import harness, hostops, launches
from tik_agent.sandbox.harness import guarded_call, load_entry, load_seed_entry
from tik_agent.sandbox.static import check_source
from tik_agent.sandbox.wire import as_outputs
from tik_agent.spec.seeds import resolve

RUNTIME = sorted((Path(__file__).parent / "adversarial" / "hostops").glob("*.py"))
SEED_INPUTS = {
    "rmsnorm": lambda: [torch.randn(3, 40), torch.randn(40)],
    "logprobs": lambda: [torch.randn(3, 40), torch.tensor([0, 7, 39])],
    "matmul": lambda: [torch.randn(3, 24), torch.randn(24, 5)],
}
# The upstream gradients a training step takes after the inputs (one per output).
SEED_GRADS = {
    "rmsnorm": lambda: [torch.randn(3, 40)],
    "logprobs": lambda: [torch.randn(3)],
    "matmul": lambda: [torch.randn(3, 5)],
}


def _forward_spec():
    """rmsnorm judged on its forward alone: the corpus files are forward-only variants."""
    return dataclasses.replace(resolve("rmsnorm"), backward=None)


def _bits(out) -> tuple:
    return tuple(t.view(torch.int32) if t.is_floating_point() else t for t in as_outputs(out))


@pytest.fixture(scope="module", autouse=True)
def _launches_installed():
    launches.install()


def _expected_op(path: Path) -> str:
    match = re.match(r"# expect-op: (.+)", path.read_text())
    assert match, f"{path.name} lacks an '# expect-op: <aten op>' header"
    return match.group(1).strip()


@pytest.mark.slow  # whole seeds, or evaluations, under the interpreter
@pytest.mark.parametrize("name", sorted(SEED_INPUTS))
def test_seeds_pass_under_the_mode_with_their_bits(name):
    spec = resolve(name)
    entry = load_seed_entry(spec)  # a training step: the backward runs under the mode too
    assert spec.backward is not None
    inputs = SEED_INPUTS[name]() + SEED_GRADS[name]()
    bare = _bits(entry(*inputs, **dict(spec.kwargs)))
    assert len(bare) == len(spec.checked_outputs)
    assert all(torch.equal(a, b) for a, b in zip(_bits(guarded_call(entry, inputs, spec.kwargs)), bare))
    # A strided input makes contiguous() copy (aten.clone), which the mode admits.
    strided = [t.t().contiguous().t() if t.dim() == 2 and t.is_floating_point() else t for t in inputs]
    assert not strided[0].is_contiguous()
    assert all(torch.equal(a, b) for a, b in zip(_bits(guarded_call(entry, strided, spec.kwargs)), bare))


def test_runtime_corpus_is_present_and_statically_rejected():
    assert len(RUNTIME) >= 8
    for path in RUNTIME:
        assert check_source(path.read_text(), path.name), f"{path.name} passes the static rules"


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.stem)
def test_runtime_corpus_is_caught_by_the_mode(path):
    spec = _forward_spec()
    entry = load_entry(path, spec, "candidate")
    inputs = SEED_INPUTS["rmsnorm"]()
    with pytest.raises(hostops.HostComputeError, match=re.escape(_expected_op(path))):
        guarded_call(entry, inputs, spec.kwargs)


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.stem)
def test_without_the_mode_the_corpus_would_pass_on_bits(path, monkeypatch):
    """Negative control: the same call with the mode switched off returns the seed's bits."""
    spec = _forward_spec()
    entry = load_entry(path, spec, "candidate")
    inputs = SEED_INPUTS["rmsnorm"]()
    expected = load_seed_entry(spec)(*inputs, **dict(spec.kwargs))
    monkeypatch.setattr(harness.hostops, "watching", lambda **_: contextlib.nullcontext())
    monkeypatch.setattr(launches, "_refuse_tensor_constexprs", lambda *args: None)
    out = guarded_call(entry, inputs, spec.kwargs)
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))


def test_launches_are_exempt_and_need_to_be(monkeypatch):
    """The interpreter's launch copies with aten ops: without the exemption the seed itself fails."""
    spec = _forward_spec()
    entry = load_seed_entry(spec)
    guarded_call(entry, SEED_INPUTS["rmsnorm"](), spec.kwargs)
    monkeypatch.setattr(launches.hostops, "exempt", contextlib.nullcontext)
    with pytest.raises(hostops.HostComputeError, match="outside a Triton launch"):
        guarded_call(entry, SEED_INPUTS["rmsnorm"](), spec.kwargs)


def test_a_swallowed_violation_is_still_raised_and_then_forgotten():
    def sneaky(x):
        try:
            x.exp()
        except hostops.HostComputeError:
            pass
        return x

    with pytest.raises(hostops.HostComputeError, match=r"aten\.exp\.default"):
        guarded_call(sneaky, [torch.ones(2)], {})
    # The next clean call is not blamed for the previous one.
    assert guarded_call(lambda x: x.view(-1), [torch.ones(2)], {}).shape == (2,)


def test_the_first_violation_is_the_one_reported():
    def two(x):
        with contextlib.suppress(hostops.HostComputeError):
            x.neg()
        return x + 1

    with pytest.raises(hostops.HostComputeError, match=r"aten\.neg"):
        guarded_call(two, [torch.ones(2)], {})


def test_allocation_views_and_metadata_are_admitted():
    def launcher(x):
        y = torch.empty_like(x)
        z = torch.zeros((2, 3), dtype=torch.float32)
        w = x.new_zeros(4).new_empty((2,))
        v = x.t().reshape(-1).unsqueeze(0).permute(1, 0).expand(6, 2)[1:3]
        return y, z, w, v, x.shape, x.stride(0), x.numel(), x.dim(), x.is_contiguous(), tuple(x)

    guarded_call(launcher, [torch.ones(3, 2)], {})


@pytest.mark.parametrize(
    "op",
    [lambda x: x * 2, lambda x: x.sum(), lambda x: x.to(torch.float64), lambda x: bool(x[0] > 0),
     lambda x: x.clamp(0, 1), lambda x: x.float().half(), lambda x: torch.empty_like(x).copy_(x),
     lambda x: x.index_select(0, torch.zeros(1, dtype=torch.long)), lambda x: x.fill_(1.0)],
    ids=["mul", "sum", "to", "compare-bool", "clamp", "half", "copy_", "index_select", "fill_"],
)
def test_compute_is_refused(op):
    with pytest.raises(hostops.HostComputeError, match="outside a Triton launch"):
        guarded_call(op, [torch.ones(3)], {})


def test_the_mode_is_per_thread():
    """Another thread's harness work is not seen, and its exemption does not leak here."""
    errors = []

    def other():
        try:
            torch.ones(3).sum()  # no mode on this thread
        except Exception as exc:  # pragma: no cover - the failure being guarded against
            errors.append(exc)

    def launcher(x):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return x

    guarded_call(launcher, [torch.ones(2)], {})
    assert errors == []
    with hostops.exempt():
        pass
    with pytest.raises(hostops.HostComputeError):
        guarded_call(lambda x: x * 2, [torch.ones(2)], {})


def test_reported_keeps_only_what_the_mode_can_raise():
    """The worker's error text is the candidate's too: imitations of our message carry nothing on."""
    real = "Traceback ...\nHostComputeError: host compute: aten.mul.Tensor outside a Triton launch\n"
    assert hostops.reported(real) == "aten.mul.Tensor outside a Triton launch"
    method = "host compute: torch.Tensor.tolist outside a Triton launch"
    assert hostops.reported(method) == "torch.Tensor.tolist outside a Triton launch"
    fake = "ValueError: host compute: aten.sk_live_SECRET.x outside a Triton launch\n"
    assert hostops.reported(fake) is None
    assert hostops.reported("host compute: torch.Tensor.sk_SECRET outside a Triton launch") is None
    # An imitation first, the real one after it: the real one is what is reported.
    assert hostops.reported(fake + real) == "aten.mul.Tensor outside a Triton launch"


def test_the_static_rules_catch_the_constexpr_tensor_too():
    path = next(p for p in RUNTIME if p.stem == "constexpr_tensor")
    assert "launch-argument" in {v.rule for v in check_source(path.read_text())}


def test_admitted_names_only_aten_ops():
    assert hostops.admitted(torch.ops.aten.empty.memory_format)
    assert hostops.admitted(torch.ops.aten.view.default)
    assert not hostops.admitted(torch.ops.aten.mul.Tensor)
    assert not hostops.admitted(torch.ops.aten.set_.source_Storage)
    assert not hostops.admitted(torch.ops.aten._local_scalar_dense.default)


# ------------------------------------------------------------------ through a sandboxed evaluation


@pytest.fixture(scope="module")
def small_seed(tmp_path_factory):
    from seedutil import small_rmsnorm
    from tik_agent.spec.schema import load_spec

    return load_spec(small_rmsnorm(tmp_path_factory.mktemp("seed")))


@pytest.fixture(scope="module")
def eval_options():
    from conftest import DEVICE
    from tik_agent.judge.options import EvalOptions

    return EvalOptions(device=DEVICE, timeout_s=120, rounds=1, warmup=0)


@pytest.fixture(scope="module")
def reference(small_seed, eval_options):
    from shared import cached_reference

    return cached_reference(small_seed, eval_options)


@pytest.mark.slow  # whole seeds, or evaluations, under the interpreter
@pytest.mark.parametrize("name", ["mul_identity", "swallowed", "tolist_read"])
def test_sandboxed_evaluation_rejects_host_compute(name, small_seed, eval_options, reference, monkeypatch):
    """With the static rules bypassed, the worker's mode turns host compute into an integrity failure."""
    import tik_agent.sandbox.static as static
    from tik_agent.judge.evaluate import evaluate
    from tik_agent.outcomes import Outcome

    monkeypatch.setattr(static, "check_source", lambda *args, **kwargs: [])
    path = next(p for p in RUNTIME if p.stem == name)
    verdict = evaluate(small_seed, path, eval_options, reference=reference)
    assert verdict.outcome is Outcome.INTEGRITY_FAILED, f"{verdict.outcome.value}: {verdict.reason}"
    assert f"[host-compute] {_expected_op(path)}" in verdict.reason, verdict.reason
    assert "Traceback" not in verdict.reason


KERNEL_WITH_CONSTEXPR = """
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, OBJ: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))
"""


@pytest.mark.parametrize("wrap", [lambda x: x, lambda x: (1, (x,)), lambda x: {"a": [x]}], ids=["tensor", "tuple", "dict"])
def test_tensors_inside_constexprs_are_refused(tmp_path, wrap):
    path = tmp_path / "k.py"
    path.write_text(KERNEL_WITH_CONSTEXPR)
    kernel = harness.load_kernel(path, "constexpr")._k
    x = torch.ones(4)
    kernel[(1,)](x, 3, BLOCK=4)  # a plain constexpr launches
    with pytest.raises(hostops.HostComputeError, match="constexpr"):
        guarded_call(lambda t: kernel[(1,)](t, wrap(t), BLOCK=4), [x], {})


def test_entering_the_mode_does_not_import_dynamo():
    """Speed: every worker enters the mode before its guard, and torch wraps a mode's
    __torch_dispatch__ so that its first call imports torch._dynamo (2 s of a 4 s worker
    start here) unless the mode says there is nothing to skip.  In a fresh interpreter:
    the host-ops mode leaves torch._dynamo unimported, and a mode as torch's default
    makes one (negative control), while the mode still refuses compute."""
    import subprocess
    import sys

    code = """
import sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from tik_agent.sandbox import hostops
hostops.prepare()
ours = "torch._dynamo" in sys.modules
try:
    with hostops._mode_class()():
        torch.ones(2) + 1
    refused = False
except hostops.HostComputeError:
    refused = True
class Plain(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
with Plain():
    torch.empty(0)
print(ours, refused, "torch._dynamo" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"], done.stdout
