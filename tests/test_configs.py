"""The configuration survey's parts: the analysis on made-up records (tik_agent.judge.configs),
the record-only launches (tik_agent.sandbox.launches.surveying), and the survey of a real
launcher (tik_agent.sandbox.survey).  The whole evaluation is
tests/test_adversarial_configs.py."""

import json
import random

import pytest

from tik_agent.judge import configs
from tik_agent.judge.config_cases import CONFIG_CASES_MAX, CONFIG_ROWS, boundary_cases, judge_configurations
from tik_agent.outcomes import Outcome


def _axis(dim="M", low=1, exhaustive=200, high=200, beyond=()):
    return {"dim": dim, "m": 16, "dims": {"N": 64}, "dtype": "float32", "device": "cpu",
            "values": list(range(low, exhaustive + 1)) + list(beyond), "exhaustive": exhaustive, "high": high,
            "top": max([exhaustive, *beyond])}


def _structure(labels, kernel="f"):
    """A launch's structure as the worker writes it: the kernel, then one label per number."""
    return json.dumps([[[kernel, 1], *labels]])


def _lookup(numbers, labels=None, kernel=lambda v: "f"):
    def get(v):
        got = tuple(numbers(v))
        return _structure(labels or [f"n{i}" for i in range(len(got))], kernel(v)), got

    return get


