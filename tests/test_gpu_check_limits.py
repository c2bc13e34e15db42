"""The GPU check's step limits (scripts/gpu_check_limits.py): run estimates plus the compile-only
rehearsal's compile seconds, cut to the budget; and the warm step's pieces."""

import math
import subprocess
import sys

from scriptutil import REPO, gpu_check_limits
from tik_agent.backends.compile_rehearsal import EVAL_PARTS, warm_steps

L = gpu_check_limits()


def test_every_warm_process_has_its_rehearsal_seconds_and_every_timed_step_its_cold_ones():
    """A seed or step added without measuring it fails here: its limit would count no compiling."""
    assert set(L.REHEARSAL) == set(warm_steps())
    assert all(compile_s > 0 and process_s >= compile_s for compile_s, process_s in L.REHEARSAL.values())
    assert set(L.COLD) == set(L.RUN_S)
    assert all(L.compile_s(step) > 0 for step in L.RUN_S if step.startswith(("eval-", "probes", "optimize")))


def test_a_step_wants_its_run_estimate_and_its_cold_compile_seconds():
    cold = sum(c for name, (c, _) in L.REHEARSAL.items() if name.startswith("probes-"))
    assert L.limit("probes", 10_000, []) == math.ceil(L.RUN_S["probes"] + cold)
    matmul = sum(L.REHEARSAL[f"eval-matmul:{part}"][0] for part in EVAL_PARTS)
    assert L.limit("eval-matmul", 10_000, []) == math.ceil(L.RUN_S["eval-matmul"] + matmul)
    # the interpreter's rehearsal compiles nothing
    assert L.limit("probes", 10_000, [], compiles=False) == L.RUN_S["probes"]


def test_the_budget_keeps_the_later_steps_run_time_and_skips_what_cannot_start():
    later = ["eval-attention", "optimize", "export"]
    reserved = sum(L.RUN_S[s] for s in later)
    assert L.limit("eval-rmsnorm", reserved + 25, later) == 25          # cut to what is left
    assert L.limit("eval-rmsnorm", reserved + L.MIN_S - 1, later) == 0  # too little: skipped
    assert L.limit("eval-rmsnorm", 10_000, later) == L.want("eval-rmsnorm")  # control: room for all


def test_the_warm_estimate_shrinks_with_cores_down_to_its_longest_process():
    seconds = [process_s for _, process_s in L.REHEARSAL.values()]
    assert L.warm_s(1) == math.ceil(sum(seconds) * L.SLACK)
    assert L.warm_s(16) < L.warm_s(2) < L.warm_s(1)
    assert L.warm_s(1000) == math.ceil(max(seconds) * L.SLACK)


def test_the_command_line_prints_a_limit_and_refuses_an_unknown_step():
    run = lambda *a: subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_limits.py"), *a],
                                    capture_output=True, text=True)
    done = run("limit", "export", "10000", "16")
    assert done.returncode == 0 and int(done.stdout) == L.want("export")
    bad = run("limit", "eval-nosuchseed", "100", "16")
    assert bad.returncode == 2 and "usage" in bad.stderr and not bad.stdout


def test_a_warm_step_for_a_gpu_the_driver_does_not_know_is_refused_before_it_starts(tmp_path, capsys):
    from scriptutil import gpu_check_steps

    assert gpu_check_steps().main(["warm", str(tmp_path / "cache"), str(tmp_path), "--target", "sm_91"]) == 2
    assert "--target 'sm_91': expected one of" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "compile.json").exists()
