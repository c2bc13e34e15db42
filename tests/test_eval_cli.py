"""`tik-agent eval`: the bundled seeds pass against themselves; JSON shape; exit codes."""

import json

import pytest

from tik_agent import cli
from tik_agent.judge.evaluate import evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.outcomes import Outcome

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


def test_rmsnorm_seed_against_itself_json(capsys, device, tmp_path):
    """The JSON of `eval`, on a copy of the seed with a cut-down grid given as a directory (the
    full grid passes check-seed in CI's seed-grids lane: 74 cases, a minute and a half here)."""
    from seedutil import small_rmsnorm

    seed = small_rmsnorm(tmp_path)
    code = cli.run(["eval", str(seed / "kernel.py"), "--seed", str(seed), "--json", "--device", device,
                    "--rounds", "2"])
    out = json.loads(capsys.readouterr().out)
    # The seed against itself: accepted (exit 0), or "slower" (exit 1) only when timing noise says so.
    assert (code, out["outcome"]) in ((0, "passed"), (1, "slower")), out["reason"]
    assert out["passed"] is (code == 0) and (out["reason"] is None) is (code == 0)
    assert out["cases_passed"] == out["cases_total"] >= 30
    assert {"case", "passed", "failed", "checks"} <= set(out["cases"][0])
    assert out["timing"] and {"name", "shape", "seed", "candidate", "speedup", "noise"} <= set(out["timing"][0])
    assert 0.5 < out["speedup"] < 2.0
    for key in ("device", "triton", "torch", "driver"):
        assert key in out["environment"]
    assert out["candidate_sha256"] == out["seed_sha256"]


@pytest.mark.parametrize("name", ["logprobs", "matmul"])
def test_other_seeds_against_themselves(name, device, tmp_path):
    """The whole evaluation (timing and every timed-call check) of each seed against itself, on
    a cut-down grid: the full grids pass check-seed in test_check_seed (and matmul's full grid
    evaluated twice, once per worker, took minutes here)."""
    from seedutil import copy_seed, shrink_grid, shrink_matmul_workload
    from tik_agent.spec.schema import load_spec

    seed = copy_seed(name, tmp_path)
    if name == "matmul":  # K and N still cross a tile's edge; both cells keep their kinds
        shrink_grid(seed, batch_sizes="[1, 3, 6]", dims={"K": "[40, 96]", "N": "[33, 64]"})
        shrink_matmul_workload(seed)
    else:
        shrink_grid(seed, batch_sizes="[1, 3, 6]")
    spec = load_spec(seed)
    verdict = evaluate(spec, spec.source, EvalOptions(device=device, rounds=3, warmup=1))
    # Against itself: the same bits, and "slower" only when the machine is busy.
    assert verdict.outcome in (Outcome.PASSED, Outcome.SLOWER), verdict.reason
    assert verdict.cases_passed == len(verdict.cases)


def test_rejected_candidate_exits_1_with_json_reason(tmp_path, capsys):
    bad = tmp_path / "cand.py"
    bad.write_text("import os\n")
    assert cli.run(["eval", str(bad), "--seed", "rmsnorm", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and out["outcome"] == "rejected_static" and "[import]" in out["reason"]
    assert out["speedup"] is None


def test_candidate_that_does_not_parse_exits_1(tmp_path, capsys):
    bad = tmp_path / "cand.py"
    bad.write_text("def (:\n")
    assert cli.run(["eval", str(bad), "--seed", "rmsnorm"]) == 1
    assert "syntax" in capsys.readouterr().out


@pytest.mark.parametrize("argv,text", [
    (["eval", "missing.py", "--seed", "rmsnorm"], "no such candidate file"),
    (["eval", "seed_kernels/rmsnorm/kernel.py", "--seed", "nope"], "unknown seed 'nope'"),
    (["eval", "seed_kernels/rmsnorm/kernel.py", "--seed", "rmsnorm", "--device", "tpu"], "unknown device"),
    (["eval", "seed_kernels/rmsnorm/kernel.py", "--seed", "rmsnorm", "--timeout", "0"], "--timeout: must be positive"),
])
def test_bad_usage_exits_2(argv, text, capsys):
    assert cli.run(argv) == 2
    assert text in capsys.readouterr().err


def test_no_timing_checks_parity_only(tmp_path, capsys, device):
    from seedutil import small_rmsnorm

    seed = small_rmsnorm(tmp_path)
    code = cli.run(["eval", str(seed / "kernel.py"), "--seed", str(seed), "--no-timing", "--json", "--device", device])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"] and out["cases_passed"] == out["cases_total"] > 0
    assert out["timing"] == [] and out["speedup"] is None and out["timer"] is None