def _cdiv(a, b):
    return -(-a // b)


def _pow2(v):
    return 1 << (v - 1).bit_length()


@pytest.mark.parametrize("numbers", [
    lambda v: (v, 64, v * 64),             # sizes and strides: affine, no switch
    lambda v: (7, 1024),                   # constants
])
def test_affine_and_constant_numbers_are_no_switch(numbers):
    assert configs.analyse(_axis(), _lookup(numbers)).boundaries == []


@pytest.mark.parametrize("numbers, first", [
    (lambda v: (_cdiv(v, 16),), 17),            # a cdiv grid: evenly spaced, the same step
    (lambda v: (_pow2(v),), 2),                 # a next_power_of_2 block: doubling
    (lambda v: (min(8, max(1, _pow2(v) // 16)),), 17),  # num_warps from the block, clamped
])
def test_a_regular_run_is_judged_at_its_first_change(numbers, first):
    found = configs.analyse(_axis(), _lookup(numbers))
    assert [b.value for b in found.boundaries] == [first]


def test_a_threshold_and_a_changed_kernel_are_judged_where_they_change():
    found = configs.analyse(_axis(), _lookup(lambda v: (1024 if v < 77 else 512,),
                                             kernel=lambda v: "a" if v < 150 else "b"))
    assert sorted(b.value for b in found.boundaries) == [77, 150]


def test_a_sparse_switch_is_refused_not_judged_size_by_size():
    found = configs.findings([_axis()], _record(_axis(), lambda v: (64 if v % 13 == 5 else 1024,)))
    assert found.refusal and "follow no rule" in found.refusal and "more than the 12" in found.refusal
    assert found.boundaries == []


def test_each_kernel_variant_is_judged_at_its_first_size():
    """Constexprs and options make another compiled kernel: each new value is judged,
    even inside a run (SPLIT = 1 + M // 50), and a return to a judged one is not again."""
    split = configs.analyse(_axis(), _lookup(lambda v: (1 + v // 50,), labels=["constexpr SPLIT"]))
    assert [b.value for b in split.boundaries] == [50, 100, 150, 200]
    sparse = configs.analyse(_axis(), _lookup(lambda v: (64 if v % 13 == 5 and v > 64 else 1024,),
                                              labels=["constexpr BLOCK"]))
    assert [b.value for b in sparse.boundaries] == [70]


def test_a_flat_cdiv_grid_is_judged_at_its_first_step():
    """cdiv(M * 1000, 1024): steps of one or two sizes, exactly a cdiv of the size."""
    found = configs.analyse(_axis(), _lookup(lambda v: (_cdiv(v * 1000, 1024),)))
    assert [b.value for b in found.boundaries] == [2]
    off = configs.analyse(_axis(), _lookup(lambda v: (_cdiv(v * 1000, 1024) - (v % 13 == 5),)))
    assert off.refusal and "follow no rule" in off.refusal   # one program short at sparse sizes: no rule


def test_a_launcher_that_raises_inside_the_domain_is_refused():
    found = configs.analyse(_axis(), lambda v: (json.dumps(["raised", "ValueError"]), ()) if v == 150
                            else _lookup(lambda v: (v,))(v))
    assert found.refusal == "the launcher raised ValueError at M = 150, inside the declared domain"


def test_past_the_exhaustive_range_a_run_is_predicted_and_a_change_located():
    beyond = (300, 511, 512, 513, 900, 1000)
    grid = _lookup(lambda v: (_cdiv(v, 16),))
    assert configs.analyse(_axis(beyond=beyond, high=1000), grid).boundaries == [configs.Boundary("M", 17, "n0 goes from 1 to 2")]
    switched = _lookup(lambda v: (_cdiv(v, 16), 1024 if v < 700 else 512))
    within = configs.analyse(_axis(beyond=beyond, high=1000), switched)
    # located by bisection between 513 and 900; the sizes after it are surveyed one by one and
    # judged as the exhaustive range is (the grid's run starts again there: 705)
    assert [b.value for b in within.boundaries] == [17, 700, 705]
    past = configs.analyse(_axis(beyond=beyond, high=200), switched)
    assert past.refusal and "M = 700" in past.refusal and "beyond the largest M this device judges (200)" in past.refusal
    twice = _lookup(lambda v: (_cdiv(v, 16), 1024 if v < 10000 else 512, 4 if v < 50000 else 8))
    later = configs.analyse(_axis(beyond=(5000, 20000, 40000, 60000, 90000), high=100000), twice)
    assert {17, 10000, 50000} <= {b.value for b in later.boundaries}   # the second change is found too


def _record(axis, numbers, drop=()):
    values = [v for v in axis["values"] if v not in drop]
    return {"structures": [_structure(["n0"])],
            "axes": [{"dim": axis["dim"], "points": [[v, 0, list(numbers(v))] for v in values]}]}


def test_the_parent_refuses_a_record_that_lacks_a_size_it_needs():
    axis = _axis(beyond=(300, 900), high=1000)
    numbers = lambda v: (1 if v < 700 else 2,)  # noqa: E731
    assert "did not report size" in configs.findings([axis], _record(axis, numbers)).refusal  # no bisection
    assert "did not report size 150" in configs.findings([axis], _record(axis, numbers, drop=(150,))).refusal
    assert "cannot be read" in configs.findings([axis], {"axes": "x"}).refusal


def test_boundary_cases_lie_on_both_sides_in_the_surveys_dims(tmp_path):
    from seedutil import small_rmsnorm
    from tik_agent.spec.schema import load_spec

    spec = load_spec(small_rmsnorm(tmp_path / "r"))
    plan = configs.survey_plan(spec, "cpu", random.Random(0))
    assert [a["dim"] for a in plan] == ["M", "N"] and plan[0]["exhaustive"] == 8193 and plan[1]["high"] == 8192
    assert plan[0]["values"][-1] == 1048576 and len(plan[0]["values"]) > 8193
    found = configs.Findings([configs.Boundary("M", 1000, ""), configs.Boundary("N", 3999, "")])
    cases = boundary_cases(spec, plan, found, 5)
    n, m = plan[0]["dims"]["N"], plan[1]["m"]
    assert n in spec.dims["N"] and configs.SURVEY_ROWS[0] <= m <= configs.SURVEY_ROWS[1]
    # At least CONFIG_ROWS rows a side: one case of 999 rows, ceil(128 / m) of m rows, each of its own data.
    copies = -(-CONFIG_ROWS["cpu"] // m)
    assert copies > 1
    assert [(c.m, c.dims["N"]) for c in cases] == [(999, n), (1000, n)] + [(m, 3998)] * copies + [(m, 3999)] * copies
    assert len({c.seed for c in cases}) == len(cases)
    assert all(c.origin == "config" and c.runs_once for c in cases)
    assert [c.id for c in cases] == [c.id for c in boundary_cases(spec, plan, found, 5)]



def test_a_gpu_boundary_at_one_row_takes_at_most_the_case_cap(tmp_path):
    """On a GPU a side needs 1024 rows: ceil(1024 / m) cases of the boundary's batch, capped
    at CONFIG_CASES_MAX (one-row batches), each with its own data."""
    from seedutil import small_rmsnorm
    from tik_agent.spec.schema import load_spec

    spec = load_spec(small_rmsnorm(tmp_path / "r"))
    plan = configs.survey_plan(spec, "cpu", random.Random(0))
    gpu = [dict(a, device="cuda") for a in plan]
    found = configs.Findings([configs.Boundary("M", 2, ""), configs.Boundary("M", 17, "")])
    cases = boundary_cases(spec, gpu, found, 5)
    per_batch = {m: sum(c.m == m for c in cases) for m in (1, 2, 16, 17)}
    assert per_batch == {1: CONFIG_CASES_MAX, 2: CONFIG_CASES_MAX, 16: -(-CONFIG_ROWS["cuda"] // 16),
                         17: -(-CONFIG_ROWS["cuda"] // 17)}
    assert len({c.seed for c in cases}) == len(cases)
    cpu = boundary_cases(spec, plan, found, 5)    # 128 rows: the cap is not reached on the CPU
    assert {m: sum(c.m == m for c in cpu) for m in (1, 2, 16, 17)} == {1: 128, 2: 64, 16: 8, 17: 8}

def test_the_seed_computes_far_cases_only_when_the_cases_before_them_hold(tmp_path, monkeypatch):
    """A candidate already caught at a boundary costs no seed work on its far point's (large)
    cases; one that holds there has them computed and appended last (the negative control)."""
    from types import SimpleNamespace

    from seedutil import small_rmsnorm
    from tik_agent.judge import config_cases
    from tik_agent.judge.joint_far import FAR
    from tik_agent.judge.joint_points import JointPoint
    from tik_agent.judge.records import Verdict
    from tik_agent.spec.schema import load_spec

    spec = load_spec(small_rmsnorm(tmp_path / "r"))
    plan = configs.survey_plan(spec, "cpu", random.Random(0))
    far = JointPoint(600, {"N": 3495}, f"{FAR} (from M = 600, N = 256) at M = 600, N = 3495")
    found = configs.Findings([configs.Boundary("M", 600, "")], joint=[far])
    monkeypatch.setattr(config_cases, "survey_findings", lambda survey, record: found)
    survey, result = {"axes": plan, "seed": 5}, {"survey": {}, "environment": {"machine": "here"}}

    def run(check_says):
        asked: list[list] = []

        def run_seed(new):
            asked.append([(c.m, c.dims["N"]) for c in new])
            return {c.id: SimpleNamespace(full=c.id) for c in new}

        cases: list = []
        verdict = judge_configurations(spec, survey, result, cases, {}, run_seed, lambda held, answers: check_says)
        return verdict, asked, cases

    caught = Verdict(Outcome.PARITY_FAILED, "par:M=600: [parity] output vs seed")
    verdict, asked, _ = run(caught)
    assert verdict is caught and verdict.environment == {"machine": "here"}
    assert len(asked) == 1 and (600, 3495) not in asked[0] and (600, plan[0]["dims"]["N"]) in asked[0]
    verdict, asked, cases = run(None)
    assert verdict is None and asked[1] == [(600, 3495)] and (cases[-1].m, cases[-1].dims["N"]) == (600, 3495)


def test_the_parent_refuses_a_worker_that_reports_no_survey():
    verdict = judge_configurations(None, {"axes": [], "seed": 0}, {"environment": {}}, [], {}, lambda new: {})
    assert verdict.outcome is Outcome.INTEGRITY_FAILED and "no configuration survey" in verdict.reason


# --- the record-only launches, under the interpreter ---------------------------------------

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _fill(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full((BLOCK,), 7.0, tl.float32), mask=offs < n)


SEEN = []


def fill(y, block=16):
    n = y.numel()
    _fill[lambda meta: SEEN.append(type(meta["y_ptr"]).__name__) or (triton.cdiv(n, meta["BLOCK"]),)](
        y, y.numel(), BLOCK=block, num_warps=4)
    return y


@triton.jit
def _broken(y_ptr):
    tl.store(y_ptr + tl.arange(0, 3), 1.0)  # a block of 3: the interpreter refuses it


def swallowing(y):
    try:
        _broken[(1,)](y)
    except Exception:
        pass
    return y
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from tik_agent.sandbox import launches
    from tik_agent.sandbox.harness import load_kernel

    launches.install()
    path = tmp_path_factory.mktemp("k") / "k.py"
    path.write_text(KERNEL)
    return load_kernel(path, "t")


def test_a_survey_records_the_launch_and_runs_no_program(kernel):
    import torch

    from tik_agent.sandbox import launches
    from tik_agent.sandbox.survey import describe

    y = torch.zeros(40)
    with launches.recording() as counted, launches.surveying() as found:
        kernel.fill(y)
    assert torch.count_nonzero(y) == 0 and not counted   # nothing ran, nothing counted as run
    structure, numbers = describe(found[0])
    assert numbers == [40, 16, 4, 3]                      # n, BLOCK, num_warps, the grid Triton computed
    assert ("constexpr BLOCK" in structure and ("y_ptr", "torch.float32", "cpu") in structure)
    kernel.fill(y)                                        # the same launch for real
    assert torch.all(y == 7.0)
    assert kernel.SEEN[0] == kernel.SEEN[1]               # the grid callable saw the same meta both times


def test_a_long_value_is_recorded_whole_not_cut():
    """Red team: a string constexpr was recorded as its repr's first 200 characters, so a
    launcher whose mode string differed only past them launched two kernels the survey saw
    as one (tests of the whole survey blind to that switch)."""
    from tik_agent.sandbox.survey import describe

    kernel = type("K", (), {"fn": None})()
    prefix = "x" * 225

    def launch(mode):
        return describe({"kernel": kernel, "args": (), "kwargs": {"MODE": mode}, "grid": (1,)})[0]

    assert launch(prefix + "a") != launch(prefix + "b")
    assert launch(prefix + "a") == launch(prefix + "a")
    assert launch("short") == launch("short") and ("option MODE", "str", "'short'") in launch("short")


def test_a_launch_that_raised_fails_the_judged_call_even_when_caught(kernel):
    import torch

    from tik_agent.sandbox import launches

    with pytest.raises(launches.LaunchCaughtError, match="_broken"):
        with launches.judged():
            kernel.swallowing(torch.zeros(4))
    with launches.judged():           # negative control: a call whose launches all ran
        kernel.fill(torch.zeros(4))


def test_the_survey_of_the_rmsnorm_seed_finds_its_regular_grid():
    """The real launcher, forward and backward, over every batch size up to 300: the
    backward's grid of 16-row programs (cdiv(M, 16)) is the one change, judged at its
    first step."""
    from pathlib import Path

    from tik_agent.sandbox import launches
    from tik_agent.sandbox.harness import load_entry
    from tik_agent.sandbox.survey import run_survey
    from tik_agent.spec.schema import load_spec

    launches.install()
    spec = load_spec(Path(__file__).parents[1] / "seed_kernels" / "rmsnorm")
    assert spec.backward is not None
    axis = dict(configs.survey_plan(spec, "cpu", random.Random(0))[0], values=list(range(1, 301)), exhaustive=300,
                high=300)
    record = run_survey(spec, load_entry(spec.source, spec, "seed"), [axis])
    found = configs.findings([axis], record)
    assert found.refusal is None and [b.value for b in found.boundaries] == [17]


def test_a_launch_described_after_its_kernel_function_changed_names_the_new_one():
    """The survey caches each kernel's launch layout: the cache must not outlive the
    kernel's function (a swapped ``fn`` would otherwise keep the first one's name)."""
    from tik_agent.sandbox.survey import describe

    class Kernel:  # hashable by identity, as a JITFunction is
        pass

    def first(x, n):
        pass

    def second(x, n):
        pass

    kernel = Kernel()
    kernel.fn = first
    launch = {"kernel": kernel, "args": (1, 2), "kwargs": {}, "grid": (3,)}
    before = describe(launch)
    kernel.fn = second
    after = describe(launch)
    assert before[0][0][0].endswith("first") and after[0][0][0].endswith("second"), (before, after)
    assert before[1] == after[1] == [1, 2, 3]


def _block_by_tokens(v, at=300):
    """An honest launcher: a wider block of queries once the packed tokens (5 per entry) pass
    ``at``; its grid follows the block's rule on each side."""
    block = 16 if 5 * v >= at else 8
    return block, 5 * v // block + v


def test_a_block_that_grows_with_the_size_changes_the_grids_rule_once():
    """The grid's rule changes with the kernel variant: judged as the variant's first size,
    not as a break of one rule at every size past it (which refused it: 63 changes)."""
    found = configs.analyse(_axis(exhaustive=200, high=200), _lookup(_block_by_tokens,
                                                                     ["constexpr BLOCK_Q", "grid"]))
    # the grid's first step on each side (a floor of the size: its later steps are the same
    # change again) and the variant's first size
    assert found.refusal is None and [(b.value, "variant" in b.why) for b in found.boundaries] == [
        (2, False), (60, True), (61, False)], found.boundaries
    # the whole of it past what this device judges: refused, naming the size
    found = configs.analyse(_axis(exhaustive=200, high=7), _lookup(_block_by_tokens, ["constexpr BLOCK_Q", "grid"]))
    assert found.refusal and "changes at M = 60" in found.refusal and "judges (7)" in found.refusal


def test_a_number_that_breaks_its_variants_rule_is_still_judged():
    """Negative control: within one variant the grid leaves its rule at M = 130 (an extra
    program there only): no rule explains that variant's grid any more, so its steps are
    each a change, and too many (before, one rule over both variants refused the same way)."""
    def numbers(v):
        block, grid = _block_by_tokens(v)
        return block, grid + (v == 130)
    found = configs.analyse(_axis(), _lookup(numbers, ["constexpr BLOCK_Q", "grid"]))
    assert found.refusal and "follow no rule" in found.refusal and "M = 130" not in found.refusal[:40]
    # an extra program at M = 130 over an affine grid of that variant: judged there
    found = configs.analyse(_axis(), _lookup(lambda v: (16 if v >= 60 else 8, v + (v == 130)),
                                             ["constexpr BLOCK_Q", "grid"]))
    assert found.refusal is None and {60, 130} <= {b.value for b in found.boundaries}, found.boundaries
