"""The pieces of the timed-call judge that need no worker: the secret plan, the
literal reader, the timed-call verdicts, the above-grid cases and the per-phase watchdog."""

import os
import random
import sys
import time

import pytest

from tik_agent.judge.literals import batch_sizes_around, compared_literals, untestable_literal
from tik_agent.judge.phases import PhaseWatch, read_phase
from tik_agent.judge.plan import draw_plan, drawn_cases
from tik_agent.outcomes import Outcome
from tik_agent.judge.timedcheck import judge_timed_calls
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment
from tik_agent.spec import seeds
from tik_agent.spec.cases import above_grid_sizes, largest_batch, rows_alone, subbatches
from tik_agent.spec.grid import evaluation_cases


@pytest.mark.parametrize("name", ["rmsnorm", "logprobs", "matmul"])
def test_every_bundled_seed_is_checked_above_its_largest_batch(name):
    spec = seeds.resolve(name)
    above = [c for c in evaluation_cases(spec, "cpu") if c.origin == "above-grid"]
    assert {65, 128, 257} <= {c.m for c in above}
    assert all(c.m > largest_batch(spec, "cpu") for c in above)
    for case in above:
        rows = rows_alone(case)
        assert case.invariance and rows[0] == 0 and rows[-1] == case.m - 1 and len(rows) <= 8
        kinds = [s.prefix for s in subbatches(case)]
        assert kinds == [False, True]  # a random sub-batch and a prefix view
    assert above_grid_sizes(spec, "cuda")[0] == largest_batch(spec, "cuda") + 1


def test_sequence_seeds_get_one_size_above_their_largest_batch_on_the_cpu():
    spec = seeds.resolve("attention")
    top = largest_batch(spec, "cpu")
    assert above_grid_sizes(spec, "cpu") == [top + 1]
    assert {c.m for c in drawn_cases(spec, "cpu")} <= set(range(1, top + 2))
    assert above_grid_sizes(spec, "cuda")[0] == largest_batch(spec, "cuda") + 1  # the GPU keeps the relative rule


def test_plans_differ_between_evaluations_and_never_reuse_an_input():
    spec = seeds.resolve("rmsnorm")
    plans = [draw_plan(spec, "cpu", 5, 1, ["candidate", "seed"]) for _ in range(8)]
    assert {p.warmup for p in plans} <= {0, 1}  # on the CPU: warmup or one fewer
    assert {draw_plan(spec, "cuda", 5, 1, ["candidate", "seed"]).warmup for _ in range(8)} <= {1, 2}
    assert len({tuple(sorted(p.recheck_at.items())) for p in plans}) > 1
    for plan in plans:
        all_seeds = [s for cell in plan.seeds.values() for k in cell.values() for s in k]
        assert len(all_seeds) == len(set(all_seeds))
        for cell, per_kernel in plan.seeds.items():
            slots = plan.slots(cell)
            assert len(per_kernel["candidate"]) == len(slots) == plan.warmup + plan.rounds + 1
            assert [s.kind for s in slots].count("timed") == plan.rounds
            assert len(per_kernel["seed"]) == plan.warmup + plan.rounds


def test_drawn_cases_are_inside_and_above_the_grid():
    spec = seeds.resolve("rmsnorm")
    top = largest_batch(spec, "cpu")
    inside, above = drawn_cases(spec, "cpu", random.Random(1))
    assert 2 <= inside.m <= top and inside.m not in spec.parity.batch_sizes
    assert top < above.m <= 2 * top and inside.hidden and above.invariance
    assert {c.id for c in drawn_cases(spec, "cpu", random.Random(2))} != {inside.id, above.id}


