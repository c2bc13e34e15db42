"""A small copy of the attention seed, and the negative controls tests derive from it."""

from __future__ import annotations

import re
from pathlib import Path

from seedutil import copy_seed, edit

# One float32 combination (contexts of up to 36, long enough for a
# context-dependent split to happen); a cheap CPU timing cell.
SMALL_EDITS = {
    "Hq = [4]": "Hq = [2]",
    "Hkv = [2]": "Hkv = [1]",
    "D = [64, 128]": "D = [64]",
    'dtypes = ["float32", "bfloat16", "float16"]': 'dtypes = ["float32"]',
    'regimes = ["normal", "zero", "large", "special"]': 'regimes = ["normal"]',
    "batch_sizes = [1, 2, 3, 5]": "batch_sizes = [1, 3]",
    # contexts judged up to 128 on the CPU, not 256: the survey's far contexts (a decode
    # over the longest context, one per variant) cost half as much in every evaluation
    "L = { min = 1, max = 131072, cpu = 256 }": "L = { min = 1, max = 131072, cpu = 128 }",
}
SMALL_CPU_CELLS = """[[workload]]
name = "mixed-small"
M = 3
Hq = 2
Hkv = 1
D = 64
L = 24
Q = 5
P = 8
dtype = "float32"
weight = 1.0
devices = ["cpu"]

"""


def small_attention(dest: Path) -> Path:
    seed = copy_seed("attention", dest)
    spec = seed / "spec.toml"
    for old, new in SMALL_EDITS.items():
        edit(spec, old, new)
    text = spec.read_text()
    start = text.index('[[workload]]\nname = "prefill-small"')
    end = text.index("[tunables]")
    spec.write_text(text[:start] + SMALL_CPU_CELLS + text[end:])
    return seed


# Each control: text edits on kernel.py, and what must catch it.
CONTROLS = {
    # flash-decoding: a decode row's context is split in two halves (only once it
    # spans two tiles or more), each half reduced on its own and the halves merged.
    "split-kv-decode": [
        ("    for start in range(0, hi, TILE):\n",
         "    split_at = tl.where(q_len == 1, (seq_len // 2) // TILE * TILE, -1)\n"
         "    m_1 = tl.full((ROWS,), float(\"-inf\"), tl.float32)\n"
         "    l_1 = tl.zeros((ROWS,), tl.float32)\n"
         "    acc_1 = tl.zeros((ROWS, HEAD_DIM), tl.float32)\n"
         "    for start in range(0, hi, TILE):\n"
         "        restart = start == split_at\n"
         "        m_1 = tl.where(restart, m_i, m_1)\n"
         "        l_1 = tl.where(restart, l_i, l_1)\n"
         "        acc_1 = tl.where(restart, acc, acc_1)\n"
         "        m_i = tl.where(restart, float(\"-inf\"), m_i)\n"
         "        l_i = tl.where(restart, 0.0, l_i)\n"
         "        acc = tl.where(restart, 0.0, acc)\n"),
        ("    out = acc / l_i[:, None]\n",
         "    m_all = tl.maximum(m_1, m_i)\n"
         "    c_1 = tl.exp(m_1 - m_all)\n"
         "    c_2 = tl.exp(m_i - m_all)\n"
         "    l_i = l_1 * c_1 + l_i * c_2\n"
         "    acc = acc_1 * c_1[:, None] + acc * c_2[:, None]\n"
         "    out = acc / l_i[:, None]\n"),
    ],
    # the KV tile follows the batch: a sequence alone is walked in tiles twice as long
    "tile-follows-batch": [
        ("        q, out, out, out,  # the backward's pointers, unused by the forward\n        HEAD_DIM=D, TILE=TILE,",
         "        q, out, out, out,  # the backward's pointers, unused by the forward\n"
         "        HEAD_DIM=D, TILE=TILE if num_seqs > 1 else 2 * TILE,"),
    ],
    # a separate decode path: launches of decodes only take another tile size
    "separate-decode-path": [
        ("        q, out, out, out,  # the backward's pointers, unused by the forward\n        HEAD_DIM=D, TILE=TILE,",
         "        q, out, out, out,  # the backward's pointers, unused by the forward\n"
         "        HEAD_DIM=D, TILE=TILE if T > num_seqs else TILE // 2,"),
    ],
    # the first page of every sequence but the first is read from the previous sequence's row
    "reads-other-sequence": [
        ("page = tl.load(bt_ptr + seq * stride_bt + j // page_size, mask=loaded, other=0)",
         "page = tl.load(bt_ptr + tl.where((j < page_size) & (seq > 0), seq - 1, seq) * stride_bt + j // page_size,"
         " mask=loaded, other=0)"),
    ],
    # the last new token also attends to the slot just past the context: the tail of
    # its last block, or a padding column of the block table
    "padding-dependent": [
        ("        loaded = j < hi\n", "        loaded = j <= hi\n"),
        ("        sees = row_ok[:, None] & (j[None, :] <= pos[:, None])\n",
         "        sees = row_ok[:, None] & ((j[None, :] <= pos[:, None]) | ((j[None, :] == seq_len) & (pos == seq_len - 1)[:, None]))\n"),
        ("    for start in range(0, hi, TILE):", "    for start in range(0, hi + 1, TILE):"),
    ],
}


