"""The configuration survey in an evaluation: its request, and the judgement of its record.

The worker surveys the candidate's launcher and runs parity cases on both sides of
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

from tik_agent.judge import configs, joint, joint_far, joint_sequences
from tik_agent.judge.options import EvalOptions
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.spec.cases import Case
from tik_agent.spec.fields import BATCH_DIM
from tik_agent.spec.schema import KernelSpec
from tik_agent.spec.sequences import PAD, SPARE

log = logging.getLogger(__name__)

# Rows each side of a boundary is judged on, in cases of other data where one case has fewer.
# A change of reduction order alters some rows' bits and not others: rare_width_switch's
# 1024 -> 512 lanes at N = 3999 changed 255 rows of 2000 (measured here), so a side judged on
# 8 rows let it pass a third of the time.  At that rate 128 rows miss it with odds 3e-8 and
# 1024 with 1e-61; the interpreter pays about 5-20 ms a row, a GPU next to nothing.
CONFIG_ROWS = {"cpu": 128, "cuda": 1024}
# Cases a side at most: a boundary at a batch of one row would otherwise take 1024 cases on a
# GPU, each a launch of the candidate and of the seed with its own inputs and digests.  128
# one-row cases miss that 255-in-2000 change with odds 3e-8, as 128 rows do on the CPU.
CONFIG_CASES_MAX = 128


def survey_request(spec: KernelSpec, options: EvalOptions) -> dict | None:
    """The survey's axes and its cases' seed, drawn from a secret of this evaluation;
    None for a spec without a declared domain or of the sequences layout."""
    if not (options.survey and configs.surveyed(spec)):
        return None
    return survey_of(spec, options.device, random.Random(secrets.randbits(64)))


def survey_of(spec: KernelSpec, device: str, rng: random.Random) -> dict:
    """The survey's request from ``rng``: the axes, the points of combined sizes, the seed."""
    axes = configs.survey_plan(spec, device, rng)
    if spec.layout != "rows":  # the sequences layout: its axes, and variants at combined sizes
        batch = next(int(a["high"]) for a in axes if a["dim"] == BATCH_DIM)
        return {"axes": axes, "joint": joint_sequences.draw(spec, device, rng, batch),
                "sequences": joint_sequences.shape_of(spec, device), "seed": rng.getrandbits(31)}
    points = joint.draw(axes, rng)
    return {"axes": joint.with_coordinates(axes, points), "joint": points, "seed": rng.getrandbits(31)}


def survey_findings(survey: dict, record: dict) -> configs.Findings:
    """What the worker's record says along each axis and at the combined points: the same
    analysis in the worker (which runs the cases) and in the parent (which judges them)."""
    try:
        along = configs.decode(record)
        found = configs.findings(survey["axes"], record, along)
    except Exception as exc:  # noqa: BLE001 - the record is the worker's to write (a structure nested past the parser's depth)
        return configs.Findings(refusal=f"the survey's record cannot be read ({type(exc).__name__})")
    points = survey.get("joint") or []
    if found.refusal is not None or not points:
        return found
    try:
        got = joint.decode(record)
    except Exception as exc:  # noqa: BLE001 - as above
        return configs.Findings(refusal=f"the survey's record cannot be read ({type(exc).__name__})")
    try:
        if survey.get("sequences"):
            chosen, refusal = joint_sequences.judge(
                survey["sequences"], survey["axes"], points, lambda m, dims: got.get(joint.key_of(m, dims)),
                {configs.axis_key(a): along.get(configs.axis_key(a), {}).get for a in survey["axes"]})
        else:
            chosen, refusal = joint.judge(survey["axes"], points, lambda m, dims: got.get(joint.key_of(m, dims)),
                                          {a["dim"]: along.get(a["dim"], {}).get for a in survey["axes"]},
                                          survey["seed"], [(b.dim, b.value) for b in found.boundaries])
    except Exception as exc:  # noqa: BLE001 - the record is the worker's to write
        return configs.Findings(refusal=f"the survey's record cannot be read ({type(exc).__name__})")
    if refusal is not None:
        return configs.Findings(refusal=refusal)
    found.joint = chosen
    return found


