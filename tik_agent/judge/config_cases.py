"""The configuration survey in an evaluation: its request, and the judgement of its record.

The worker surveys the candidate's launcher and runs a parity case on both sides of
every change it finds (:mod:`tik_agent.sandbox.survey`); here the trusted side
draws the plan from a secret of the evaluation, analyses the record the worker
left with the same code (:func:`tik_agent.judge.configs.findings`), and has the
seed computed on the boundary cases in a worker of its own, so that they are
judged with the rest.
"""

from __future__ import annotations

import logging
import random
import secrets
from typing import Callable

from tik_agent.judge import configs
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.spec.cases import Case
from tik_agent.spec.schema import KernelSpec

log = logging.getLogger(__name__)

def survey_request(spec: KernelSpec, options: EvalOptions) -> dict | None:
    """The survey's axes and its cases' seed, drawn from a secret of this evaluation;
    None for a spec without a declared domain or of the sequences layout."""
    if not (options.survey and configs.surveyed(spec)):
        return None
    rng = random.Random(secrets.randbits(64))
    return {"axes": configs.survey_plan(spec, options.device, rng), "seed": rng.getrandbits(31)}


def judge_configurations(spec: KernelSpec, survey: dict, result: dict, cases: list[Case], expected: dict,
                         run_seed: Callable[[list[Case]], dict]) -> Verdict | None:
    """A refusal, or None with the boundary cases added to ``cases`` and the seed's
    outputs on them to ``expected`` (``run_seed``: case list -> {id: CaseOutputs}; a
    case the seed fails itself is left out, as a drawn case is)."""
    environment = result.get("environment", {})
    record = result.get("survey")
    if not isinstance(record, dict):
        return Verdict(Outcome.INTEGRITY_FAILED, "[config] the worker reported no configuration survey",
                       environment=environment)
    found = configs.findings(survey["axes"], record)
    if found.refusal is not None:
        return Verdict(Outcome.INTEGRITY_FAILED, f"[config] {found.refusal}", environment=environment)
    known = {c.id for c in cases}
    new = [c for c in configs.boundary_cases(spec, survey["axes"], found, survey["seed"]) if c.id not in known]
    if found.boundaries:
        log.info("configuration survey: the launch changes at %s; %d boundary cases",
                 ", ".join(f"{b.dim} = {b.value}" for b in found.boundaries), len(new))
    if new:
        outputs = run_seed(new)
        for case in new:
            if case.id in outputs:
                cases.append(case)
                expected[case.id] = outputs[case.id].full
    return None
