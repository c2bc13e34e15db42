"""float64 reference for the attention seed (sanity check, not the parity target)."""

import torch


def reference(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale):
    _, page, hkv, _ = k_cache.shape
    group = q.shape[1] // hkv
    out = torch.empty(q.shape, dtype=torch.float64)
    for s in range(seq_lens.shape[0]):
        begin, end = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1])
        length = int(seq_lens[s])
        slots = torch.arange(length)
        blocks = block_table[s, slots // page].long()
        k = k_cache[blocks, slots % page].double().repeat_interleave(group, dim=1)  # (L, Hq, D)
        v = v_cache[blocks, slots % page].double().repeat_interleave(group, dim=1)
        q_s = q[begin:end].double()
        scores = torch.einsum("thd,lhd->htl", q_s, k) * scale
        positions = torch.arange(length - (end - begin), length)
        scores = scores.masked_fill(slots[None, None, :] > positions[None, :, None], float("-inf"))
        out[begin:end] = torch.einsum("htl,lhd->thd", torch.softmax(scores, dim=-1), v)
    return out