def test_literals_compared_with_sizes_are_found_through_names_and_arithmetic():
    source = (
        "LIMIT = 2 * 32\n"
        "def f(x, M, n_rows):\n"
        "    if M > LIMIT: pass\n"
        "    if x.shape[0] >= 4096: pass\n"
        "    if n_rows in (3, 5): pass\n"
        "    if M % 97 == 40: pass\n"
        "    y = 12345\n"  # not in a comparison: no cases
    )
    values = {lit.value for lit in compared_literals(source)}
    assert values == {64, 4096, 3, 5, 97, 40}
    assert {63, 64, 65, 4095, 4097, 96, 98} <= set(batch_sizes_around(compared_literals(source)))
    assert untestable_literal(compared_literals(source), "cpu") is None
    line, message = untestable_literal(compared_literals("def f(M):\n    return M > 10 ** 6\n"), "cpu")
    assert line == 2 and "1000000" in message
    assert compared_literals("def f(M):\n    return min(M, 64)\n") == []  # negative control


def test_literals_reach_comparisons_through_every_binding_of_a_name():
    """Numbers that never appear in the comparison itself (found by the red team: each
    of these let a chunk switch at 300 rows pass a CPU evaluation)."""
    routes = {
        "kernel keyword": "def k(M, SWITCH):\n    if M >= SWITCH: pass\ndef f(M):\n    k[(1,)](M, SWITCH=300)\n",
        "kernel default": "def k(M, SWITCH=300):\n    if M >= SWITCH: pass\n",
        "positional": "def k(M, SWITCH):\n    if M >= SWITCH: pass\ndef f(M):\n    k[(1,)](M, 300)\n",
        "assigned twice": "LIMIT = 1\nLIMIT = 300\ndef f(M):\n    return M >= LIMIT\n",
        "unpacked": "A, LIMIT = 1, 300\ndef f(M):\n    return M >= LIMIT\n",
        "augmented": "LIMIT = 100\nLIMIT += 200\ndef f(M):\n    return M >= LIMIT\n",
        "local": "def f(M):\n    limit = 150 * 2\n    return M >= limit\n",
        "loop target": "def f(M):\n    for limit in (300,):\n        if M >= limit: pass\n",
        "helper return": "def _limit():\n    return 300\ndef f(M):\n    return M >= _limit()\n",
    }
    for route, source in routes.items():
        assert 300 in {lit.value for lit in compared_literals(source)}, route
    # Names bound to non-constants, and numbers that reach no comparison, add nothing.
    assert compared_literals("def f(x, M):\n    n = x.shape[1]\n    k[(1,)](M, n, BLOCK=300)\n") == []
    assert compared_literals("def f(M, N=N):\n    return M > N\n") == []


def _calls(n, out="o", inputs="i", launches=None):
    return [{"kind": "timed", "out": out, "inputs": inputs, "launches": launches or {"/k.py": 1}} for _ in range(n)]


def test_timed_calls_are_judged_one_by_one(tmp_path):
    spec = seeds.resolve("rmsnorm")
    plan = draw_plan(spec, "cpu", 3, 1, ["candidate", "seed"], random.Random(0))
    kernel = tmp_path / "k.py"
    own = str(kernel.resolve())
    seed = {cell: [{"out": "o", "inputs": "i"}] * len(plan.slots(cell)) for cell in plan.seeds}
    good = {cell: _calls(len(plan.slots(cell)), launches={own: 1}) for cell in plan.seeds}
    assert judge_timed_calls(plan, good, seed, kernel) is None

    cell = next(iter(plan.seeds))
    bad = {c: [dict(x) for x in v] for c, v in good.items()}
    k = next(s.index for s in plan.slots(cell) if s.kind == "timed")
    bad[cell][k - 1]["out"] = "poison"
    failure = judge_timed_calls(plan, bad, seed, kernel)
    assert failure.outcome is Outcome.INTEGRITY_FAILED and failure.call == k
    assert f"timed call {k} of cell {cell}" in failure.reason and "differs from the seed" in failure.reason

    for row in bad[cell]:
        row["out"] = "other"
    failure = judge_timed_calls(plan, bad, seed, kernel)
    assert failure.outcome is Outcome.PARITY_FAILED and "[parity] all" in failure.reason

    bad = {c: [dict(x) for x in v] for c, v in good.items()}
    bad[cell][0]["launches"] = {own: 1, "/elsewhere.py": 1}
    assert "[launch]" in judge_timed_calls(plan, bad, seed, kernel).reason
    bad[cell][0]["launches"] = {}
    assert "[launch]" in judge_timed_calls(plan, bad, seed, kernel).reason
    bad[cell][0] = dict(good[cell][0], inputs="changed")
    assert "[inputs]" in judge_timed_calls(plan, bad, seed, kernel).reason
    bad[cell] = bad[cell][:-1]
    assert "[calls]" in judge_timed_calls(plan, bad, seed, kernel).reason


