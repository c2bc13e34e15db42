"""The GPU check's table of the seeds' evaluations (scripts/gpu_check_steps.py summarise): each
verdict says which isolation its workers got, and what is missing and why when it is not full."""

import json

from scriptutil import gpu_check_steps


def _verdict(isolation):
    return {"outcome": "passed", "passed": True, "cases_passed": 5, "cases_total": 5, "speedup": 1.0,
            "timing": [], "timer": "wall clock", **({"isolation": isolation} if isolation else {})}


def test_each_verdict_line_names_its_isolation_and_why_it_is_not_full(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    why = "bwrap: not installed"
    (out / "environment.json").write_text(json.dumps({"isolation": {"level": "partial", "why": why}}))
    full = {"level": "full", "mechanism": "bwrap", "layers": ["user", "pid", "mount", "net", "nnp", "landlock"]}
    partial = {"level": "partial", "mechanism": "unshare", "layers": ["user", "pid", "mount", "net", "nnp"]}
    for seed, isolation in (("alpha", full), ("beta", partial), ("gamma", None)):
        (work / f"eval-{seed}.json").write_text(json.dumps(_verdict(isolation)))
    assert gpu_check_steps().main(["summarise", str(out), "--evals", str(work)]) == 0
    lines = {line.split(" | ")[0].strip("| "): line for line in (out / "summary.md").read_text().splitlines()
             if "verdict:" in line}
    assert "isolation full (bwrap) |" in lines["alpha"]
    assert f"isolation partial (unshare): missing seccomp, landlock; {why} |" in lines["beta"]
    assert "isolation not recorded |" in lines["gamma"]  # a verdict without it says so, never "full"