def judge_configurations(spec: KernelSpec, survey: dict, result: dict, cases: list[Case], expected: dict,
                         run_seed: Callable[[list[Case]], dict],
                         check: Callable[[list[Case], dict], Verdict | None] | None = None) -> Verdict | None:
    """A refusal, or None with the boundary cases added to ``cases`` and the seed's
    outputs on them to ``expected`` (``run_seed``: case list -> {id: CaseOutputs}; a
    case the seed fails itself is left out, as a drawn case is).  The far points' cases
    (:mod:`tik_agent.judge.joint_far`) come last, and with ``check`` (cases, expected ->
    the parity verdict of the first failing case, or None) the seed computes them only
    when every case before them holds: a failure there is the verdict the whole list
    would give (its first failing case), without the seed's work on the largest cases."""
    environment = result.get("environment", {})
    record = result.get("survey")
    if not isinstance(record, dict):
        return Verdict(Outcome.INTEGRITY_FAILED, "[config] the worker reported no configuration survey",
                       environment=environment)
    found = survey_findings(survey, record)
    if found.refusal is not None:
        return Verdict(Outcome.INTEGRITY_FAILED, f"[config] {found.refusal}", environment=environment)
    known = {c.id for c in cases}
    built = [(c, is_far) for c, is_far in _config_cases(spec, survey["axes"], found, survey["seed"])
             if c.id not in known]
    new = [c for c, _ in built]
    if found.boundaries or found.joint:
        log.info("configuration survey: the launch changes at %s; %d boundary cases",
                 "; ".join([f"{b.dim} = {b.value}" for b in found.boundaries] + [p.why for p in found.joint]),
                 len(new))
    def add(part: list[Case]) -> None:
        outputs = run_seed(part) if part else {}
        for case in part:
            if case.id in outputs:
                cases.append(case)
                expected[case.id] = outputs[case.id].full

    lazy = check is not None
    add([c for c, is_far in built if not (lazy and is_far)])
    last = [c for c, is_far in built if lazy and is_far]
    if last:
        failed = check(cases, expected)
        if failed is not None:
            failed.environment = environment
            return failed
        add(last)
    return None


def boundary_cases(spec: KernelSpec, plan: list[dict], found: configs.Findings, seed: int) -> list[Case]:
    """Parity cases on both sides of every boundary, in the survey's dtype and dims: as
    many of other data as :data:`CONFIG_ROWS` rows need at that batch, at most
    :data:`CONFIG_CASES_MAX`."""
    return [case for case, _ in _config_cases(spec, plan, found, seed)]


def _cases_a_side(spec: KernelSpec, device: str, m: int) -> int:
    """Cases of other data a side of a boundary is judged on: enough for :data:`CONFIG_ROWS`
    rows; in the sequences layout one (a case there costs seconds under the interpreter,
    and holds a row per token and query head)."""
    if spec.layout == "sequences":
        return 1
    rows = CONFIG_ROWS.get(device, CONFIG_ROWS["cuda"])
    return min(CONFIG_CASES_MAX, -(-rows // max(1, m)))


def _config_cases(spec: KernelSpec, plan: list[dict], found: configs.Findings, seed: int) -> list[tuple[Case, bool]]:
    """:func:`boundary_cases`, each with whether it judges a far point."""
    axes = {configs.axis_key(a): a for a in plan}
    out: dict[str, tuple[Case, bool]] = {}
    rng = random.Random(seed)
    for b in found.boundaries:
        axis = axes[b.dim]
        before = [v for v in axis["values"] if v < b.value]  # an axis over ratios is not consecutive
        for value in ([max(before)] if before else []) + [b.value]:
            m, dims = configs.point_of(axis, value)
            uniform = spec.layout == "sequences"  # the very launch the survey saw (config_sequences)
            geometry = {"spare": int(dims.pop(SPARE, 0)), "pad": int(dims.pop(PAD, 0))} if uniform else {}
            for _ in range(_cases_a_side(spec, axis["device"], m)):
                case = Case(m, dims, axis["dtype"], "normal", rng.getrandbits(31), origin="config", once=True,
                            uniform=uniform, **geometry)
                out.setdefault(case.id, (case, False))
    for point in found.joint:  # a combination of sizes no axis showed, or a far point: judged where it launches
        axis = plan[0]
        dims = dict(point.dims)
        uniform = spec.layout == "sequences"  # the very launch the survey saw, as above
        geometry = {"spare": int(dims.pop(SPARE, 0)), "pad": int(dims.pop(PAD, 0))} if uniform else {}
        for _ in range(_cases_a_side(spec, axis["device"], point.m)):
            case = Case(point.m, dims, axis["dtype"], "normal", rng.getrandbits(31), origin="config",
                        once=True, uniform=uniform, **geometry)
            out.setdefault(case.id, (case, point.why.startswith(joint_far.FAR)))
    return list(out.values())
