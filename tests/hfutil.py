"""What the transformers tests share: the bundled seeds' drop-ins in this process, and tiny
causal LMs of the popular families built from configs (random weights, nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

# name -> (config class, model class, what differs from the common tiny config)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),  # biases on q, k, v: aten::addmm
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),  # RMSNorm on each head's q and k
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),  # (1 + weight) norms, scaled embeddings, GeLU
}
# 2 layers, hidden 64, two query heads over one KV head of 64 (the kernel's head dims are 64 and 128).
COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)


def transformers():
    return pytest.importorskip("transformers", reason="the [hf] extra is not installed")


def tiny_config(family: str, **changes):
    config_cls, _, extra = FAMILIES[family]
    config = getattr(transformers(), config_cls)(**{**COMMON, **extra, **changes})
    config._attn_implementation = "sdpa"
    return config


def tiny_model(family: str, dtype: str = "float32", seed: int = 0, **changes):
    import torch

    config = tiny_config(family, **changes)
    torch.manual_seed(seed)
    return getattr(transformers(), FAMILIES[family][1])(config).to(getattr(torch, dtype)).eval()


def bundled_dropins(workdir: Path, files: dict | None = None):
    """The drop-ins of the bundled seeds' kernel files (any kind replaced by ``files[kind]``)."""
    from tik_agent.onpolicy import dropins
    from tik_agent.onpolicy.kernels import KINDS
    from tik_agent.spec.schema import load_spec
    from tik_agent.spec.seeds import BUNDLED_DIR

    chosen = {kind: load_spec(BUNDLED_DIR / kind).source for kind in KINDS}
    chosen.update(files or {})
    return dropins.load(chosen, workdir)
