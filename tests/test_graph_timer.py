"""The CUDA-graph timer's arithmetic on a fake clock: sizes, alternating rounds, per-call samples,
launch overhead apart; and how eval shows microseconds and the share of a ceiling."""

from __future__ import annotations

import io
import random

import pytest
import torch
from rich.console import Console

from tik_agent.backends.graph_timer import (MIN_SAMPLES, CellMeasurement, choose_calls, graph_calls, measure_cell,
                                            round_orders, sets_needed, tensor_bytes)
from tik_agent.cli import eval_commands
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.judge.timing import stats, weighted_speedup

L2 = 60 * 1024**2


class FakeGPU:
    """Kernel ``name`` costs ``kernel_us[name]`` on the device per call; an eager call costs
    ``launch_us`` on the host as well, when that is longer than the kernel."""

    def __init__(self, kernel_us: dict, launch_us: float, jitter: float = 0.0, seed: int = 0):
        self.kernel_us, self.launch_us, self.jitter = kernel_us, launch_us, jitter
        self.rng = random.Random(seed)
        self.captured: dict[str, tuple] = {}
        self.replayed: list[str] = []
        self.clock_reads = 0

    def capture(self, fn, sets, calls):
        name = fn(None)
        self.captured[name] = (len(sets), calls)
        return name, [name] * calls

    def _noise(self):
        return 1.0 + self.rng.uniform(-self.jitter, self.jitter)

    def replay_ms(self, graph):
        self.replayed.append(graph)
        _, calls = self.captured[graph]
        return calls * self.kernel_us[graph] * self._noise() / 1e3

    def eager_ms(self, fn, sets, calls):
        name = fn(None)
        return calls * max(self.kernel_us[name], self.launch_us) * self._noise() / 1e3

    def clocks(self):
        self.clock_reads += 1
        return {"sm_mhz": 1980}


def kernels(*names):
    return {n: (lambda _s, n=n: n) for n in names}


def test_input_sets_cover_more_than_l2():
    assert sets_needed(32 * 1024, L2) * 32 * 1024 > 2 * L2          # decode-sized cells: many sets
    assert sets_needed(64 * 1024**2, L2) == 3                       # 64 MiB sets: three cover 2 L2s
    assert sets_needed(8 * 1024**3, L2) == 2                         # never fewer than two (rotation)
    assert sets_needed(16, L2) == 4096                               # capped: a graph is not endless
    assert sets_needed(3 * 1024**3, L2, max_bytes=4 * 1024**3) == 2  # memory cap, still two


def test_calls_cover_every_set_and_a_long_enough_replay():
    assert choose_calls(0.005, sets=10) == 400      # 5 us a call: 2 ms of replay
    assert choose_calls(0.005, sets=1000) == 1000   # every set at least once
    assert choose_calls(5.0, sets=3) == 3
    assert choose_calls(0.0, sets=3) == 4096
    assert graph_calls(512 * 1024, L2, 0.025) == 241   # each call its own set: 2 L2s of sets, the longer ask
    assert graph_calls(512 * 1024, L2, 0.001) == 2000  # 2 ms of 1 us calls


def test_rounds_alternate_so_no_kernel_always_goes_first_or_last():
    orders = round_orders(["candidate", "seed", "parent"], 6)
    assert orders[0] == ["candidate", "seed", "parent"] and orders[1] == ["parent", "seed", "candidate"]
    assert round_orders(["a", "b"], 4) == [["a", "b"], ["b", "a"], ["b", "a"], ["a", "b"]]
    for name in ("candidate", "seed", "parent"):
        assert sum(o[0] == name for o in orders) == 2 and sum(o[-1] == name for o in orders) == 2
    follows = {(o[i], o[i + 1]) for o in orders for i in range(2)}
    assert len(follows) == 6  # every ordered pair occurs: each kernel follows each other from both sides


def test_measure_cell_reports_the_kernel_and_the_launch_overhead_apart():
    gpu = FakeGPU({"candidate": 4.0, "seed": 8.0}, launch_us=20.0)
    m = measure_cell(gpu, kernels("candidate", "seed"), sets=[None] * 300, set_bytes=512 * 1024, l2_bytes=L2,
                     rounds=5)
    assert isinstance(m, CellMeasurement)
    assert m.calls == 300 and gpu.captured == {"candidate": (300, 300), "seed": (300, 300)}
    assert m.l2_cold  # 300 x 512 KiB > 2 x 60 MiB
    # at least MIN_SAMPLES replays per kernel although only 5 rounds were asked for
    assert all(len(v) == MIN_SAMPLES for v in m.samples_ms.values())
    assert m.samples_ms["candidate"][0] == pytest.approx(0.004) and m.samples_ms["seed"][0] == pytest.approx(0.008)
    # eager calls are host-bound at 20 us: 16 and 12 us of it are launch, not kernel
    assert m.launch_overhead_us == pytest.approx({"candidate": 16.0, "seed": 12.0})
    assert gpu.replayed[:4] == ["candidate", "seed", "seed", "candidate"]
    assert m.clocks_before == m.clocks_after == {"sm_mhz": 1980} and gpu.clock_reads == 2


def test_fake_noise_gives_the_true_speedup_within_the_spread():
    gpu = FakeGPU({"candidate": 6.0, "seed": 9.0, "parent": 7.5}, launch_us=3.0, jitter=0.05, seed=3)
    m = measure_cell(gpu, kernels("candidate", "seed", "parent"), sets=[None] * 8, set_bytes=64 * 1024**2,
                     l2_bytes=L2, rounds=30)
    assert len(m.samples_ms["seed"]) == 30
    s, c = stats(m.samples_ms["seed"]), stats(m.samples_ms["candidate"])
    assert s.median_ms / c.median_ms == pytest.approx(1.5, rel=0.05)
    assert m.launch_overhead_us["candidate"] == pytest.approx(0.0, abs=0.5)  # kernel-bound: no overhead to see


