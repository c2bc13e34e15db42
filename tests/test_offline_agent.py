"""The offline agent: valid, reproducible proposals that only move what is safe to move."""

import ast
import dataclasses
import difflib
import tomllib
from pathlib import Path

import pytest

from tik_agent.agents.base import AgentContext, AttemptFeedback
from tik_agent.agents.offline import OfflineAgent, candidate_moves, changes_in
from tik_agent.agents.replies import check_candidate
from tik_agent.agents.source_edits import SourceIndex, apply_edits, launch_option_names

ROOT = Path(__file__).resolve().parents[1]

KERNEL = '''"""A tiny rmsnorm-like kernel: one fixed-order reduction per row."""
import torch
import triton
import triton.language as tl

BLOCK_N = 256  # part of the numerics: never a tunable
ROWS_PER_PROGRAM = 1
NUM_WARPS = 4


@triton.jit
def _norm_kernel(x_ptr, y_ptr, M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = (rows < M)[:, None] & (c < N)[None, :]
        x = tl.load(x_ptr + rows[:, None] * N + c[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    total = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, total, mask=rows < M)


def norm(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M,), dtype=torch.float32, device=x.device)
    _norm_kernel[(triton.cdiv(M, ROWS_PER_PROGRAM),)](  # one program per ROWS_PER_PROGRAM rows
        x, y, M, N, BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,
    )
    return y
'''
TUNABLES = {"ROWS_PER_PROGRAM": [1, 2, 4, 8, 16], "NUM_WARPS": [1, 2, 4, 8]}
INTERPRETER = "cpu (triton interpreter)"


def make_context(source=KERNEL, recent=(), attempt_index=0, rng_seed=0, parent_id="seed", device=INTERPRETER, tunables=None):
    return AgentContext(
        spec_text="[tunables]\n",
        entry="norm",
        seed_name="norm",
        tunables=TUNABLES if tunables is None else tunables,
        seed_source=KERNEL,
        parent_id=parent_id,
        parent_source=source,
        parent_speedup=None,
        timing_table=[],
        recent=list(recent),
        device=device,
        rng_seed=rng_seed,
        attempt_index=attempt_index,
    )


def diff(a: str, b: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "parent", "candidate"))


