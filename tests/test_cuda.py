"""The CUDA path: device timing and evaluation on a real GPU (skipped without one)."""

import pytest

pytestmark = pytest.mark.cuda


def test_cuda_event_timer_measures_and_returns():
    import torch

    from tik_agent.backends.cuda import CudaEventTimer

    timer = CudaEventTimer(flush_bytes=1 << 20)
    x = torch.randn(1024, 1024, device="cuda")
    ms, out = timer.measure(lambda: x @ x)
    assert ms > 0 and out.shape == (1024, 1024)


@pytest.mark.parametrize("name", ["rmsnorm", "logprobs", "matmul", "add_rmsnorm", "attention"])
def test_seed_against_itself_on_cuda(name):
    from tik_agent.judge.evaluate import evaluate
    from tik_agent.judge.options import EvalOptions
    from tik_agent.spec.seeds import resolve

    spec = resolve(name)
    verdict = evaluate(spec, spec.source, EvalOptions(device="cuda", rounds=5, memory_bytes=None))
    assert verdict.passed, verdict.reason
    assert verdict.environment["device"] == "cuda" and verdict.environment["driver"]
    # the graph replays decide: per-call samples of at least MIN_SAMPLES replays, each call its own inputs
    assert verdict.timer.startswith("cuda graph replay"), verdict.timer
    assert all(row["candidate"]["n"] >= 20 and row["device"]["calls"] >= 2 for row in verdict.timing)


def test_batch_variant_candidate_is_caught_on_cuda(tmp_path):
    from tik_agent.judge.evaluate import evaluate
    from tik_agent.judge.options import EvalOptions
    from tik_agent.outcomes import Outcome
    from tik_agent.spec.seeds import resolve

    spec = resolve("rmsnorm")
    cand = tmp_path / "cand.py"
    cand.write_text(spec.source.read_text().replace("        BLOCK_N=BLOCK_N,", "        BLOCK_N=BLOCK_N if M > 2 else 128,"))
    verdict = evaluate(spec, cand, EvalOptions(device="cuda", rounds=2, memory_bytes=None))
    assert verdict.outcome is Outcome.PARITY_FAILED


def test_graph_replay_timer_on_the_device():
    import torch

    from tik_agent.backends.graph_timer import MIN_SAMPLES, TorchGraphBackend, measure_cell

    x = [torch.randn(256, 4096, device="cuda") for _ in range(4)]
    m = measure_cell(TorchGraphBackend(), {"a": lambda s: s * 2.0, "b": lambda s: s + 1.0}, x,
                     x[0].numel() * 4 * 2, 60 * 1024**2, 3)
    assert all(len(v) == MIN_SAMPLES and min(v) > 0 for v in m.samples_ms.values())
    assert m.launch_overhead_us["a"] > -5.0  # eager calls cannot be much faster than their replay