def test_hooks_refill_before_every_replay_and_see_every_replay():
    gpu = FakeGPU({"candidate": 2.0, "seed": 3.0}, launch_us=1.0)
    events = []
    m = measure_cell(gpu, kernels("candidate", "seed"), sets=[None] * 3, set_bytes=1024, l2_bytes=L2, rounds=4,
                     before=lambda name, r: events.append(("fill", name, r)),
                     after_replay=lambda name, r, outs: events.append(("replayed", name, r, outs)),
                     finish=lambda replay: events.append(("finish", replay("seed"))),
                     min_samples=4)
    assert m.calls == 3 and all(len(v) == 4 for v in m.samples_ms.values())  # min_samples lowers the floor
    fills = [e for e in events if e[0] == "fill"]
    assert len(fills) == 8 and [e[2] for e in fills] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert events[:4] == [("fill", "candidate", 0), ("replayed", "candidate", 0, ["candidate"] * 3),
                          ("fill", "seed", 0), ("replayed", "seed", 0, ["seed"] * 3)]
    assert events[-1] == ("finish", ["seed"] * 3)                # one more replay, after everything timed
    assert gpu.replayed[-1] == "seed" and len(gpu.replayed) == 9
    assert all(len(v) == 4 for v in m.samples_ms.values())      # and not among the samples


def test_each_kernel_may_have_sets_of_its_own():
    seen = {}

    class Sets(FakeGPU):
        def capture(self, fn, sets, calls):
            seen[fn(None)] = sets
            return super().capture(fn, sets, calls)

        def eager_ms(self, fn, sets, calls):
            assert sets is seen[fn(None)]                         # eager calls on the kernel's own sets too
            return super().eager_ms(fn, sets, calls)

    gpu = Sets({"candidate": 2.0, "seed": 3.0}, launch_us=1.0)
    own = {"candidate": ["c"] * 4, "seed": ["s"] * 4}
    m = measure_cell(gpu, kernels("candidate", "seed"), sets=own, set_bytes=1024, l2_bytes=L2, rounds=2)
    assert seen == own and m.calls == m.input_sets == 4


def test_a_small_rotation_is_not_called_cold():
    gpu = FakeGPU({"candidate": 1.0}, launch_us=1.0)
    m = measure_cell(gpu, kernels("candidate"), sets=[None] * 2, set_bytes=1024, l2_bytes=L2, rounds=1)
    assert not m.l2_cold


def test_tensor_bytes_counts_nested_tensors():
    x = torch.empty(4, 8, dtype=torch.bfloat16)
    assert tensor_bytes([x, (torch.empty(3, dtype=torch.int64),), {"w": torch.empty(2)}, 1.0]) == 64 + 24 + 8


def _verdict(ceilings):
    row = {"name": "prefill", "shape": "M=8192, N=4096, bfloat16", "weight": 1.0, "speedup": 1.25, "noise": 0.01,
           "seed": {"median_ms": 0.05, "iqr_ms": 0.0, "min_ms": 0.05, "n": 20},
           "candidate": {"median_ms": 0.04, "iqr_ms": 0.0, "min_ms": 0.04, "n": 20},
           "device": {"bytes": 128 * 10**6, "launch_overhead_us": {"candidate": 3.5, "seed": 3.0}}}
    return Verdict(Outcome.PASSED, None, speedup=1.25, noise=0.01, timer="cuda graph replay", timing=[row],
                   ceilings=ceilings)


def _render(table) -> str:
    out = Console(width=240, file=io.StringIO(), color_system=None)
    out.print(table)
    return out.file.getvalue()


def test_eval_table_shows_microseconds_launch_and_share_of_the_copy_ceiling():
    text = _render(eval_commands.timing_table(_verdict({"copy_gbps": 4000.0, "bf16_tflops": 780.0})))
    for needle in ("seed us", "candidate us", "launch us", "% of copy", "50.0", "40.0", "3.5", "3200", "80%"):
        assert needle in text, needle
    text = _render(eval_commands.timing_table(_verdict(None)))
    assert "% of copy" not in text and "3200" in text
    cpu = _verdict(None)
    del cpu.timing[0]["device"]
    text = _render(eval_commands.timing_table(cpu))  # the interpreter's clock: no device columns
    assert "candidate us" in text and "launch us" not in text and "GB/s" not in text


def test_eval_table_shows_tflops_where_the_spec_gives_flops():
    v = _verdict({"copy_gbps": 4000.0, "bf16_tflops": 800.0})
    v.timing[0]["device"]["flops"] = 2 * 16 * 10**12 // 1000  # 32 GFLOP in 40 us: 800 TFLOP/s
    text = _render(eval_commands.timing_table(v))
    assert "TFLOP/s" in text and "% of mm" in text and "800.0" in text and "100%" in text
    text = _render(eval_commands.timing_table(_verdict(None)))
    assert "TFLOP/s" not in text  # no flops given: no column


def test_samples_feed_the_existing_statistics():
    gpu = FakeGPU({"candidate": 5.0, "seed": 10.0}, launch_us=1.0)
    m = measure_cell(gpu, kernels("candidate", "seed"), sets=[None] * 4, set_bytes=10**8, l2_bytes=L2, rounds=3)
    from tik_agent.judge.timing import CellTiming

    cell = CellTiming("c", "s", 1.0, stats(m.samples_ms["seed"]), stats(m.samples_ms["candidate"]))
    assert weighted_speedup([cell]) == pytest.approx(2.0)
