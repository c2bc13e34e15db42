"""The device's ceilings, measured now: device-to-device copy GB/s (bytes read and
written) and bf16 matmul TFLOP/s, so that a cell's GB/s and TFLOP/s read as a share of
what this GPU does.  (The timing itself is the graph phase: :mod:`tik_agent.sandbox.graphs`.)
"""

from __future__ import annotations

COPY_BYTES = 1024**3
MATMUL_N = 8192


def measure_ceilings() -> dict:
    """What this GPU does at best, measured now: the denominators of '% of ceiling'."""
    import torch

    def timed(body, repeats: int) -> float:
        for _ in range(2):
            body()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeats):
            body()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / repeats

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), 10)
    del src, dst
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    mm_ms = timed(lambda: a @ b, 10)
    return {"copy_gbps": 2 * COPY_BYTES / copy_ms / 1e6, "bf16_tflops": 2 * MATMUL_N**3 / mm_ms / 1e9,
            "how": f"device-to-device copy of {COPY_BYTES >> 20} MiB (read + write), "
                   f"{MATMUL_N}^3 bf16 matmul on random data; the mean of 10 back-to-back calls between "
                   "two CUDA events, after 2 warm-ups"}