def test_phase_watch_moves_forward_only_and_names_the_phase(tmp_path):
    progress = tmp_path / "progress"
    watch = PhaseWatch(progress, {"load": 100.0, "parity": 0.2, "timing": 100.0}, "test")
    assert watch() is None and watch.phase == "load"
    progress.write_text("parity\n")
    assert watch() is None and watch.phase == "parity"
    progress.write_text("load\n")  # a candidate rewinding the file buys nothing
    watch()
    assert watch.phase == "parity"
    time.sleep(0.3)
    assert "the parity phase ran past its 0.2 s limit" in watch()
    assert watch.total() == pytest.approx(200.2)


def test_progress_file_is_read_without_following_links_or_blocking(tmp_path):
    (tmp_path / "real").write_text("timing\n")
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    assert read_phase(tmp_path / "real") == "timing"
    assert read_phase(tmp_path / "link") is None
    assert read_phase(tmp_path / "fifo") is None
    (tmp_path / "junk").write_text("nonsense")
    assert read_phase(tmp_path / "junk") is None


def test_watchdog_kills_the_child_and_says_why(tmp_path):
    asked = []

    def watchdog():
        asked.append(time.monotonic())
        return "enough" if len(asked) >= 3 else None

    start = time.monotonic()
    result = run_sandboxed([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path,
                           SandboxLimits(wall_seconds=60), scrubbed_environment(workdir=tmp_path), watchdog=watchdog)
    assert result.timed_out and result.watchdog_reason == "enough"
    assert time.monotonic() - start < 20
    quiet = run_sandboxed([sys.executable, "-c", "pass"], tmp_path, SandboxLimits(wall_seconds=60),
                          scrubbed_environment(workdir=tmp_path), watchdog=lambda: None)
    assert quiet.ok and quiet.watchdog_reason is None


def test_phase_limits_follow_the_seed_and_the_machine_load():
    from tik_agent.judge.phases import phase_limits as _phase_limits
    from tik_agent.judge.options import EvalOptions, Reference

    ref = Reference({}, {}, "", [], {"load": 2.0, "parity": 20.0})
    quiet = _phase_limits(EvalOptions(), ref, {"load": 2.0, "parity": 3.0, "digests": 30.0}, 2)
    assert quiet == {"load": 60.0, "parity": 115.0, "survey": 300.0, "timing": 300.0, "recheck": 150.0}
    loaded = _phase_limits(EvalOptions(), ref, {"load": 6.0, "parity": 3.0, "digests": 30.0}, 2)
    assert loaded["parity"] == 5 * (20.0 * 3 + 3.0)  # start-up 3x slower than when the reference was made
    assert _phase_limits(EvalOptions(timeout_s=30), ref, {}, 2) == {}  # --timeout: one fixed limit instead
    assert _phase_limits(EvalOptions(), Reference({}, {}, "", [], {}), {}, 2)["parity"] == 900.0  # unmeasured


def test_sequence_seeds_on_the_cpu_leave_literal_sizes_above_the_cap_to_a_gpu():
    from tik_agent.judge.plan import literal_sizes
    from tik_agent.spec.cases import largest_batch
    from tik_agent.spec.seeds import resolve

    attention, rmsnorm = resolve("attention"), resolve("rmsnorm")
    cap = largest_batch(attention, "cpu") + 1
    sizes = [1, 2, cap, cap + 1, 63, 64, 65, 129]
    assert literal_sizes(attention, "cpu", sizes) == [1, 2, cap]
    assert literal_sizes(attention, "cuda", sizes) == sizes   # a GPU runs them all
    assert literal_sizes(rmsnorm, "cpu", sizes) == sizes      # rows: a batch entry is a row, cheap
