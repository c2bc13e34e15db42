"""The graph phase gives the candidate no answer within reach (issue 21, item 6).

Every kernel of the graph phase runs in the candidate's process, where a kernel
body can turn a pointer into an integer and read any buffer.  These tests run
the phase itself (:func:`tik_agent.sandbox.graphs.graph_phase`, with the CPU's
eager stand-in for graphs) on stand-in kernels in plain torch, the host-ops mode
lifted, so that a spy in the candidate's place can look, at every call, at
everything the other kernels were given and returned; and they drive the data
schedule (:class:`tik_agent.sandbox.graph_rounds.CellRounds`) through every
round order directly.  No Triton kernel runs: a few seconds in all.
"""

from __future__ import annotations

import weakref

import pytest
import torch

from seedutil import small_rmsnorm
from tik_agent.backends.graph_timer import round_orders
from tik_agent.judge.graphcheck import judge_graph
from tik_agent.sandbox import graphs
from tik_agent.sandbox.graph_rounds import CANDIDATE, SEED, CellRounds
from tik_agent.spec.schema import load_spec

ROUNDS = 8
CHECKED = [1, 4]
CALLS = graphs.REHEARSAL_CALLS  # what the seed's worker chooses on the CPU


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return load_spec(small_rmsnorm(tmp_path_factory.mktemp("seed")))


def _rmsnorm_stand_in(x, w, eps=1e-6):
    return x * w + eps


class Recorder:
    """A kernel other than the candidate: remembers every input it was given (by address) and
    keeps a weak reference to every output it returned."""

    def __init__(self):
        self.inputs: set[int] = set()
        self.outputs: list[weakref.ref] = []

    def __call__(self, x, w, eps=1e-6):
        self.inputs.update({x.data_ptr(), w.data_ptr()})
        out = _rmsnorm_stand_in(x, w, eps)
        self.outputs.append(weakref.ref(out))
        return out


class Spy:
    """The candidate: before it answers, it looks for its answer in every output of the other
    kernels still alive, as a kernel body that reads another buffer would.  With ``wrong_at``,
    its answer to that one call is off by one ulp (the negative control)."""

    def __init__(self, others: list[Recorder], wrong_at: int | None = None):
        self.others, self.wrong_at = others, wrong_at
        self.inputs: set[int] = set()
        self.calls = 0
        self.answers_in_reach = 0

    def __call__(self, x, w, eps=1e-6):
        self.inputs.update({x.data_ptr(), w.data_ptr()})
        answer = _rmsnorm_stand_in(x, w, eps)
        live = [o for r in self.others for o in (ref() for ref in r.outputs) if o is not None]
        self.answers_in_reach += sum(o.shape == answer.shape and torch.equal(o, answer) for o in live)
        if self.calls == self.wrong_at:
            answer = torch.nextafter(answer, torch.full_like(answer, float("inf")))
        self.calls += 1
        return answer


def _phase(spec, monkeypatch, wrong_at: int | None = None):
    monkeypatch.setattr(graphs, "_watched", lambda fn, kwargs, seen, poison: (lambda inputs: fn(*inputs, **kwargs)))
    seed, parent = Recorder(), Recorder()
    spy = Spy([seed, parent], wrong_at)
    cell = spec.workload_for("cpu")[0].name
    plan = {cell: {"base": 5, "fill": [101 + r for r in range(ROUNDS)], "checked": CHECKED}}
    result = graphs.graph_phase(spec, "cpu", {"candidate": spy, "seed": seed, "parent": parent}, plan,
                                {cell: CALLS}, lambda phase: None)
    return result, plan, cell, spy, seed, parent


def test_no_output_of_another_kernel_holds_the_candidates_answer(spec, monkeypatch):
    """Before the fix every kernel of a round replayed on the same inputs: in every round the
    seed went first, its outputs held the candidate's answer (and the parent's did too)."""
    result, plan, cell, spy, seed, parent = _phase(spec, monkeypatch)
    assert spy.calls >= CALLS * (ROUNDS + 1)          # captured, then replayed every round
    assert spy.answers_in_reach == 0
    assert spy.inputs.isdisjoint(seed.inputs) and spy.inputs.isdisjoint(parent.inputs)  # sets of its own
    assert seed.inputs.isdisjoint(parent.inputs)
    assert result["mismatch"][cell] is None and len(result["samples"][cell]["seed"]) == ROUNDS


def test_the_digested_rounds_of_candidate_and_seed_match_the_seeds_own_worker(spec, monkeypatch):
    result, plan, cell, *_ = _phase(spec, monkeypatch)
    reference = graphs.reference(spec, "cpu", _rmsnorm_stand_in, plan)  # what the seed's worker computes
    checked = result["checked"][cell]
    assert sorted(checked) == [str(r) for r in CHECKED]
    for r in CHECKED:
        want = reference[cell]["digests"][str(r)]
        assert checked[str(r)]["out"] == want and checked[str(r)]["seed_out"] == want
        assert checked[str(r)]["inputs_changed"] is None
    assert judge_graph(plan, dict(result, launches={cell: {"/k.py": 1}}), reference, "/k.py") is None


