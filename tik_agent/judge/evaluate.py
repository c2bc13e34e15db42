"""The library call: (spec, candidate file) -> :class:`Verdict`.

Order of events, each a wall against a way evaluators get fooled:

1. static rules on the source (nothing runs if they fail), and the integer
   literals it compares sizes with (a batch size too large to test here is a
   rejection); where the declared domain reaches past 2**31 elements, no
   32-bit index-times-stride offsets (:mod:`tik_agent.judge.offsets`);
2. the seed's outputs for every fixed parity case, computed in a *separate*
   worker (or taken from a cache made the same way) and judged for the seed's
   own determinism and invariance on this device;
3. a secret plan (:mod:`tik_agent.judge.plan`): batch sizes drawn for this
   evaluation, sizes around the candidate's literals, warm-ups, re-check
   positions and the inputs of every timed call; a second seed worker computes
   the seed's outputs on the new cases and its digests on the timed inputs;
4. the candidate's worker: its parity outputs before any seed code is loaded;
   then it waits at a gate while the trusted side judges those outputs against
   the seed's (:mod:`tik_agent.judge.gate`): a candidate that fails stops
   there with that failure as its verdict, whatever its worker does next; one
   that passes goes on to the configuration survey and its boundary cases
   (:mod:`tik_agent.judge.configs`, judged after the worker exits against a
   seed worker of their own), then to interleaved timing against the seed (and the
   parent), every call of the candidate digested, then a re-check per cell; on
   cuda then the graph phase (:mod:`tik_agent.sandbox.graphs`), whose replays
   decide the speedup;
5. the trusted side judges bits, invariance, determinism, launches and input
   digests again on what the worker left, every timed call against the seed,
   every graph replay against the seed graph and the digested ones against the
   seed's own worker (:mod:`tik_agent.judge.graphcheck`), then the timing rules.

Each worker phase has its own wall-clock limit, a few times the seed's time
for it (:mod:`tik_agent.judge.phases`), unless ``--timeout`` fixes one limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tik_agent.backends.graph_timer import MIN_SAMPLES
from tik_agent.bits import digest
from tik_agent.judge.config_cases import judge_configurations, survey_request
from tik_agent.judge.gate import Gate
from tik_agent.judge.graphcheck import judge_graph
from tik_agent.judge.literals import batch_sizes_around, compared_literals, untestable_literal
from tik_agent.judge.offsets import narrow_offsets, needs_wide_offsets
from tik_agent.judge import phases
from tik_agent.judge.phases import UNMEASURED_S, PhaseWatch, phase_limits
from tik_agent.judge.plan import draw_plan, per_evaluation_cases
from tik_agent.judge.stream import ParityStream
from tik_agent.judge.timedcheck import judge_timed_calls
from tik_agent.spec.cases import Case, make_inputs
from tik_agent.spec.grid import evaluation_cases
from tik_agent.errors import SpecError, UsageError
from tik_agent.sandbox.wire import CaseOutputs
from tik_agent.judge.parity import judge_self
from tik_agent.judge.options import EvalOptions, Reference, sha256_file
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.judge.workerbox import UnreadableWorkerFile, WorkerBox, sandbox_failure
from tik_agent.sandbox.worker import GATE_FILE, PROGRESS_FILE
from tik_agent.spec.schema import KernelSpec
from tik_agent.judge.verdicts import judge_outputs, judge_parity

log = logging.getLogger(__name__)

BACKSTOP_S = 2 * UNMEASURED_S
# Executables Triton runs on a GPU to build kernels and its launcher.
CUDA_TOOLS = ("ptxas", "cuobjdump", "nvdisasm", "gcc", "cc", "clang", "ld", "ldconfig")


def _request(mode: str, kernel: str, device: str, cases: list[Case], **extra) -> dict:
    req = {"mode": mode, "spec_dir": "spec", "kernel": kernel, "device": device,
           "cases": [c.to_dict() for c in cases], "guard": True,
           "allow_subprocess": list(CUDA_TOOLS) if device == "cuda" else []}
    req.update(extra)
    return req


def compute_reference(spec: KernelSpec, options: EvalOptions, cases: list[Case] | None = None) -> Reference:
    """Run the seed over the evaluation cases in a worker; check it against itself."""
    cases = cases if cases is not None else evaluation_cases(spec, options.device)
    outputs, result, seconds = _run_seed(spec, options, cases)
    return _reference(spec, cases, outputs, result, seconds)


def _reference(spec: KernelSpec, cases: list[Case], outputs: dict, result: dict, seconds: dict) -> Reference:
    return Reference({c.id: outputs[c.id].full for c in cases}, result.get("environment", {}),
                     sha256_file(spec.source), list(cases), seconds)


def _run_seed(spec: KernelSpec, options: EvalOptions, cases: list[Case], digests: dict | None = None,
              lenient: frozenset[str] = frozenset(), graph: dict | None = None,
              watching: Callable[[PhaseWatch], None] = lambda watch: None
              ) -> tuple[dict[str, CaseOutputs], dict, dict]:
    """The seed in a worker over ``cases`` (and the timed inputs ``digests``), judged against itself.

    A case the seed fails is bad input (SpecError), unless its id is in
    ``lenient`` (a drawn case: it must not fail a candidate for the seed's
    fault); then it is dropped from the returned outputs with a warning."""
    box = WorkerBox(spec, options.keep_workdir)
    try:
        kernel = box.add("seed_kernel.py", spec.source)
        watch = box.watch({})  # the seed is trusted: one limit for the whole worker
        watching(watch)
        extra = {"digests": digests} if digests else {}
        if graph:
            extra["graph"] = graph
        # The seed is trusted: its worker keeps the generous limit, whatever --timeout says.
        wall = max(options.timeout_s or 0.0, UNMEASURED_S)
        proc = box.run(_request("reference", kernel, options.device, cases, **extra), options, watch, wall)
        result = box.result()
        failure = sandbox_failure(proc, result, watch)
        if failure is not None:
            raise SpecError(f"{spec.source}: the seed itself failed on {options.device}: {failure.reason}")
        payloads = box.outputs()["cases"]
        outputs = {}
        for case in cases:
            out = CaseOutputs.from_payload(payloads[case.id])
            verdict = judge_self(spec, case, out, box.dir / kernel, digest(make_inputs(spec, case, "cpu")))
            if verdict.passed:
                outputs[case.id] = out
                continue
            message = f"{case.id}: [{verdict.failed.value}] {verdict.message}"
            if case.id not in lenient:
                raise SpecError(f"{spec.source}: the seed fails its own checks on {options.device}: {message}")
            log.warning("the seed fails its own checks on a drawn case, which is skipped: %s", message)
        seconds = dict(watch.durations)
        if box.forked:  # a warm fork's start says nothing of the machine: no basis for phase_limits
            seconds.pop("load", None)
        return outputs, result, seconds
    finally:
        box.close()


def evaluate(spec: KernelSpec, candidate: Path, options: EvalOptions, reference: Reference | None = None,
             parent: Path | None = None) -> Verdict:
    start = time.perf_counter()
    verdict = _evaluate(spec, Path(candidate), options, reference, parent)
    verdict.seconds = time.perf_counter() - start
    verdict.candidate_sha256 = sha256_file(candidate) if Path(candidate).is_file() else ""
    verdict.seed_sha256 = sha256_file(spec.source)
    return verdict


def _evaluate(spec, candidate: Path, options: EvalOptions, reference, parent) -> Verdict:
    from tik_agent.sandbox.static import Violation, check_source

    try:
        source = candidate.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{candidate}: cannot read the candidate: {exc}") from None
    entries = (spec.entry,) + ((spec.backward.entry,) if spec.backward else ())
    violations = check_source(source, candidate.name, entry=entries)
    if not violations and needs_wide_offsets(spec):  # the domain reaches past 2**31 elements
        violations = [Violation("offset-width", n.line, n.message) for n in narrow_offsets(source, candidate.name)]
    if violations:
        first = violations[0]
        return Verdict(Outcome.REJECTED_STATIC, f"{candidate.name}:{first.line}: [{first.rule}] {first.message}",
                       static_violations=[{"rule": v.rule, "line": v.line, "message": v.message} for v in violations])
    return evaluate_sandboxed(spec, candidate, options, reference, parent, source)


def evaluate_sandboxed(spec: KernelSpec, candidate: Path, options: EvalOptions, reference: Reference | None = None,
                       parent: Path | None = None, source: str | None = None) -> Verdict:
    """Everything below the static rules: the grid, the seed's workers, the candidate's, the judge.

    Public so that tests can prove the run-time checks on candidates the static
    rules would already have stopped."""
    source = candidate.read_text() if source is None else source
    literals = compared_literals(source, candidate.name)
    problem = untestable_literal(literals, options.device)
    if problem is not None:
        line, message = problem
        return Verdict(Outcome.REJECTED_STATIC, f"{candidate.name}:{line}: [grid-literal] {message}",
                       static_violations=[{"rule": "grid-literal", "line": line, "message": message}])
    fixed = reference.cases if reference is not None else evaluation_cases(spec, options.device)
    known = {c.id for c in fixed}
    extras = [c for c in per_evaluation_cases(spec, options.device, batch_sizes_around(literals)) if c.id not in known]
    kernels = ["candidate", "seed"] + (["parent"] if parent is not None else [])
    graph_rounds = (max(options.rounds, MIN_SAMPLES) if options.device == "cuda" else options.rounds) \
        if options.graph_phase else None
    plan = draw_plan(spec, options.device, options.rounds, options.warmup, kernels,
                     graph_rounds=graph_rounds) if options.timing else None
    digests = plan.candidate_seeds() if plan else None
    lenient = frozenset(c.id for c in extras)
    survey = survey_request(spec, options)
    box = WorkerBox(spec, options.keep_workdir)
    watch = box.watch({}, f"{phases.FACTOR:g}x the seed's time for it, at least {phases.FLOOR_S:g} s")
    gate = Gate(box.dir / GATE_FILE, box.dir / PROGRESS_FILE)
    kernel = "candidate.py"

    def parity_at_gate(seed_value: tuple) -> Verdict | None:  # only a worker that will be timed waits there
        return _parity_at_gate(spec, box, box.dir / kernel, extras, seed_value)

    seed_side = _SeedSide(spec, options, reference, fixed, extras, digests, lenient, watch, len(kernels),
                          gate, plan.graph if plan else None, parity_at_gate if plan is not None else None)
    # With the fixed cases' answers known, each is judged as the worker finishes it (until the gate).
    stream = ParityStream(spec, box, box.dir / kernel, fixed, reference.outputs, watch, seed_side.cancel) \
        if reference is not None and options.early_stop else None
    if stream is not None:
        seed_side.before_gate = stream.stop
    try:
        box.add(kernel, candidate)
        extra = {"seed_kernel": box.add("seed_kernel.py", spec.source)}
        if parent is not None:
            extra["parent_kernel"] = box.add("parent_kernel.py", parent)
        if plan is not None:
            extra["timing"] = dict(plan.to_request(), gate=GATE_FILE, ceilings=options.ceilings)
        if survey is not None:
            extra["survey"] = survey
        # The seed's worker runs beside the candidate's parity phase; the candidate
        # waits at the gate before timing, so nothing else of ours runs while it is timed.
        seed_side.start()
        # Without --timeout the phase limits are the real ones; the overall limit is a backstop.
        wall = options.timeout_s or BACKSTOP_S
        try:
            if stream is not None:
                stream.start()
            proc = box.run(_request("candidate", kernel, options.device, fixed + extras,
                                    stream=stream.count if stream is not None else 0, **extra), options, watch, wall)
        finally:
            gate.worker_ended.set()  # the seed side never waits on a worker that is gone
            if stream is not None:
                stream.stop()
        result = box.result()
        if stream is not None and stream.failure is not None:  # final: the worker was stopped at that case
            seed_side.join(raise_errors=False)
            if seed_side.error is not None and not seed_side.cancelled:
                log.warning("the seed's worker failed beside a candidate that failed parity: %s", seed_side.error)
            verdict = stream.failure
            verdict.environment = dict(reference.environment)  # the killed worker's result.json is not its own
            verdict.isolation = proc.isolation.to_dict() if proc.isolation else None
            return verdict
        reference, extra_outputs, seed_result = seed_side.join()
        if seed_side.early_failure is not None:  # judged at the gate: final, whatever the worker did next
            verdict = seed_side.early_failure
            verdict.environment = (result or {}).get("environment", {})
        else:
            verdict = sandbox_failure(proc, result, watch)
            died = verdict is not None and verdict.outcome is Outcome.CRASHED and result is None
            if died and watch.phase == "parity":
                case = box.case_at_death({c.id for c in fixed + extras})
                verdict.reason = f"{case}: {verdict.reason}" if case else verdict.reason
        if verdict is None:
            cases, expected = _expected(reference, extras, extra_outputs)
            if survey is not None:
                verdict = judge_configurations(spec, survey, result, cases, expected,
                                               lambda new: _run_seed(spec, options, new, lenient=frozenset(
                                                   c.id for c in new))[0],
                                               lambda held, answers: _parity_so_far(spec, box, box.dir / kernel,
                                                                                    held, answers))
        if verdict is None:
            verdict = _judge_left(spec, options.device, box, box.dir / kernel, cases, expected, result)
            if verdict.outcome in (Outcome.PASSED, Outcome.SLOWER) and plan is not None:  # slow or not, judged
                # No timing at all (a worker told to stop, or one that lied) fails here as 0 calls reported.
                timing = result.get("timing") or {}
                failed = judge_timed_calls(plan, timing.get("calls", {}), seed_result.get("digests", {}),
                                           box.dir / kernel)
                if failed is None and plan.graph is not None:
                    failed = judge_graph(plan.graph, timing.get("graph", {}), seed_result.get("graph", {}),
                                         box.dir / kernel)
                if failed is not None:
                    verdict.outcome, verdict.reason = failed.outcome, failed.reason
                    verdict.speedup = verdict.speedup_vs_parent = verdict.speedup_vs_parent_low = None
        verdict.isolation = proc.isolation.to_dict() if proc.isolation else None
        return verdict
    finally:
        gate.worker_ended.set()
        seed_side.join(raise_errors=False)
        box.close()


def _judge_left(spec: KernelSpec, device: str, box: WorkerBox, kernel_file: Path, cases: list[Case],
                expected: dict, result: dict) -> Verdict:
    """The verdict on what the worker left; an outputs file it tore or forged after the gate is
    its integrity failure (named in our words: the parser's message quotes the worker's bytes)."""
    try:
        outputs = box.outputs()
    except UnreadableWorkerFile as exc:
        return Verdict(Outcome.INTEGRITY_FAILED, f"[output] {exc}", environment=result.get("environment", {}))
    return judge_outputs(spec, device, cases, expected, outputs, result, kernel_file)


def _parity_so_far(spec: KernelSpec, box: WorkerBox, kernel_file: Path, cases: list[Case],
                   expected: dict) -> Verdict | None:
    """The first failing case's verdict among ``cases`` (before the far points' cases are
    computed by the seed: :func:`~tik_agent.judge.config_cases.judge_configurations`), or None;
    an outputs file that cannot be read is left to the final judgement, which says so."""
    try:
        outputs = box.outputs()
    except UnreadableWorkerFile:
        return None
    return judge_parity(spec, cases, expected, outputs, kernel_file)[1]


def _expected(reference: Reference, extras: list[Case], extra_outputs: dict) -> tuple[list[Case], dict]:
    """The cases the candidate is judged on, and the seed's full outputs for each (a drawn
    case the seed failed itself is dropped)."""
    cases = reference.cases + [c for c in extras if c.id in extra_outputs]
    expected = dict(reference.outputs, **{c.id: extra_outputs[c.id].full for c in extras if c.id in extra_outputs})
    return cases, expected


def _parity_at_gate(spec: KernelSpec, box: WorkerBox, kernel_file: Path, extras: list[Case],
                    seed_value: tuple) -> Verdict | None:
    """The early judgement (:mod:`tik_agent.judge.gate`): the failure verdict of the parity
    outputs the worker saved before it said it waits at the gate, or None to let it be timed."""
    reference, extra_outputs, _ = seed_value
    cases, expected = _expected(reference, extras, extra_outputs)
    try:
        outputs = box.outputs()
    except Exception as exc:  # the candidate's to write: a torn or forged file is its failure, not ours
        return Verdict(Outcome.INTEGRITY_FAILED, f"[output] the worker said it waits at the gate, but its parity "
                       f"outputs cannot be read ({type(exc).__name__})")
    return judge_parity(spec, cases, expected, outputs, kernel_file)[1]


class _SeedSide:
    """The seed's worker for one evaluation, in a thread: the fixed cases too when
    no reference was given, this evaluation's cases, the digests of the timed inputs.
    When it ends it sets the candidate's phase limits; with ``parity_at_gate``, it
    then judges the candidate's parity as soon as the candidate waits at the gate
    (``early_failure``); then it opens the gate."""

    def __init__(self, spec, options, reference, fixed, extras, digests, lenient, watch: PhaseWatch, kernels: int,
                 gate: Gate, graph: dict | None = None,
                 parity_at_gate: Callable[[tuple], Verdict | None] | None = None):
        self.args = spec, options, reference, fixed, extras, digests, lenient
        self.watch, self.kernels, self.gate, self.graph = watch, kernels, gate, graph
        self.parity_at_gate = parity_at_gate
        self.cancelled = False
        # Called before the gate opens: True when the candidate has already failed (the stream).
        self.before_gate: Callable[[], bool] = lambda: False
        self._watch: PhaseWatch | None = None
        self.value: tuple | None = None
        self.error: BaseException | None = None
        self.early_failure: Verdict | None = None
        self.thread = threading.Thread(target=self._run, name="tik-seed-side", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def cancel(self) -> None:
        """The candidate failed on a fixed case: the seed's outputs are not needed; stop its worker."""
        self.cancelled = True
        self._watching(self._watch)

    def _watching(self, watch: PhaseWatch | None) -> None:
        self._watch = watch
        if watch is not None and self.cancelled:
            watch.abort = "not needed: the candidate already failed parity"

    def _run(self) -> None:
        try:
            self.value = self._seed()
            if self.parity_at_gate is not None and self.gate.worker_waits():
                self.early_failure = self.parity_at_gate(self.value)
        except BaseException as exc:  # re-raised in the caller's thread
            self.error = exc
            self.watch.abort = (f"the seed's own worker failed: {exc}" if self.value is None
                                else f"judging the candidate's parity at the gate failed: {exc}")
        finally:
            # The gate holds what the candidate's worker needs from the seed's: the number of
            # calls per graph of each cell (chosen by trusted code).
            seed_result = self.value[2] if self.value else {}
            calls = {cell: g["calls"] for cell, g in (seed_result.get("graph") or {}).items()}
            # With timing, the worker is at the gate now (or gone): the stream ends before it opens.
            failed = self.before_gate() if self.parity_at_gate is not None else False
            self.gate.open(self.error is None and self.early_failure is None and not failed, calls)

    def _seed(self) -> tuple:
        spec, options, reference, fixed, extras, digests, lenient = self.args
        if reference is None:
            outputs, result, times = _run_seed(spec, options, fixed + extras, digests, lenient, self.graph)
            reference = _reference(spec, fixed, outputs, result, times)
            times = {k: v for k, v in times.items() if k != "parity"}  # already the reference's
        else:
            outputs, result, times = _run_seed(spec, options, extras, digests, lenient, self.graph, self._watching)
        self.watch.limits.update(phase_limits(options, reference, times, self.kernels, self.graph))
        return reference, outputs, result

    def join(self, raise_errors: bool = True) -> tuple:
        if self.thread.is_alive() or self.thread.ident is not None:
            self.thread.join()
        if raise_errors and self.error is not None:
            raise self.error
        return self.value
