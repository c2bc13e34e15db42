"""The sampler's side: a serving engine's scheduling over a paged KV cache.

Each step batches the new tokens of every running sequence: a prefill chunk of
at most ``chunk`` prompt tokens, or one decode token.  Sequences join at their
own step and leave when their response is done, giving their cache blocks
back; the next sequence reuses them, so a sequence's blocks are scattered.
"""

from __future__ import annotations

from tik_agent.onpolicy.model import Batch, Decoder
from tik_agent.onpolicy.workload import Workload


class BlockPool:
    """Physical cache blocks handed out lowest-first and returned when a sequence leaves."""

    def __init__(self, count: int):
        self.free = list(range(count))

    def take(self) -> int:
        if not self.free:
            raise RuntimeError("sampler: the KV cache is full")
        return self.free.pop(0)

    def give_back(self, blocks: list[int]) -> None:
        self.free = sorted(self.free + blocks)


def sample_logprobs(model: Decoder, ops, workload: Workload) -> dict[tuple[int, int], float]:
    """(sequence, position) -> the log-prob the sampler gives the token after ``position``."""
    import torch

    page = workload.sampler_page
    longest = max(len(s.tokens) for s in workload.sequences)
    pool = BlockPool(len(workload.sequences) * (-(-longest // page)) + 2)
    cache = model.new_cache(len(pool.free), page)
    done = {i: 0 for i in range(len(workload.sequences))}  # tokens already fed
    blocks: dict[int, list[int]] = {}
    out: dict[tuple[int, int], float] = {}
    step = 0
    with torch.no_grad():
        while any(done[i] < len(s.tokens) - 1 for i, s in enumerate(workload.sequences)):
            running = [i for i, s in enumerate(workload.sequences) if s.joins_at <= step and done[i] < len(s.tokens) - 1]
            step += 1
            if not running:
                continue
            batch, fed = _step_batch(workload, running, done, blocks, pool, page)
            logits = model.forward(ops, batch, cache, inplace=True)
            targets = torch.tensor([workload.sequences[i].tokens[p + 1] for i, p in fed])
            logprobs = ops.token_logprobs(logits.contiguous(), targets)
            for row, (i, p) in enumerate(fed):
                if p in workload.sequences[i].response_positions:
                    out[(i, p)] = logprobs[row]
            for i in running:
                if done[i] >= len(workload.sequences[i].tokens) - 1:
                    pool.give_back(blocks.pop(i))
    return out


def _step_batch(workload: Workload, running, done, blocks, pool, page):
    """The step's new tokens, and the bookkeeping a paged engine keeps for them."""
    import torch

    tokens, positions, slots, fed, cu, lens = [], [], [], [], [0], []
    for i in running:
        s = workload.sequences[i]
        start = done[i]
        count = min(workload.chunk, s.prompt - start) if start < s.prompt else 1
        for p in range(start, start + count):
            if p // page >= len(blocks.setdefault(i, [])):
                blocks[i].append(pool.take())
            tokens.append(s.tokens[p])
            positions.append(p)
            slots.append(blocks[i][p // page] * page + p % page)
            fed.append((i, p))
        done[i] = start + count
        cu.append(cu[-1] + count)
        lens.append(done[i])
    width = max(len(blocks[i]) for i in running)
    table = [blocks[i] + [0] * (width - len(blocks[i])) for i in running]
    batch = Batch(torch.tensor(tokens), torch.tensor(positions), torch.tensor(slots),
                  torch.tensor(cu, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32),
                  torch.tensor(table, dtype=torch.int32))
    return batch, fed
