"""The sequences both sides see: prompts and responses drawn in advance from a seed.

The tokens are fixed before either side runs (teacher forcing), so that the
Triton and the stock kernels, the sampler and the trainer all score the
same tokens; the sampler's path is still a serving engine's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sequence:
    tokens: tuple[int, ...]
    prompt: int        # the first `prompt` tokens are the prompt; the rest is the response
    joins_at: int      # the sampler step at which the sequence enters the batch

    @property
    def response_positions(self) -> range:
        """Positions whose logits score a response token (the token after them)."""
        return range(self.prompt - 1, len(self.tokens) - 1)


@dataclass(frozen=True)
class Workload:
    sequences: tuple[Sequence, ...]
    chunk: int = 4          # prefill chunk: at most this many prompt tokens per step
    sampler_page: int = 8   # cache block sizes: the kernels may not depend on them
    trainer_page: int = 16


def make_workload(vocab: int, sequences: int = 4, seed: int = 0) -> Workload:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(sequences):
        prompt = int(torch.randint(5, 15, (1,), generator=gen))
        response = int(torch.randint(3, 9, (1,), generator=gen))
        tokens = torch.randint(0, vocab, (prompt + response,), generator=gen)
        out.append(Sequence(tuple(int(t) for t in tokens), prompt, joins_at=2 * i))
    return Workload(tuple(out))
