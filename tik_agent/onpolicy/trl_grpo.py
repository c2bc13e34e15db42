"""One real GRPO step of TRL's ``GRPOTrainer`` on a tiny transformers model, with the
sampler's log-probs kept from ``generate()`` and compared with the trainer's.

TRL (``tik-agent[trl]``) runs the whole step: prompts from a dataset, ``generate()``
on the left-padded prompts (its plain transformers path, no vLLM), rewards,
group advantages, the GRPO loss, backward and the optimizer step.  Two things
are added around it, in :class:`KeptLogprobsGRPOTrainer`:

- **the sampler's log-probs, kept**: TRL's transformers path keeps none (it
  takes ``old_per_token_logps`` from the trainer's own forward, so with
  ``num_iterations=1`` its ratio is 1 by construction).  Here ``generate()``
  also returns its logits, and each generated token's log-prob
  (``log_softmax(...).gather(...)``) is handed to TRL as the sampling log-probs
  that its vLLM path fills (``sampling_per_token_logps``).
- **the trainer's log-probs**, either TRL's own (``trainer_logps="trl"``: its
  fused chunked LM head, an online log-sum-exp in torch, positions counted
  from the first column) or the sampler's idiom (``"idiom"``: the model's
  logits with the positions ``generate()`` used, then
  ``log_softmax(...).gather(...)``, which the logprobs drop-in routes).

transformers, trl, datasets and tokenizers are imported here only.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

SPECIAL = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2, as in the tiny configs


def tiny_tokenizer(vocab_size: int, directory: Path):
    """A word-level tokenizer over ``<pad> <s> </s> t3 .. t{vocab_size-1}``, saved to and loaded
    from ``directory`` (nothing downloaded), padding on the left."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                      padding_side="left")
    wrapped.save_pretrained(directory)
    return PreTrainedTokenizerFast.from_pretrained(directory)


def token_logprobs(logits, tokens):
    """The sampler's and the idiom trainer's log-probs (the logprobs drop-in routes this idiom)."""
    import torch

    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[..., None])[..., 0]


@dataclass
class Kept:
    """What one step kept: the sampler's and the trainer's log-probs of the same tokens."""

    sampler: list = field(default_factory=list)   # (B, T) float32, from generate()'s logits
    trainer: list = field(default_factory=list)   # (B, T) float32, the loss's forward (with grad)
    mask: list = field(default_factory=list)      # (B, T) the completion tokens


def trainer_class():
    """``GRPOTrainer`` with the sampler's log-probs kept (imported here: trl is optional)."""
    import torch
    from trl import GRPOTrainer

    class KeptLogprobsGRPOTrainer(GRPOTrainer):
        def __init__(self, *args, trainer_logps: str = "idiom", **kwargs):
            if trainer_logps not in ("idiom", "trl"):
                raise ValueError(f"trainer_logps: 'idiom' or 'trl', not {trainer_logps!r}")
            super().__init__(*args, **kwargs)
            self.trainer_logps = trainer_logps
            self.kept = Kept()

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            model = self.accelerator.unwrap_model(self.model)
            original = model.generate
            scored = {}

            def generate(*args, generation_config=None, **kwargs):
                config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
                config.output_logits, config.return_dict_in_generate = True, True
                out = original(*args, generation_config=config, **kwargs)
                width = kwargs["input_ids"].shape[1]
                scored["logps"] = token_logprobs(torch.stack(out.logits, dim=1), out.sequences[:, width:])
                return out.sequences

            model.generate = generate
            try:
                completion_ids, _ = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                  num_generations, has_tool_images)
            finally:
                del model.generate
            logps = [row[:len(ids)].tolist() for row, ids in zip(scored["logps"], completion_ids)]
            return completion_ids, logps

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args,
                                               compute_entropy=False, **kwargs):
            if self.trainer_logps == "trl":
                logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, *args, compute_entropy=compute_entropy,
                    **kwargs)
            else:
                from trl.trainer.utils import entropy_from_logits

                positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
                logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                               use_cache=False).logits[:, -logits_to_keep - 1:-1]
                logps = token_logprobs(logits, input_ids[:, -logits_to_keep:])
                entropies = entropy_from_logits(logits.detach().float()) if compute_entropy else None
                aux = None
            if torch.is_grad_enabled():
                self.kept.trainer.append(logps.detach().clone())
            return logps, entropies, aux

        def _compute_loss(self, model, inputs):
            self.kept.sampler.append(inputs["sampling_per_token_logps"].detach().clone())
            self.kept.mask.append(inputs["completion_mask"].bool().clone())
            return super()._compute_loss(model, inputs)

    return KeptLogprobsGRPOTrainer


@dataclass(frozen=True)
class StepResult:
    tokens: int
    identical: int
    max_abs_ratio_minus_1: float
    params_changed: bool

    def text(self, name: str) -> str:
        return (f"{name}: {self.identical}/{self.tokens} generated tokens bit-identical between generate() and "
                f"the GRPO loss's forward, max |ratio - 1| = {self.max_abs_ratio_minus_1:.3g}, "
                f"optimizer step changed the weights: {self.params_changed}")


def run_step(model, tokenizer, prompts: list[str], workdir: Path, kernels=None, trainer_logps: str = "idiom",
             generations: int = 4, new_tokens: int = 3, seed: int = 0, census=None) -> StepResult:
    """One GRPOTrainer step (``max_steps=1``) with ``kernels`` (drop-ins) enabled around all of it, or
    stock torch when None; the kept log-probs compared token by token.  ``census``: a
    :func:`tik_agent.onpolicy.census.counting` mode to run the step under."""
    import contextlib

    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    def reward(completions, **_):  # any reward that varies within a group, so the gradient is not zero
        return [float(sum(map(ord, c)) % 7) for c in completions]

    config = GRPOConfig(output_dir=str(workdir), per_device_train_batch_size=generations,
                        num_generations=generations, max_completion_length=new_tokens, max_steps=1,
                        learning_rate=1e-2, use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
                        beta=0.0, temperature=1.0, top_k=0, top_p=1.0, bf16=False, seed=seed,
                        dataloader_num_workers=0, disable_tqdm=True)
    dataset = Dataset.from_dict({"prompt": prompts})
    before = [p.detach().clone() for p in model.parameters()]
    trainer = trainer_class()(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer, trainer_logps=trainer_logps)
    with contextlib.ExitStack() as stack:
        if kernels is not None:
            stack.enter_context(kernels.enabled())
        if census is not None:
            stack.enter_context(census)
        trainer.train()
    kept = trainer.kept
    sampler = torch.cat([s[m] for s, m in zip(kept.sampler, kept.mask)])
    trained = torch.cat([t[m] for t, m in zip(kept.trainer, kept.mask)])
    identical = int((sampler.view(torch.int32) == trained.view(torch.int32)).sum())
    diffs = (trained.double() - sampler.double()).tolist()
    worst = max((abs(math.expm1(d)) if math.isfinite(d) else math.inf for d in diffs), default=0.0)
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    result = StepResult(len(diffs), identical, worst, changed)
    log.info("%s", result.text("kernels" if kernels is not None else "stock torch"))
    return result