def changed_lines(parent: str, candidate: str) -> tuple[list[str], list[str]]:
    lines = diff(parent, candidate).splitlines()
    removed = [ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    return removed, added


def module_constants(source: str) -> dict[str, object]:
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


@pytest.mark.parametrize("attempt_index", range(8))
@pytest.mark.parametrize("rng_seed", [0, 1, 7])
def test_proposals_are_valid_candidates_changing_only_tunables(attempt_index, rng_seed):
    proposal = OfflineAgent().propose(make_context(attempt_index=attempt_index, rng_seed=rng_seed))
    assert proposal.source is not None and proposal.error is None
    assert check_candidate(proposal.source, "norm") is None
    assert proposal.source != KERNEL
    before, after = module_constants(KERNEL), module_constants(proposal.source)
    changed = {k for k in before if before[k] != after[k]}
    assert changed and changed <= set(TUNABLES)
    assert all(after[k] in TUNABLES[k] for k in changed)
    removed, added = changed_lines(KERNEL, proposal.source)
    assert len(added) == len(removed) == len(changed)  # nothing else moved, comments kept
    assert proposal.usage.input_tokens == proposal.usage.output_tokens == 0
    assert proposal.usage.cost_usd == 0.0
    for name in changed:
        assert f"set {name} = {after[name]!r} (was {before[name]!r})" in proposal.rationale


def test_unparsable_parent_is_a_failed_proposal():
    proposal = OfflineAgent().propose(make_context(KERNEL + "\ndef broken(:\n"))
    assert proposal.source is None and "does not parse" in proposal.error


def test_deterministic_for_the_same_inputs_and_seed_sensitive():
    agent = OfflineAgent(seed=3)
    runs = [[agent.propose(make_context(attempt_index=i, rng_seed=s)).source for i in range(6)] for s in (0, 0, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2] or runs[0] != runs[3]
    assert OfflineAgent(seed=3).propose(make_context()) == agent.propose(make_context())


def test_interpreter_prefers_tunables_that_change_the_work_over_launch_options():
    index = SourceIndex(KERNEL)
    assert launch_option_names(index, TUNABLES) == {"NUM_WARPS"}
    for i in range(4):
        cpu = OfflineAgent().propose(make_context(attempt_index=i))
        assert "NUM_WARPS" not in cpu.rationale and "num_stages" not in cpu.rationale


def test_proposals_in_flight_together_differ():
    sources = {OfflineAgent().propose(make_context(attempt_index=i)).source for i in range(4)}
    assert len(sources) == 4


def feedback_for(proposal_source, outcome, attempt_id, parent_id="seed", parent_source=KERNEL, speedup=None, with_diff=True, rationale=None):
    return AttemptFeedback(
        attempt_id=attempt_id,
        parent_id=parent_id,
        outcome=outcome,
        rationale=rationale,
        speedup=speedup,
        source_diff=diff(parent_source, proposal_source) if with_diff else None,
    )


@pytest.mark.parametrize("with_diff", [True, False])
def test_tried_moves_are_not_proposed_again(with_diff):
    agent, recent, seen = OfflineAgent(), [], set()
    total = len(candidate_moves(KERNEL, TUNABLES))
    for i in range(total):
        proposal = agent.propose(make_context(recent=recent, attempt_index=i))
        assert proposal.source not in seen, f"attempt {i} repeated a tried move"
        seen.add(proposal.source)
        recent.append(feedback_for(proposal.source, "slower", f"a{i}", with_diff=with_diff, rationale=proposal.rationale))
    exhausted = agent.propose(make_context(recent=recent, attempt_index=total))
    assert exhausted.source is None and "was tried" in exhausted.error and exhausted.exhausted


def test_changes_are_read_from_diffs_and_rationales():
    changed = KERNEL.replace("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 8")
    fb = feedback_for(changed, "accepted", "a1", speedup=1.5)
    names = list(TUNABLES)
    [change] = changes_in(fb, names)
    assert (change.name, change.old, change.new) == ("ROWS_PER_PROGRAM", 1, 8)
    fb = AttemptFeedback("a2", "seed", "slower", rationale="set NUM_WARPS = 8 (was 4); set ROWS_PER_PROGRAM = 2 (was 1).")
    assert {(c.name, c.old, c.new) for c in changes_in(fb, names)} == {("NUM_WARPS", 4, 8), ("ROWS_PER_PROGRAM", 1, 2)}


def test_accepted_direction_is_followed_and_slow_or_broken_values_avoided():
    parent = KERNEL.replace("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 2")
    recent = [
        feedback_for(parent, "accepted", "a1", speedup=1.6),
        feedback_for(KERNEL.replace("NUM_WARPS = 4", "NUM_WARPS = 2"), "slower", "a2"),
        feedback_for(KERNEL.replace("NUM_WARPS = 4", "NUM_WARPS = 8"), "parity_failed", "a3"),
    ]
    for seed in range(5):
        proposal = OfflineAgent().propose(make_context(parent, recent, parent_id="a1", rng_seed=seed, attempt_index=3))
        after = module_constants(proposal.source)
        assert after["ROWS_PER_PROGRAM"] > 2, proposal.rationale
        assert after["NUM_WARPS"] not in (1, 2, 8), proposal.rationale


@pytest.mark.parametrize("rng_seed", range(4))
def test_a_simulated_search_climbs_to_the_best_setting(rng_seed):
    """With a toy evaluator (more rows per program is faster, warps do nothing), the
    agent, promoting each accepted proposal to parent, reaches the best setting quickly."""
    agent, recent = OfflineAgent(), []
    parent_id, parent = "seed", KERNEL
    for i in range(12):
        proposal = agent.propose(make_context(parent, recent, attempt_index=i, rng_seed=rng_seed, parent_id=parent_id))
        old, new = module_constants(parent)["ROWS_PER_PROGRAM"], module_constants(proposal.source)["ROWS_PER_PROGRAM"]
        outcome = "accepted" if new > old else "slower"
        recent.append(feedback_for(proposal.source, outcome, f"a{i}", parent_id, parent, speedup=new / old if new > old else None))
        if outcome == "accepted":
            parent_id, parent = f"a{i}", proposal.source
        if module_constants(parent)["ROWS_PER_PROGRAM"] == 16:
            break
    assert module_constants(parent)["ROWS_PER_PROGRAM"] == 16, [f.rationale for f in recent]


def test_constant_forms_and_multibyte_lines_are_edited_in_place():
    source = KERNEL.replace("ROWS_PER_PROGRAM = 1", 'ROWS_PER_PROGRAM: tl.constexpr = 1  # ü').replace(
        "NUM_WARPS = 4", 'NAME_É = "é"; NUM_WARPS = tl.constexpr(4)'
    )
    proposal = OfflineAgent().propose(make_context(source, attempt_index=1))
    removed, added = changed_lines(source, proposal.source)
    assert len(added) == 1
    ast.parse(proposal.source)
    assert "# ü" in proposal.source and 'NAME_É = "é"' in proposal.source
    singles = [m for m in candidate_moves(source, TUNABLES) if len(m.changes) == 1 and m.changes[0].name in TUNABLES]
    assert {m.changes[0].old for m in singles} == {1, 4}
    warps = next(m for m in singles if m.changes[0].name == "NUM_WARPS" and m.changes[0].new == 8)
    edited = apply_edits(source, warps.edits)
    assert 'NAME_É = "é"; NUM_WARPS = tl.constexpr(8)\n' in edited


# The same loop feeding a tl.dot: loads worth pipelining (never run, only edited).
DOT_KERNEL = KERNEL.replace("        acc += x * x\n", "        acc += tl.dot(x, tl.trans(x))\n")


def test_num_stages_is_proposed_only_for_kernels_with_a_dot():
    assert DOT_KERNEL != KERNEL
    assert not [m for m in candidate_moves(KERNEL, {}) if m.changes[0].name == "num_stages"]
    proposal = OfflineAgent().propose(make_context(tunables={}, device="cuda (NVIDIA H200)"))
    assert proposal.source is None and "tried" in proposal.error  # nothing else to propose here


def test_num_stages_rewrite_on_gpu_touches_only_the_launch():
    moves = [m for m in candidate_moves(DOT_KERNEL, {}) if m.changes[0].name == "num_stages"]
    assert {m.changes[0].new for m in moves} == {1, 2, 3, 4}
    proposal = OfflineAgent().propose(make_context(DOT_KERNEL, tunables={}, device="cuda (NVIDIA H200)"))
    removed, added = changed_lines(DOT_KERNEL, proposal.source)
    assert len(added) == 1 and "num_warps=NUM_WARPS, num_stages=" in added[0]
    assert "pipelined" in proposal.rationale
    try:
        from tik_agent.sandbox.static import check_source
    except ImportError:
        pass
    else:
        assert check_source(proposal.source) == []
    # A launch whose num_stages is a name (a tunable) is left to the tunable.
    assert not candidate_moves(DOT_KERNEL.replace("num_warps=NUM_WARPS", "num_stages=NUM_WARPS"), {})


def test_unproven_values_come_after_known_safe_ones_and_say_so():
    gpu = "cuda (NVIDIA H200)"
    safe = {"ROWS_PER_PROGRAM": [1, 2]}
    unproven = {"NUM_WARPS": [8], "ROWS_PER_PROGRAM": [16]}
    first = OfflineAgent().propose(dataclasses.replace(make_context(tunables=safe, device=gpu), unproven=unproven))
    assert "ROWS_PER_PROGRAM = 2" in first.rationale and "parity check decides" not in first.rationale
    moves = candidate_moves(KERNEL, safe, unproven)
    doubtful = {(c.name, c.new) for m in moves for c in m.changes if c.unproven}
    assert doubtful == {("NUM_WARPS", 8), ("ROWS_PER_PROGRAM", 16)}
    only = OfflineAgent().propose(dataclasses.replace(make_context(tunables={}, device=gpu), unproven=unproven))
    assert only.source is not None and "parity check decides" in only.rationale


def test_proposals_pass_the_static_rules():
    static = pytest.importorskip("tik_agent.sandbox.static")
    assert static.check_source(KERNEL) == []
    for i in range(6):
        proposal = OfflineAgent().propose(make_context(attempt_index=i, device="cuda (NVIDIA H200)"))
        assert static.check_source(proposal.source) == []


def _seed(name):
    directory = ROOT / "seed_kernels" / name
    if not (directory / "kernel.py").is_file() or not (directory / "spec.toml").is_file():
        pytest.skip(f"seed_kernels/{name} is not there yet")
    from tik_agent.spec.schema import load_spec

    spec = tomllib.loads((directory / "spec.toml").read_text())
    spec["tunables"] = dict(load_spec(directory).tunables)  # values only; safe_on is the briefing's business
    return (directory / "kernel.py").read_text(), spec


@pytest.mark.parametrize("name", ["rmsnorm", "matmul", "logprobs", "attention", "add_rmsnorm"])
def test_bundled_seeds_get_valid_proposals(name):
    source, spec = _seed(name)
    entry = spec.get("kernel", {}).get("entry")
    tunables = spec.get("tunables", {})
    if not tunables or not entry:
        pytest.skip(f"seed {name} has no tunables or no entry")
    for i in range(4):
        context = dataclasses.replace(
            make_context(source, tunables=tunables, attempt_index=i), entry=entry, seed_source=source
        )
        proposal = OfflineAgent().propose(context)
        assert proposal.source is not None, proposal.error
        assert check_candidate(proposal.source, entry) is None
        before, after = module_constants(source), module_constants(proposal.source)
        assert {k for k in before if before[k] != after[k]} <= set(tunables)
        static = pytest.importorskip("tik_agent.sandbox.static")
        assert static.check_source(proposal.source) == []


BITS_CHECK = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

seed, cand = load(sys.argv[1], "seed"), load(sys.argv[2], "cand")
for M, N in [(1, 1000), (3, 2100), (7, 1000)]:
    for dtype, view in [(torch.float32, torch.int32), (torch.bfloat16, torch.int16)]:
        g = torch.Generator().manual_seed(M * N)
        x = torch.randn(M, N, generator=g).to(dtype)
        w = torch.randn(N, generator=g).to(dtype)
        expected = seed.rms_norm(x, w).view(view)
        assert torch.equal(cand.rms_norm(x, w).view(view), expected), (M, N, dtype)
        assert torch.equal(cand.rms_norm(x[:1], w).view(view), expected[:1]), (M, N, dtype, "row alone")
print("bits equal")
"""


@pytest.mark.slow  # runs the kernel under the interpreter
def test_rmsnorm_rows_per_program_proposal_keeps_bits_under_the_interpreter(tmp_path):
    """A sanity check of the moves themselves (the evaluator does the real one)."""
    import os
    import subprocess
    import sys

    source, spec = _seed("rmsnorm")
    agent = OfflineAgent()
    for i in range(8):
        context = dataclasses.replace(
            make_context(source, tunables=spec["tunables"], attempt_index=i), entry="rms_norm", seed_source=source
        )
        proposal = agent.propose(context)
        if "ROWS_PER_PROGRAM" in proposal.rationale:
            break
    else:
        pytest.fail("no ROWS_PER_PROGRAM move in eight attempts")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(proposal.source)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-c", BITS_CHECK, str(ROOT / "seed_kernels/rmsnorm/kernel.py"), str(candidate)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bits equal" in result.stdout


def test_sources_already_seen_anywhere_in_the_run_are_not_proposed():
    """A source tried from another parent (or a lineage kernel) is in seen_sources: never proposed again,
    and a comment or blank line does not make it new."""
    from tik_agent.pyparse import source_key

    first = OfflineAgent().propose(make_context())
    assert source_key(first.source + "\n\n# a comment\n") == source_key(first.source)
    assert source_key(first.source.replace("ROWS", "ROWZ")) != source_key(first.source)  # negative control
    again = OfflineAgent().propose(dataclasses.replace(make_context(), seen_sources={source_key(first.source)}))
    assert again.source is not None and source_key(again.source) != source_key(first.source)
    every = {source_key(apply_edits(KERNEL, m.edits)) for m in candidate_moves(KERNEL, TUNABLES)}
    none_left = OfflineAgent().propose(dataclasses.replace(make_context(), seen_sources=every))
    assert none_left.source is None and "already tried in this run" in none_left.error
