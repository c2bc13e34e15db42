"""transformers models from tiny configs (random weights, SDPA attention) with the bundled kernels'
drop-ins: padded generate() and one padded training step give every generated token the same
bits, in the popular families and in float32 and bfloat16; a token has those bits alone and in
right- or both-side-padded batches; the backward runs through the kernels; the controls fail."""

from __future__ import annotations

import math

import pytest
import torch

from bitassert import assert_same_bits
from hfutil import bundled_dropins, tiny_model, transformers

pytestmark = pytest.mark.slow  # whole models through the kernels under the interpreter

transformers()
from tik_agent.onpolicy import census, hf, hf_check  # noqa: E402
from tik_agent.spec.seeds import BUNDLED_DIR  # noqa: E402

# Every family in one dtype, both dtypes among them: each run is ~75 launches of matmul alone.
CASES = [("llama", "float32"), ("qwen2", "bfloat16"), ("qwen3", "float32"), ("mistral", "float32"),
         ("gemma", "bfloat16")]
NEW_TOKENS = 3
LAYERS = 2


@pytest.fixture(scope="module")
def routes(tmp_path_factory):
    return bundled_dropins(tmp_path_factory.mktemp("dropins"))


def _prompts(model):
    return hf.make_prompts(model.config, 3, seed=0)  # lengths 3, 5, 7, left-padded


@pytest.mark.parametrize("family,dtype", CASES)
def test_generate_and_the_padded_training_step_agree_bit_for_bit(routes, family, dtype):
    model = tiny_model(family, dtype)
    counting = census.counting(routes.namespaces)
    side = hf_check.compare(model, _prompts(model), routes, "certified", dtype, NEW_TOKENS, census=counting)
    assert side.tokens >= 3 and side.identical == side.tokens, side.to_dict()
    assert side.max_abs_ratio_minus_1 == 0.0 and side.kl_k3 == 0.0
    assert math.isfinite(side.grad_norm) and side.grad_norm > 0
    calls = counting.census.kernels
    # Per layer: the prefill and each decode step, the training forward and its backward.
    assert calls["attention"] == LAYERS * (NEW_TOKENS + 2), dict(calls)
    assert calls["matmul"] > 0 and calls["logprobs"] >= 3 and calls["rmsnorm"] == 0, dict(calls)


def _relaid(sequences, mask, starts):
    """The same sequences with row b's real tokens from column starts[b] on, padding around them,
    and the positions a trainer takes from the mask."""
    lengths = mask.sum(1).tolist()
    width = max(s + n for s, n in zip(starts, lengths)) + 1  # every row ends in right padding
    ids = torch.zeros(len(lengths), width, dtype=sequences.dtype)
    new_mask = torch.zeros(len(lengths), width, dtype=mask.dtype)
    for row, (start, n) in enumerate(zip(starts, lengths)):
        ids[row, start:start + n] = sequences[row][mask[row].bool()]
        new_mask[row, start:start + n] = 1
    positions = (new_mask.cumsum(-1) - 1).masked_fill(new_mask == 0, 0)
    return ids, new_mask, positions


def test_a_token_has_its_bits_alone_and_in_batches_padded_on_the_right_or_both_sides(routes):
    model = tiny_model("llama")
    prompts = _prompts(model)
    with routes.enabled(), torch.no_grad():
        sequences, sampled, real = hf_check.sample(model, prompts, NEW_TOKENS, seed=0)
        assert real.all()  # no end-of-sequence token among them (seeded)
        mask = torch.cat([prompts.attention_mask, real.long()], dim=1)
        lengths = mask.sum(1).tolist()
        for name, starts in (("right", [0, 0, 0]), ("both", [2, 0, 1])):
            ids, new_mask, positions = _relaid(sequences, mask, starts)
            logits = model(input_ids=ids, attention_mask=new_mask, position_ids=positions).logits
            for row, (start, n) in enumerate(zip(starts, lengths)):
                cols = slice(start + n - NEW_TOKENS - 1, start + n - 1)
                targets = ids[row, cols.start + 1:cols.stop + 1, None]
                got = torch.log_softmax(logits[row, cols].float(), -1).gather(-1, targets)
                assert_same_bits(sampled[row], got[:, 0], f"{name}-padded batch, row {row}")
        for row, n in enumerate(lengths):
            alone = sequences[row][mask[row].bool()][None]
            logits = model(input_ids=alone).logits[0, n - NEW_TOKENS - 1:n - 1]
            got = torch.log_softmax(logits.float(), -1).gather(-1, alone[0, n - NEW_TOKENS:, None])[:, 0]
            assert_same_bits(sampled[row], got, f"row {row} alone, unpadded")


def test_control_a_batch_dependent_matmul_is_caught_on_a_real_model(tmp_path):
    """The same check with a matmul whose K step follows the batch (decode steps have 3 rows,
    the training step many): some generated tokens get other bits."""
    path = tmp_path / "matmul.py"
    path.write_text((BUNDLED_DIR / "matmul" / "kernel.py").read_text().replace(
        "BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,", "BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, "
        "BLOCK_K=BLOCK_K if M <= 8 else 16,"))
    routes = bundled_dropins(tmp_path / "dropins", {"matmul": path})
    model = tiny_model("llama")
    side = hf_check.compare(model, _prompts(model), routes, "switching matmul", "float32", NEW_TOKENS)
    assert side.identical < side.tokens and side.max_abs_ratio_minus_1 > 0.0, side.to_dict()


def test_control_stock_torch_is_not_bit_identical_everywhere():
    """Without the kernels, on this CPU: some families' tokens differ in float32, while others
    happen to agree (bfloat16 rounding hides most differences at these sizes); printed per case."""
    seen = {}
    for family, dtype in CASES:
        model = tiny_model(family, dtype)
        side = hf_check.compare(model, _prompts(model), None, "stock", dtype, NEW_TOKENS)
        seen[f"{family} {dtype}"] = f"{side.identical}/{side.tokens}"
        assert side.identical >= 0 and side.tokens >= 3
    print("stock torch, bit-identical tokens:", seen)
    assert any(int(v.split("/")[0]) < int(v.split("/")[1]) for v in seen.values()), seen


def test_control_a_sliding_window_model_is_refused_with_its_reason(routes):
    model = tiny_model("mistral", sliding_window=3)
    prompts = _prompts(model)
    with routes.enabled(), pytest.raises(routes.packages["attention"].NotCertifiedError) as caught:
        hf_check.sample(model, prompts, 1, seed=0)
    message = str(caught.value)
    assert "causal attention aligned at the end, within each row's real tokens" in message
    # The first prompt (3 tokens) fits in the window; the second (5, from column 2) does not.
    assert "batch row 1, query 5 (key position 5): it sees keys 3..5" in message, message
    assert "real keys 2..6 sees 2..5" in message, message