def apply_control(seed: Path, name: str) -> Path:
    kernel = seed / "kernel.py"
    for old, new in CONTROLS[name]:
        edit(kernel, old, new)
    return kernel


def without_tunables(text: str) -> str:
    return re.sub(r"\[tunables\].*", "", text, flags=re.S)


SMALL_BACKWARD = """[[workload]]
name = "step-small"
M = 1
Hq = 2
Hkv = 1
D = 64
L = 16
Q = 16
P = 8
dtype = "float32"
weight = 1.0
backward = true
devices = ["cpu"]

[backward]
entry = "attention_backward"
grads = ["do"]
wrt = ["q", "k_cache", "v_cache"]

[backward.tolerance.float32]
rtol = 1e-4
atol = 1e-4

"""


def small_attention_backward(dest: Path) -> Path:
    """The small copy with the seed's backward entry and a training cell."""
    seed = small_attention(dest)
    spec = seed / "spec.toml"
    text = spec.read_text()
    at = text.index("[tunables]")
    spec.write_text(text[:at] + SMALL_BACKWARD + text[at:])
    return seed


# Backward controls: edits of the backward kernels (after the forward in the file).
BACKWARD_CONTROLS = {
    # dk/dv of a sequence alone sum over query blocks twice as long
    "dkdv-block-follows-batch": [
        ("BLOCK_Q=BWD_BLOCK_Q,\n", "BLOCK_Q=BWD_BLOCK_Q if num_seqs > 1 else 2 * BWD_BLOCK_Q,\n"),
    ],
    # dq (and the statistics dk/dv reuse) walked in other tiles for a sequence alone
    "dq-tile-follows-batch": [
        ("        do, m, l, delta,\n        HEAD_DIM=D, TILE=TILE,",
         "        do, m, l, delta,\n        HEAD_DIM=D, TILE=TILE if num_seqs > 1 else 2 * TILE,"),
    ],
    # the tail of a sequence's last block (slots it does not own) gets a constant
    # instead of zeros: deterministic and the same in every launch, so only the
    # ownership rule can see it
    "unowned-slots-nonzero": [
        ("    page = tl.load(bt_ptr + seq * stride_bt + j // page_size, mask=owned, other=0).to(tl.int64)\n",
         "    tail = j < (seq_len + page_size - 1) // page_size * page_size\n"
         "    page = tl.load(bt_ptr + seq * stride_bt + j // page_size, mask=tail, other=0).to(tl.int64)\n"),
        ("    tl.store(dk_ptr + slot[:, None] + d[None, :], dk.to(dk_ptr.dtype.element_ty), mask=owned[:, None])",
         "    tl.store(dk_ptr + slot[:, None] + d[None, :], tl.where(owned[:, None], dk, 0.25).to(dk_ptr.dtype.element_ty),"
         " mask=tail[:, None])"),
    ],
}


def apply_backward_control(seed: Path, name: str) -> Path:
    kernel = seed / "kernel.py"
    for old, new in BACKWARD_CONTROLS[name]:
        edit(kernel, old, new)
    return kernel
