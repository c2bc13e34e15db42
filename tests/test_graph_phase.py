"""The graph phase: the replays that decide a speedup on cuda, and their checks.

On the CPU the phase runs with the eager stand-in for CUDA graphs (the GPU
check's rehearsal does the same), so everything but the device is exercised:
input slots refilled before every replay, every replay compared in bits with the
seed graph's, digested replays against the seed's own worker, launches recorded
under capture, and the verdict's timing taken from the replays.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seedutil import small_rmsnorm
from shared import cached_reference
from tik_agent.backends.graph_sets import InputSlots, same_bits
from tik_agent.backends.graph_timer import graph_calls
from tik_agent.judge.evaluate import evaluate_sandboxed
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.graphcheck import judge_graph
from tik_agent.judge.plan import draw_plan
from tik_agent.outcomes import Outcome
from tik_agent.sandbox.graphs import REHEARSAL_NAME
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

CORPUS = Path(__file__).parent / "adversarial" / "runtime"
KERNEL = Path("/sandbox/candidate.py")


def _base():
    return [torch.randn(3, 5, dtype=torch.bfloat16), torch.randint(0, 9, (3,)), torch.randn(5)]


def test_slots_are_separate_tensors_refilled_the_same_way_in_any_process():
    base = _base()
    a, b = InputSlots(base, 4), InputSlots(base, 4)
    a.fill(123)
    b.fill(123)
    ptrs = {t.data_ptr() for s in a.sets for t in s}
    assert len(ptrs) == 12 and all(t.storage_offset() == 0 for s in a.sets for t in s)
    for sa, sb in zip(a.sets, b.sets):
        assert all(same_bits(x, y) for x, y in zip(sa, sb))
    assert not same_bits(a.sets[0][0], a.sets[1][0])          # every call its own inputs
    assert all(torch.equal(s[1], base[1]) for s in a.sets)    # token ids stay the case's
    before = a.sets[2][0].clone()
    a.fill(124)
    assert not same_bits(before, a.sets[2][0])                # a new round, new floats
    assert a.changed(124) is None and a.changed(123) == 0


def test_a_changed_input_is_found_in_its_slot():
    slots = InputSlots(_base(), 5)
    slots.fill(7)
    slots.sets[3][2][1] += 1.0
    assert slots.changed(7) == 3
    slots.fill(7)
    slots.sets[4][1][0] += 1                                   # a non-float input counts as well
    assert slots.changed(7) == 4


def test_same_bits_tells_signed_zeros_and_strides_apart():
    z = torch.zeros(4)
    assert same_bits((z, z), (z.clone(), z.clone()))
    assert not same_bits(z, -z) and not same_bits(z, z.view(2, 2))
    assert not same_bits(torch.zeros(2, 3).t(), torch.zeros(3, 2)) and not same_bits(z, "z")


def test_calls_per_graph_stay_within_memory_and_cover_the_l2():
    l2 = 50 * 1024**2
    assert graph_calls(40 * 1024, l2, 0.004) * 40 * 1024 > 2 * l2  # small sets: enough to leave L2 cold
    assert graph_calls(64 * 1024**2, l2, 3.0) == 3
    assert graph_calls(3 * 1024**3, l2, 10.0) == 2                   # at least two, whatever the size


def _plan_graph():
    return {"small": {"base": 1, "fill": [11, 12, 13], "checked": [0, 2]}}


def _report(**over):
    got = {"calls": {"small": 2}, "launches": {"small": {str(KERNEL): 12}}, "mismatch": {"small": None},
           "checked": {"small": {"0": {"out": ["a", "b"], "inputs_changed": None, "seed_out": ["a", "b"]},
                                 "2": {"out": ["c", "d"], "inputs_changed": None, "seed_out": ["c", "d"]}}}}
    for key, value in over.items():
        got[key] = {"small": value}
    return got


SEED_SIDE = {"small": {"calls": 2, "digests": {"0": ["a", "b"], "2": ["c", "d"]}}}


@pytest.mark.parametrize("over, needle", [
    ({}, None),
    ({"calls": 3}, "[graph] the worker captured 3 calls"),
    ({"launches": {"/elsewhere/seed_kernel.py": 4, str(KERNEL): 4}}, "[launch] the captured calls launched kernels"),
    ({"launches": {}}, "[launch] the captured calls launched no Triton kernel"),
    ({"mismatch": [1, 0]}, "[replay] replay 2, call 1 differs in bits from the seed graph's"),
    ({"checked": {"0": {"out": ["a", "b"], "inputs_changed": None, "seed_out": ["a", "b"]}}},
     "kept no digests of replay 3"),
    ({"checked": {"0": {"out": ["a", "b"], "inputs_changed": 1, "seed_out": ["a", "b"]},
                  "2": {"out": ["c", "d"], "inputs_changed": None, "seed_out": ["c", "d"]}}},
     "[inputs] replay 1 changed the inputs of call 2"),
    ({"checked": {"0": {"out": ["a", "b"], "inputs_changed": None, "seed_out": ["a", "b"]},
                  "2": {"out": ["c", "x"], "inputs_changed": None, "seed_out": ["c", "d"]}}},
     "[replay] replay 3, call 2 differs from the seed's own worker"),
    ({"checked": {"0": {"out": ["a", "b"], "inputs_changed": None, "seed_out": ["a", "x"]},
                  "2": {"out": ["c", "d"], "inputs_changed": None, "seed_out": ["c", "d"]}}},
     "[seed] the seed graph's replay on the data of round 1, call 2, in the candidate's process differs"),
])
def test_judge_graph_names_each_failure(over, needle):
    failed = judge_graph(_plan_graph(), _report(**over), SEED_SIDE, KERNEL)
    if needle is None:
        assert failed is None
    else:
        assert failed is not None and failed.outcome is Outcome.INTEGRITY_FAILED and needle in failed.reason, failed


def test_the_plan_draws_graph_rounds_and_digested_rounds_secretly():
    spec = load_spec(small_rmsnorm_dir())
    a = draw_plan(spec, "cpu", 3, 1, ["candidate", "seed"], graph_rounds=20)
    b = draw_plan(spec, "cpu", 3, 1, ["candidate", "seed"], graph_rounds=20)
    g = a.graph["small"]
    assert len(g["fill"]) == 20 and len(set(g["fill"])) == 20 and len(g["checked"]) == 2
    assert a.graph != b.graph and "graph" in a.to_request()
    assert draw_plan(spec, "cpu", 3, 1, ["candidate", "seed"]).graph is None


_SEED_DIRS: list[Path] = []


def small_rmsnorm_dir() -> Path:
    if not _SEED_DIRS:
        import tempfile

        _SEED_DIRS.append(small_rmsnorm(Path(tempfile.mkdtemp(prefix="tik-graph-"))))
    return _SEED_DIRS[0]


@pytest.fixture(scope="module")
def spec():
    return load_spec(small_rmsnorm_dir())


@pytest.fixture(scope="module")
def reference(spec):
    return cached_reference(spec, EvalOptions(device="cpu", rounds=3))


# The survey is off here: this file proves the graph phase on its own.  Its corpus
# files tag every launch with a per-shape constexpr (a new compiled variant at each
# size), which the configuration survey refuses before any timing starts.
GRAPHS = EvalOptions(device="cpu", rounds=3, graphs=True, survey=False)


def test_the_seed_passes_and_its_speedup_comes_from_the_replays(spec, reference):
    """Negative control for the corpus file below, and the phase's record."""
    verdict = evaluate_sandboxed(spec, spec.source, GRAPHS, reference)
    # Parity, the per-call checks and every replay's hold; the seed's speed against itself on
    # a loaded CPU is noise (slower is judged only after the rest passed).
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    assert verdict.timer == REHEARSAL_NAME
    row = verdict.timing[0]
    assert row["device"]["calls"] == 2 and row["device"]["bytes"] > 0 and row["candidate"]["n"] == 3
    assert set(row["device"]["launch_overhead_us"]) == {"candidate", "seed"}


