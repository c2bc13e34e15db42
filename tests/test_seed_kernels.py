"""The bundled seeds compute their function and are batch invariant bit for bit."""

import pytest
import torch

from bitassert import assert_same_bits
from tik_agent.sandbox.harness import TrainingStep, load_seed_entry
from tik_agent.spec.seeds import resolve

pytestmark = pytest.mark.slow  # whole seeds under the interpreter

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: (2e-5, 1e-4), torch.bfloat16: (2e-2, 1e-1), torch.float16: (3e-3, 2e-2)}


@pytest.fixture(scope="module")
def entries():
    """Each seed's forward (a seed with a backward entry is judged as a training step)."""
    steps = {name: load_seed_entry(resolve(name)) for name in ("rmsnorm", "logprobs", "matmul")}
    return {name: s.forward if isinstance(s, TrainingStep) else s for name, s in steps.items()}


def _rows_alone_match(fn, batched, shared, full):
    for i in range(batched[0].shape[0]):
        out = fn(*[t[i : i + 1].clone() for t in batched], *shared)
        assert_same_bits(full[i : i + 1], out, f"row {i} alone")
    perm = torch.randperm(batched[0].shape[0])[: max(1, batched[0].shape[0] // 2)]
    out = fn(*[t[perm] for t in batched], *shared)
    assert_same_bits(full[perm], out, f"sub-batch {perm.tolist()}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", [(1, 7), (5, 1000), (13, 2049)])
@pytest.mark.parametrize("seed", [0, 1])
def test_rmsnorm(entries, device, dtype, m, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g).to(dtype).to(device)
    w = torch.randn(n, generator=g).to(dtype).to(device)
    y = entries["rmsnorm"](x, w)
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(1, keepdim=True) + 1e-6) * w.double()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=atol)
    assert_same_bits(y, entries["rmsnorm"](x, w), "second run")
    _rows_alone_match(lambda x, w: entries["rmsnorm"](x, w), [x], [w], y)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,v", [(1, 3), (6, 2049), (11, 5000)])
@pytest.mark.parametrize("seed", [0, 1])
def test_logprobs(entries, device, dtype, m, v, seed):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(m, v, generator=g) * 4).to(dtype).to(device)
    targets = torch.randint(0, v, (m,), generator=g).to(device)
    out = entries["logprobs"](logits, targets)
    assert out.dtype == torch.float32 and out.shape == (m,)
    ref = torch.log_softmax(logits.double(), -1).gather(1, targets.view(-1, 1)).view(-1)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    _rows_alone_match(entries["logprobs"], [logits, targets], [], out)


def test_logprobs_full_vocabulary(entries, device):
    """The contract names V up to 152,064 (Qwen's vocabulary)."""
    logits = torch.randn(2, 152064).to(torch.bfloat16).to(device)
    targets = torch.tensor([0, 152063], device=device)
    out = entries["logprobs"](logits, targets)
    ref = torch.log_softmax(logits.double(), -1).gather(1, targets.view(-1, 1)).view(-1)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert_same_bits(out[1:], entries["logprobs"](logits[1:], targets[1:]), "row 1 alone")


def _logprobs_inputs():
    """Rows whose log-probability shows the order of its sum: a row's result hides most of it
    (a change of the total's last bit moves a large log-sum-exp by less than its own last
    bit), so here the target is the largest logit, 0, over 5002 others near -6; then a row
    of -inf, an inf and an ignore-index target."""
    logits = torch.randn(16, 5003, generator=torch.Generator().manual_seed(4)) - 6
    logits[:, 100] = 0.0
    targets = torch.full((16,), 100)
    logits[1] = float("-inf")
    logits[2, 7] = float("inf")
    targets[3] = -100
    return logits, targets


