"""A small decoder in plain torch: GQA attention over a paged cache, RMSNorm, SwiGLU, RoPE.

Random weights from a seeded generator.  Every matrix product, norm,
attention and log-prob goes through a :class:`~tik_agent.onpolicy.kernels.KernelSet`;
what remains in torch is elementwise (embedding lookup, RoPE, SiLU, residual
adds), whose bits do not depend on the batch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    vocab: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2       # grouped-query attention: two query heads per KV head
    head_dim: int = 64      # the attention seed takes 64 or 128
    ffn: int = 128
    eps: float = 1e-6
    rope_base: float = 10000.0
    max_positions: int = 256


@dataclass
class Batch:
    """One forward call: new tokens of several sequences, packed, and where their K/V go."""

    tokens: object          # (T,) int64
    positions: object       # (T,) int64 absolute positions
    slots: object           # (T,) int64 flat cache slot (block * page + offset) of each token
    cu_seqlens_q: object    # (S + 1,) int32
    seq_lens: object        # (S,) int32, context including the new tokens
    block_table: object     # (S, max_blocks) int32


class Decoder:
    """``dtype`` is the weights', activations', cache's and RoPE tables' (float32 or bfloat16):
    the same random draws in either."""

    def __init__(self, config: Config, seed: int = 0, dtype: str = "float32"):
        import torch

        self.config = c = config
        self.dtype = getattr(torch, dtype)
        gen = torch.Generator().manual_seed(seed)

        def w(*shape, scale=None):
            scale = scale if scale is not None else shape[0] ** -0.5
            return (torch.randn(*shape, generator=gen) * scale).to(self.dtype).contiguous()

        self.embed = w(c.vocab, c.dim, scale=1.0)
        self.blocks = []
        for _ in range(c.layers):
            self.blocks.append({
                "attn_norm": 1.0 + 0.1 * w(c.dim, scale=1.0), "wq": w(c.dim, c.heads * c.head_dim),
                "wk": w(c.dim, c.kv_heads * c.head_dim), "wv": w(c.dim, c.kv_heads * c.head_dim),
                "wo": w(c.heads * c.head_dim, c.dim), "mlp_norm": 1.0 + 0.1 * w(c.dim, scale=1.0),
                "w_gate": w(c.dim, c.ffn), "w_up": w(c.dim, c.ffn), "w_down": w(c.ffn, c.dim),
            })
        self.final_norm = 1.0 + 0.1 * w(c.dim, scale=1.0)
        self.lm_head = w(c.dim, c.vocab)
        inv = 1.0 / (c.rope_base ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        angles = torch.arange(c.max_positions, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos, self.sin = angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def parameters(self) -> list:
        out = [self.embed, self.final_norm, self.lm_head]
        for b in self.blocks:
            out += list(b.values())
        return out

    def new_cache(self, num_blocks: int, page: int) -> list:
        import torch

        c = self.config
        shape = (num_blocks, page, c.kv_heads, c.head_dim)
        return [(torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)) for _ in range(c.layers)]

    def _rope(self, x, positions):
        import torch

        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

    def forward(self, ops, batch: Batch, cache: list, inplace: bool):
        """Logits (T, vocab) of the batch's tokens; their K/V are written into ``cache``.

        ``inplace``: write the cache in place (a sampler, no autograd) or out of
        place so that gradients reach the projections (a trainer).
        """
        import torch

        c = self.config
        t = batch.tokens.shape[0]
        h = self.embed[batch.tokens]
        for n, b in enumerate(self.blocks):
            x = ops.rms_norm(h, b["attn_norm"], c.eps)
            q = self._rope(ops.matmul(x, b["wq"]).view(t, c.heads, c.head_dim), batch.positions)
            k = self._rope(ops.matmul(x, b["wk"]).view(t, c.kv_heads, c.head_dim), batch.positions)
            v = ops.matmul(x, b["wv"]).view(t, c.kv_heads, c.head_dim)
            k_cache, v_cache = cache[n]
            flat = (-1, c.kv_heads, c.head_dim)
            if inplace:
                k_cache.view(flat)[batch.slots] = k
                v_cache.view(flat)[batch.slots] = v
            else:
                k_cache = k_cache.reshape(flat).index_put((batch.slots,), k).view(k_cache.shape)
                v_cache = v_cache.reshape(flat).index_put((batch.slots,), v).view(v_cache.shape)
                cache[n] = (k_cache, v_cache)
            a = ops.attention(q.contiguous(), k_cache, v_cache, batch.cu_seqlens_q, batch.seq_lens,
                              batch.block_table, c.head_dim ** -0.5)
            h = h + ops.matmul(a.reshape(t, c.heads * c.head_dim), b["wo"])
            x = ops.rms_norm(h, b["mlp_norm"], c.eps)
            gate, up = ops.matmul(x, b["w_gate"]), ops.matmul(x, b["w_up"])
            h = h + ops.matmul(torch.nn.functional.silu(gate) * up, b["w_down"])
        return ops.matmul(ops.rms_norm(h, self.final_norm, c.eps), self.lm_head)
