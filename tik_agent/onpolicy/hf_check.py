"""The on-policy check on a transformers model: ``generate()`` against a padded training step.

The sampler is ``generate()`` on a left-padded batch of prompts of different
lengths (sampling at temperature 1 from a seeded generator, its KV cache, its
padded decode steps), and each generated token's log-prob is taken from the
logits it returned.  The trainer is one forward over prompt plus completion,
padded the same way (a row that stopped at its end-of-sequence token is also
padded on the right), with the positions ``generate()`` used (from the mask),
then a backward pass of a policy-gradient-shaped loss.  Per real generated
token, the two log-probs are compared as :mod:`.report` does.

``kernels`` is None for torch's stock kernels, or the drop-ins (:mod:`.dropins`)
whose ``enabled()`` covers the whole step, sampler and trainer alike.
"""

from __future__ import annotations

import contextlib
import math
import time

from tik_agent.onpolicy.hf import Prompts, special_ids
from tik_agent.onpolicy.report import SideBySide, ratio_statistics


def _token_logprobs(logits, tokens):
    """The trainer's and the sampler's idiom (the logprobs drop-in routes it)."""
    import torch

    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[..., None])[..., 0]


def sample(model, prompts: Prompts, new_tokens: int, seed: int):
    """(sequences (B, P+N), the sampler's log-probs (B, N), which generated tokens are real (B, N))."""
    import torch
    from transformers import GenerationConfig

    ids = special_ids(model.config)
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=0, do_sample=True, temperature=1.0, top_k=0,
                              top_p=1.0, pad_token_id=prompts.pad_id, eos_token_id=ids["eos"],
                              output_logits=True, return_dict_in_generate=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask,
                             generation_config=config)
    width = prompts.input_ids.shape[1]
    completion = out.sequences[:, width:]
    logprobs = _token_logprobs(torch.stack(out.logits, dim=1), completion)
    return out.sequences, logprobs, _real(completion, ids["eos"])


def _real(completion, eos):
    """True up to and including each row's first end-of-sequence token (generate() pads after it)."""
    import torch

    if eos is None:
        return torch.ones_like(completion, dtype=torch.bool)
    ended = (completion == eos).long().cumsum(dim=1)
    return (ended == 0) | ((ended == 1) & (completion == eos))


def train(model, prompts: Prompts, sequences, real):
    """(the trainer's log-probs (B, N), the gradient norm): one padded forward, then backward."""
    import torch

    width = prompts.input_ids.shape[1]
    mask = torch.cat([prompts.attention_mask, real.long()], dim=1)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate() makes them
    params = [p for p in model.parameters()]
    for p in params:
        p.requires_grad_(True)
    try:
        logits = model(input_ids=sequences, attention_mask=mask, position_ids=positions).logits
        logprobs = _token_logprobs(logits[:, width - 1:-1], sequences[:, width:])
        loss = -(logprobs * real).sum()  # a policy-gradient-shaped loss: the ratio is 1 at the sampler's policy
        loss.backward()
        grad_norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None)))
    finally:
        for p in params:
            p.grad = None
            p.requires_grad_(False)
    return logprobs.detach(), grad_norm


def compare(model, prompts: Prompts, kernels, name: str, dtype: str, new_tokens: int = 4, seed: int = 0,
            census=None) -> SideBySide:
    """Sampler against trainer on every real generated token, with ``kernels`` enabled (None: stock).
    ``census``: a :func:`tik_agent.onpolicy.census.counting` mode to run the step under."""
    import torch

    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if kernels is not None:
            stack.enter_context(kernels.enabled())
        if census is not None:
            stack.enter_context(census)
        sequences, sampled, real = sample(model, prompts, new_tokens, seed)
        trained, grad_norm = train(model, prompts, sequences, real)
    s, t = sampled[real], trained[real]
    identical = int((s.view(torch.int32) == t.view(torch.int32)).sum())
    diffs = (t.double() - s.double()).tolist()
    worst = max((abs(d) if math.isfinite(d) else math.inf for d in diffs), default=0.0)
    return SideBySide(name, dtype, len(diffs), identical, *ratio_statistics(diffs), worst, grad_norm,
                      time.perf_counter() - start)
