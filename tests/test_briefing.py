"""What the agent is told of earlier attempts: exactly their outcome, through the real briefing."""

from __future__ import annotations

import threading

import pytest
from optimize_helpers import copy_run, template_run

from tik_agent.agents.prompts import REPAIR_COMPILE, PromptRenderer, choose_template
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord
from tik_agent.run.lineage import SEED_TAG
from tik_agent.run.runconfig import RunConfig
from tik_agent.search import setup
from tik_agent.search.briefing import Briefing
from tik_agent.search.frontier import Member

pytestmark = pytest.mark.slow  # builds (once) a run of the tiny seed under the interpreter

TRACEBACK = "Traceback (most recent call last):\n  ...\nIndexError: index 300 is out of bounds for dimension 0"


@pytest.fixture
def session(tmp_path):
    run = copy_run(template_run(), tmp_path / "run")
    session = setup.reopen(run, RunConfig.load(run))
    yield session
    session.close()


def _record(session, attempt: str, index: int, outcome: Outcome, reason: str) -> AttemptRecord:
    session.run.store.write(attempt, "diff.patch", f"--- seed/kernel.py\n+++ {attempt}/kernel.py\n")
    return AttemptRecord(attempt_id=attempt, index=index, parent_commit=session.run.lineage.root_commit(),
                         parent_id=SEED_TAG, outcome=outcome, reason=reason)


def _briefing(session) -> Briefing:
    return Briefing(session.run.spec, session.run.config.device, "CPU (test)", session.run.config.rng_seed, session.run.lineage,
                    session.run.store, threading.Lock())


def test_a_runtime_error_reaches_the_prompt_as_a_runtime_error(session):
    records = [_record(session, "a0001", 1, Outcome.DUPLICATE, "the same source as the seed: not evaluated again"),
               _record(session, "a0002", 2, Outcome.NOT_FASTER, "1.001x the seed, within the noise"),
               _record(session, "a0003", 3, Outcome.RUNTIME_ERROR, TRACEBACK)]
    seed = Member(session.run.lineage.root_commit(), SEED_TAG, 1.0)
    context = _briefing(session).context(seed, 4, records)

    assert [f.outcome for f in context.recent] == [Outcome.DUPLICATE, Outcome.NOT_FASTER, Outcome.RUNTIME_ERROR]
    assert context.recent[2].compile_error == TRACEBACK   # the error text travels with it
    assert choose_template(context) == REPAIR_COMPILE      # a runtime error is repaired, as a compile error is
    prompt = PromptRenderer().render(context).user
    assert "# Your task: repair a runtime error" in prompt and "raised an error while running" in prompt
    assert "compile error" not in prompt.lower() and "IndexError: index 300" in prompt
    assert "`a0001` from `seed`: duplicate" in prompt and "`a0002` from `seed`: not_faster" in prompt


def test_a_compile_error_is_still_told_as_one(session):
    records = [_record(session, "a0001", 1, Outcome.COMPILE_ERROR, "triton.CompilationError: bad constexpr")]
    context = _briefing(session).context(Member(session.run.lineage.root_commit(), SEED_TAG, 1.0), 2, records)
    prompt = PromptRenderer().render(context).user
    assert context.recent[0].outcome is Outcome.COMPILE_ERROR
    assert "# Your task: repair a compile error" in prompt and "runtime error" not in prompt.lower()
