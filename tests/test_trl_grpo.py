"""One real step of TRL's GRPOTrainer on a tiny transformers Llama (random weights, a tokenizer
built here, nothing downloaded) with the bundled kernels' drop-ins: the log-probs kept from
generate() equal the GRPO loss's log-probs for the same tokens (ratio exactly 1.0), the
optimizer step runs through the kernels' backward; controls: stock torch, and TRL's own
trainer log-probs (its fused chunked LM head) under the kernels."""

from __future__ import annotations

import logging

import pytest

from hfutil import bundled_dropins, tiny_model, transformers

pytestmark = pytest.mark.slow  # a whole GRPO step through the kernels under the interpreter

transformers()
pytest.importorskip("trl", reason="the [trl] extra is not installed: pip install 'tik-agent[trl]'")
from tik_agent.onpolicy import census, trl_grpo  # noqa: E402

# Different lengths, so generate() left-pads them; each prompt gets 4 completions of 3 tokens.
PROMPTS = ["t5 t6 t7", "t9 t10 t11 t12 t13"]


@pytest.fixture(scope="module")
def routes(tmp_path_factory):
    return bundled_dropins(tmp_path_factory.mktemp("dropins"))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return trl_grpo.tiny_tokenizer(128, tmp_path_factory.mktemp("tokenizer"))


def test_grpo_step_with_the_kernels_is_on_policy_bit_for_bit(routes, tokenizer, tmp_path):
    model = tiny_model("llama", "float32")
    counting = census.counting(routes.namespaces)
    result = trl_grpo.run_step(model, tokenizer, PROMPTS, tmp_path, kernels=routes, census=counting)
    assert result.tokens >= 8 and result.identical == result.tokens, result
    assert result.max_abs_ratio_minus_1 == 0.0
    assert result.params_changed  # the optimizer step ran
    calls = counting.census.kernels
    logging.getLogger(__name__).info("kernel calls of the GRPO step: %s", dict(calls))
    # generate(): prefill + 2 decode steps per layer; the loss's forward and backward per layer.
    assert calls["attention"] >= 2 * (3 + 2), dict(calls)
    assert calls["matmul"] > 0 and calls["logprobs"] >= 2, dict(calls)


def test_controls_stock_torch_and_trls_own_logprobs(routes, tokenizer, tmp_path):
    stock = trl_grpo.run_step(tiny_model("llama", "float32"), tokenizer, PROMPTS, tmp_path / "stock")
    fused = trl_grpo.run_step(tiny_model("llama", "float32"), tokenizer, PROMPTS, tmp_path / "fused",
                              kernels=routes, trainer_logps="trl")
    assert stock.params_changed and fused.params_changed
    # TRL's own trainer log-probs (online log-sum-exp in torch, other positions) are not generate()'s bits.
    assert fused.identical < fused.tokens, fused
    # Measured on the 2-core CPU machine: 11/12 with stock torch (an observation, not a certificate).
    assert stock.identical < stock.tokens, stock
