"""The worker's timing phase on cuda: the seed's workload cells through the graph timer.

Returns what the interleaved wall-clock loop returns (``timer``, ``samples`` in
milliseconds per call, and the re-check pairs), plus per-cell ``cells`` detail
(calls, input sets, bytes moved, launch overhead, clocks) and, when asked,
``ceilings`` measured on this GPU (device-to-device copy GB/s counting bytes read
and written, bf16 matmul TFLOP/s) so that a cell's GB/s can be read as a share
of what the device does.
"""

from __future__ import annotations

import statistics

from tik_agent.backends.graph_timer import (NAME, TorchGraphBackend, l2_bytes, measure_cell, sets_needed,
                                            tensor_bytes)

COPY_BYTES = 1024**3
MATMUL_N = 8192


def device_inputs(spec, cell, seed: int, device: str = "cuda") -> list:
    """A timing input set for ``cell`` generated on ``device`` (normal regime): nothing crosses
    the host link between samples, and the GPU never idles while the CPU draws numbers."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = []
    for inp in spec.inputs:
        shape = inp.resolve_shape(cell.m, dict(cell.dims))
        dtype = getattr(torch, inp.resolve_dtype(cell.dtype))
        if inp.is_float:
            tensors.append(torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(dtype))
        else:
            high = cell.dims[inp.high] if isinstance(inp.high, str) else inp.high
            tensors.append(torch.randint(0, high, shape, generator=gen, dtype=dtype, device=device))
    return tensors


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
                   f"{MATMUL_N}^3 bf16 matmul on random data; median of 10 after 2 warm-ups"}


def time_workload(spec, candidate, others: dict, timing: dict) -> tuple[dict, dict]:
    import time

    import torch

    kwargs = dict(spec.kwargs)
    kernels = {"candidate": candidate, **others}
    backend = TorchGraphBackend()
    l2 = l2_bytes(torch)
    samples, cells = {}, {}
    for cell in spec.workload_for("cuda"):
        first = device_inputs(spec, cell, 10_000)
        out = candidate(*first, **kwargs)
        set_bytes = tensor_bytes(first) + tensor_bytes(out)
        n_sets = sets_needed(set_bytes, l2)
        sets = [first] + [device_inputs(spec, cell, 10_000 + i) for i in range(1, n_sets)]
        calls = {n: (lambda s, fn=fn: fn(*s, **kwargs)) for n, fn in kernels.items()}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        candidate(*first, **kwargs)  # a rough single-call time (compiled above) to size the graph
        torch.cuda.synchronize()
        single_ms = (time.perf_counter() - t0) * 1e3
        m = measure_cell(backend, calls, sets, set_bytes, l2, int(timing["rounds"]), single_ms)
        samples[cell.name] = m.samples_ms
        detail = m.detail()
        detail["bytes"] = set_bytes
        detail["median_us"] = {n: statistics.median(v) * 1e3 for n, v in m.samples_ms.items()}
        cells[cell.name] = detail
        del sets, calls
        torch.cuda.empty_cache()
    recheck = {}
    for cell in spec.workload_for("cuda"):
        inputs = device_inputs(spec, cell, 20_000)
        cand = candidate(*inputs, **kwargs)  # the candidate first, as in the wall-clock loop
        ref = others["seed"](*inputs, **kwargs)
        recheck[cell.name] = {"candidate": cand, "seed": ref}
    result = {"timer": NAME, "samples": samples, "cells": cells, "l2_bytes": l2}
    if timing.get("ceilings"):
        result["ceilings"] = measure_ceilings()
    return result, recheck
