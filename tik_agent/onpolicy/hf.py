"""A transformers causal LM for the on-policy check: from a ``config.json`` (random
weights, nothing downloaded) or a local checkpoint directory, always with
``attn_implementation="sdpa"``, and the left-padded prompts it is given.

transformers is the optional extra ``tik-agent[hf]``; it is imported here only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError

CONFIG_DIR = Path(__file__).resolve().parent / "hf_configs"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class ModelSource:
    """Where the model comes from: ``config`` is its config.json; ``weights`` says whether
    ``directory`` holds a checkpoint (else the weights are random, drawn from the seed)."""

    given: str
    config: Path
    directory: Path
    weights: bool

    @property
    def text(self) -> str:
        return f"checkpoint {self.directory}" if self.weights else f"{self.config} (random weights)"


def bundled_configs() -> list[str]:
    """The names of the configs shipped with tik-agent (``hf_configs/<name>.json``)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def find(given: str) -> ModelSource:
    """``--hf``'s argument: a config.json, a directory holding one, or a bundled config's name."""
    path = Path(given)
    if not path.exists() and given in bundled_configs():
        path = CONFIG_DIR / f"{given}.json"
    if path.is_dir():
        directory, config = path, path / "config.json"
        if not config.is_file():
            raise UsageError(f"--hf {given}: the directory has no config.json")
    elif path.is_file():
        directory, config = path.parent, path
    else:
        raise UsageError(f"--hf {given}: no such file or directory (bundled configs: {', '.join(bundled_configs())})")
    weights = path.is_dir() and any((directory / name).is_file() for name in WEIGHT_FILES)
    return ModelSource(given, config, directory, weights)


def _transformers():
    try:
        import transformers
    except ImportError:
        raise UsageError("--hf needs transformers: pip install 'tik-agent[hf]'") from None
    return transformers


def load_config(source: ModelSource):
    """The model's PretrainedConfig, or one line naming the file and what is wrong."""
    transformers = _transformers()
    try:
        data = json.loads(source.config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{source.config}: not a readable JSON config: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise UsageError(f"{source.config}: model_type: missing; a transformers config names its model_type")
    try:
        config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{source.config}: model_type: {exc}") from None
    if getattr(config, "is_encoder_decoder", False):
        raise UsageError(f"{source.config}: model_type: {config.model_type} is an encoder-decoder; --hf takes a "
                         "causal LM")
    return config


def build_model(source: ModelSource, config, dtype: str, seed: int):
    """The causal LM in ``dtype`` with SDPA attention, in eval mode (no dropout)."""
    import torch

    transformers = _transformers()
    torch_dtype = getattr(torch, dtype)
    try:
        if source.weights:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                source.directory, config=config, dtype=torch_dtype, attn_implementation="sdpa", local_files_only=True)
        else:
            config._attn_implementation = "sdpa"
            torch.manual_seed(seed)
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    except (ValueError, OSError, KeyError) as exc:
        raise UsageError(f"{source.config}: cannot build a causal LM with SDPA attention from it: {exc}") from None
    return model.eval()


@dataclass(frozen=True)
class Prompts:
    """A left-padded batch of prompts of different lengths, as ``generate()`` takes it."""

    input_ids: object       # (B, P) int64
    attention_mask: object  # (B, P) int64, 0 on the left padding
    pad_id: int


def special_ids(config) -> dict[str, int | None]:
    """pad, bos and eos ids (the first of a list); pad falls back to eos, then 0."""
    def first(value):
        return value[0] if isinstance(value, (list, tuple)) and value else value

    eos = first(getattr(config, "eos_token_id", None))
    pad = first(getattr(config, "pad_token_id", None))
    return {"pad": pad if pad is not None else (eos if eos is not None else 0),
            "bos": first(getattr(config, "bos_token_id", None)), "eos": eos}


def make_prompts(config, count: int, seed: int) -> Prompts:
    """``count`` prompts of lengths 3, 5, 7, ... (cycling through 3..9), random ordinary tokens, left-padded."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = special_ids(config)
    special = {v for v in ids.values() if v is not None}
    ordinary = torch.tensor([t for t in range(config.vocab_size) if t not in special])
    lengths = [3 + (2 * i) % 7 for i in range(count)]
    width = max(lengths)
    rows, masks = [], []
    for n in lengths:
        tokens = ordinary[torch.randint(0, len(ordinary), (n,), generator=gen)].tolist()
        rows.append([ids["pad"]] * (width - n) + tokens)
        masks.append([0] * (width - n) + [1] * n)
    return Prompts(torch.tensor(rows), torch.tensor(masks), ids["pad"])