@pytest.mark.parametrize("wrong_round", [0, 1, 2, 5, ROUNDS - 1])
def test_every_round_is_still_compared_with_the_seed(spec, monkeypatch, wrong_round):
    """Negative control: an answer wrong in one call of one round is found, whichever round
    (the last one is compared only in the seed's untimed replay after the rounds)."""
    result, plan, cell, *_ = _phase(spec, monkeypatch, wrong_at=CALLS * (wrong_round + 1) + 1)
    assert result["mismatch"][cell] == [wrong_round, 1]


def test_judge_graph_fails_the_seed_graph_that_differs_from_the_seeds_own_worker():
    plan = {"small": {"base": 1, "fill": [11, 12], "checked": [1]}}
    seed_side = {"small": {"calls": 2, "digests": {"1": ["a", "b"]}}}
    got = {"calls": {"small": 2}, "launches": {"small": {"/k.py": 2}}, "mismatch": {"small": None},
           "checked": {"small": {"1": {"out": ["a", "b"], "inputs_changed": None, "seed_out": ["a", "x"]}}}}
    failed = judge_graph(plan, got, seed_side, "/k.py")
    assert failed is not None and failed.reason.startswith("graphs:small: [seed]") and "call 2" in failed.reason
    got["checked"]["small"]["1"]["seed_out"] = []
    assert "[seed] the worker reported 0 digests" in judge_graph(plan, got, seed_side, "/k.py").reason
    got["checked"]["small"]["1"]["seed_out"] = ["a", "b"]
    assert judge_graph(plan, got, seed_side, "/k.py") is None  # negative control


class _Slots:
    """Input slots that only remember which data they were filled with."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def fill(self, seed: int) -> None:
        self.log.append((self.name, seed))

    def reset(self) -> None:
        self.log.append((self.name, None))

    def changed(self, seed: int):
        return None


@pytest.mark.parametrize("names", [["candidate", "seed"], ["candidate", "seed", "parent"]])
@pytest.mark.parametrize("rounds", [1, 2, 5, 20])
def test_the_schedule_never_lets_another_kernel_overtake_the_candidate(names, rounds):
    """Through every round order: when the candidate is filled with round r's data, no other kernel
    has had it; each other kernel has every round the candidate had, once, in order (the seed
    after the last round at the latest), and repeats a round only where it would overtake."""
    fill = [1000 + r for r in range(rounds)]
    log: list = []
    cell = CellRounds({n: _Slots(log, n) for n in names}, fill, checked=[])
    seen: dict[str, list] = {n: [] for n in names}
    for r, order in enumerate(round_orders(names, rounds)):
        for name in order:
            cell.before(name, r)
            kernel, data = log[-1]
            assert kernel == name
            if name == CANDIDATE:
                assert data == fill[r] and all(data not in seen[n] for n in names if n != CANDIDATE)
            else:
                assert data in seen[CANDIDATE] or data is None
            seen[name].append(data)
            cell.after_replay(name, r, [torch.zeros(1)])
    cell.finish(lambda name: [torch.zeros(1)])
    assert cell.mismatch is None and not cell.kept
    seed_rounds = [d for n, d in log if n == SEED]
    assert sorted(set(seed_rounds)) == fill and seed_rounds == sorted(seed_rounds)  # all, in order
    assert len(seed_rounds) - len(fill) <= 2  # at most the repeats the round orders force
    for name in names[2:]:
        assert len(set(seen[name])) >= rounds - 2 and seen[name] == sorted(seen[name])


def test_the_launch_overhead_is_timed_on_calls_outside_the_harness_wrapping(spec):
    """The eager calls that measure launch overhead are the kernel as a user calls it, outside
    the host-ops mode's dispatch (issue 22, item 6); every other call of the phase is inside it
    (the control, counted in the same run)."""
    from tik_agent.backends.graph_timer import EAGER_REPEATS
    from tik_agent.sandbox import hostops

    seen: dict[str, list[bool]] = {"candidate": [], "seed": []}

    def kernel(name):
        def call(x, w, eps=1e-6):
            seen[name].append(hostops._STATE.watching > 0)
            with hostops.exempt():
                return _rmsnorm_stand_in(x, w, eps)
        return call

    cell = spec.workload_for("cpu")[0].name
    plan = {cell: {"base": 5, "fill": [101 + r for r in range(ROUNDS)], "checked": CHECKED}}
    graphs.graph_phase(spec, "cpu", {"candidate": kernel("candidate"), "seed": kernel("seed")}, plan,
                       {cell: CALLS}, lambda phase: None)
    for name, wrapped in seen.items():
        assert wrapped.count(False) == EAGER_REPEATS * CALLS, name   # the overhead's calls, bare
        assert wrapped.count(True) >= CALLS * (ROUNDS + 1), name     # captured and replayed, watched
