"""The offline agent, against the real evaluator, finds a faster rmsnorm with the seed's bits."""

import pytest

from seedutil import small_rmsnorm
from tik_agent.agents.base import AgentContext, AttemptFeedback
from tik_agent.agents.offline import OfflineAgent
from tik_agent.judge.evaluate import compute_reference, evaluate
from tik_agent.judge.options import EvalOptions
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.mark.parametrize("rng_seed", [0])
def test_offline_agent_finds_a_faster_parity_preserving_rmsnorm(tmp_path, device, rng_seed):
    spec = load_spec(small_rmsnorm(tmp_path))
    options = EvalOptions(device=device, timeout_s=120, rounds=3)
    reference = compute_reference(spec, options)
    agent = OfflineAgent()
    source = spec.source.read_text()
    recent: list[AttemptFeedback] = []
    for index in range(4):
        context = AgentContext(
            spec_text=spec.spec_path.read_text(), entry=spec.entry, seed_name=spec.name, tunables=spec.tunables,
            seed_source=source, parent_id="seed", parent_source=source, parent_speedup=1.0, timing_table=(),
            recent=recent, device="cpu (triton interpreter)" if device == "cpu" else device,
            rng_seed=rng_seed, attempt_index=index,
        )
        proposal = agent.propose(context)
        assert proposal.source is not None, proposal.error
        candidate = tmp_path / f"attempt{index}.py"
        candidate.write_text(proposal.source)
        verdict = evaluate(spec, candidate, options, reference=reference)
        if verdict.passed and verdict.speedup - 1.0 > max(verdict.noise, 0.05):
            assert verdict.cases_passed == len(verdict.cases) > len(reference.cases)
            return
        recent.append(AttemptFeedback(
            attempt_id=f"a{index}", parent_id="seed", outcome="slower" if verdict.passed else verdict.outcome.value,
            reason=verdict.reason, rationale=proposal.rationale, speedup=verdict.speedup,
            compile_error=None, first_mismatch=None, source_diff=None,
        ))
    pytest.fail(f"no faster parity-preserving variant in 4 proposals: {[(f.outcome, f.speedup) for f in recent]}")