@pytest.mark.parametrize("name", ["replay_counter.py", "replay_shared_output.py"])
def test_a_kernel_that_changes_once_replayed_is_an_integrity_failure(spec, reference, name):
    verdict = evaluate_sandboxed(spec, CORPUS / name, GRAPHS, reference)
    assert verdict.outcome is Outcome.INTEGRITY_FAILED, verdict.reason
    assert verdict.reason.startswith("graphs:small: [replay]"), verdict.reason
    assert all(c["passed"] for c in verdict.cases) and verdict.speedup is None


def test_a_kernel_that_writes_its_inputs_once_replayed_is_caught(spec, reference):
    verdict = evaluate_sandboxed(spec, CORPUS / "replay_writes_input.py", GRAPHS, reference)
    assert verdict.outcome is Outcome.INTEGRITY_FAILED, verdict.reason
    assert verdict.reason.startswith(("graphs:small: [replay]", "graphs:small: [inputs]")), verdict.reason


def test_without_the_graph_phase_the_same_kernel_is_never_caught(spec, reference):
    """The cheat lives only in the graph phase: the per-call checks alone pass it."""
    verdict = evaluate_sandboxed(spec, CORPUS / "replay_counter.py", EvalOptions(device="cpu", rounds=3, survey=False),
                                 reference)
    # Parity and every per-call integrity check hold; its speed on a loaded CPU is noise.
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
