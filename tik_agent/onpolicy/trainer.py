"""The trainer's side: every sequence packed into one batch, forward and backward.

One forward over all tokens (the whole sequences, their K/V laid out in a
fresh paged cache with its own block size), the response tokens' log-probs,
then a policy-gradient-shaped loss and its backward pass through the same
kernels, as an RL trainer's step does.
"""

from __future__ import annotations

from tik_agent.onpolicy.model import Batch, Decoder
from tik_agent.onpolicy.workload import Workload


def train_logprobs(model: Decoder, ops, workload: Workload) -> tuple[dict[tuple[int, int], float], float]:
    """((sequence, position) -> log-prob of the next token, the gradient norm of the step)."""
    import torch

    page = workload.trainer_page
    tokens, positions, slots, cu, lens, table, rows = [], [], [], [0], [], [], []
    next_block = 0
    width = max(-(-len(s.tokens) // page) for s in workload.sequences)
    for i, s in enumerate(workload.sequences):
        own = list(range(next_block, next_block + -(-len(s.tokens) // page)))
        next_block += len(own)
        for p, tok in enumerate(s.tokens):
            tokens.append(tok)
            positions.append(p)
            slots.append(own[p // page] * page + p % page)
            rows.append((i, p))
        cu.append(cu[-1] + len(s.tokens))
        lens.append(len(s.tokens))
        table.append(own + [0] * (width - len(own)))
    batch = Batch(torch.tensor(tokens), torch.tensor(positions), torch.tensor(slots),
                  torch.tensor(cu, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32),
                  torch.tensor(table, dtype=torch.int32))
    params = model.parameters()
    for p in params:
        p.requires_grad_(True)
    try:
        logits = model.forward(ops, batch, model.new_cache(next_block, page), inplace=False)
        keep = [r for r, (i, p) in enumerate(rows) if p in workload.sequences[i].response_positions]
        index = torch.tensor(keep)
        targets = torch.tensor([workload.sequences[rows[r][0]].tokens[rows[r][1] + 1] for r in keep])
        logprobs = ops.token_logprobs(logits.index_select(0, index).contiguous(), targets)
        # A policy-gradient-shaped loss: the ratio is 1 at the sampler's policy.
        loss = -logprobs.sum()
        loss.backward()
        grad_norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None)))
    finally:
        for p in params:
            p.grad = None
            p.requires_grad_(False)
    return {rows[r]: lp for r, lp in zip(keep, logprobs.detach())}, grad_norm