@pytest.mark.parametrize("fold_rows, rows", [(128, 1), (1, 1), (4, 2)])
def test_logprobs_split_keeps_the_bits(fold_rows, rows, monkeypatch):
    """The GPU's split (one program per row and piece, then a fold) gives the one pass's bits,
    whatever the fold's rows per program, with a row of -inf, an inf and an ignore-index
    target among the rows (V = 5003: two pieces, the second short)."""
    from tik_agent.sandbox.harness import load_kernel

    kernel = load_kernel(resolve("logprobs").source, "split")
    logits, targets = _logprobs_inputs()
    monkeypatch.setattr(kernel, "ROWS_PER_PROGRAM", rows)
    seed = kernel.token_logprobs(logits, targets)
    for name, value in (("SPLIT", True), ("FOLD_ROWS", fold_rows)):
        monkeypatch.setattr(kernel, name, value)
    assert_same_bits(seed, kernel.token_logprobs(logits, targets), f"split, {fold_rows} fold rows")


@pytest.mark.parametrize("v", [7, 1500, 4096, 12289])
def test_logprobs_split_on_other_piece_counts(v, monkeypatch):
    """One short piece, one full piece and four pieces (the last of one element)."""
    from tik_agent.sandbox.harness import load_kernel

    kernel = load_kernel(resolve("logprobs").source, "pieces")
    g = torch.Generator().manual_seed(6)
    logits = (torch.randn(4, v, generator=g) * 3).bfloat16()
    targets = torch.randint(0, v, (4,), generator=g)
    seed = kernel.token_logprobs(logits, targets)
    monkeypatch.setattr(kernel, "SPLIT", True)
    assert_same_bits(seed, kernel.token_logprobs(logits, targets), f"split, V={v}")


def test_logprobs_pieces_are_part_of_the_numerics(monkeypatch):
    """Negative control for the two tests above: the piece is the contract's; another one
    changes the bits of rows wider than one piece, and leaves those of one piece alone."""
    from tik_agent.sandbox.harness import load_kernel

    kernel = load_kernel(resolve("logprobs").source, "piece")
    logits, targets = _logprobs_inputs()
    seed = kernel.token_logprobs(logits, targets)
    narrow = kernel.token_logprobs(logits[:, :2048].contiguous(), targets)
    monkeypatch.setattr(kernel, "PIECE_CHUNKS", 1)
    other = kernel.token_logprobs(logits, targets)
    assert not torch.equal(seed.view(torch.int32), other.view(torch.int32))
    assert_same_bits(narrow, kernel.token_logprobs(logits[:, :2048].contiguous(), targets), "one piece")


def test_logprobs_block_v_is_part_of_the_numerics(monkeypatch):
    """Negative control for the test above: the chunk width is the contract's, and another
    one changes the bits of the same inputs."""
    from tik_agent.sandbox.harness import load_kernel

    kernel = load_kernel(resolve("logprobs").source, "block")
    logits, targets = _logprobs_inputs()
    seed = kernel.token_logprobs(logits, targets)
    monkeypatch.setattr(kernel, "BLOCK_V", 1024)
    other = kernel.token_logprobs(logits, targets)
    assert not torch.equal(seed.view(torch.int32), other.view(torch.int32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,k,n", [(1, 5, 3), (7, 96, 65), (19, 130, 40)])
def test_matmul(entries, device, dtype, m, k, n):
    a = torch.randn(m, k).to(dtype).to(device)
    b = torch.randn(k, n).to(dtype).to(device)
    c = entries["matmul"](a, b)
    assert c.dtype == dtype
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=rtol, atol=atol)
    _rows_alone_match(lambda a, b: entries["matmul"](a, b), [a], [b], c)


def test_signed_zero_is_a_difference():
    """torch.equal would call these equal; parity must not."""
    from tik_agent.bits import first_mismatch

    a, b = torch.tensor([0.0]), torch.tensor([-0.0])
    assert torch.equal(a, b)
    mm = first_mismatch(a, b)
    assert mm is not None and mm.index == 0 and mm.ulps == 1
    nan = torch.tensor([float("nan")])
    assert first_mismatch(nan, nan.clone()) is None
