"""The configuration survey in the sequences layout (attention; issue 21 item 3).

The survey calls the launcher at the *uniform* full launch of each point
(tik_agent.judge.config_sequences), and a change it finds is judged by a parity case
with ``uniform``, which must rebuild the very launch the survey saw.  These tests run
the survey and its analysis in-process (no sandbox, no evaluation: those cost minutes
for attention under the interpreter); a whole evaluation of the corpus file is in
docs/security.md.
"""

import random
import re
from pathlib import Path

import pytest

from tik_agent.judge import configs
from tik_agent.judge.config_cases import boundary_cases, survey_findings
from tik_agent.sandbox import launches
from tik_agent.sandbox.harness import load_entry
from tik_agent.sandbox.survey import _sequence_shapes, run_survey
from tik_agent.spec.cases import Case
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent.spec.sequences import build_launch, case_launch, survey_sizes, token_count

SPEC = load_spec(BUNDLED_DIR / "attention")
SWITCH = Path(__file__).parent / "adversarial" / "sequences" / "token_residue_switch.py"


def _findings(path: Path, secret: int):
    launches.install()
    entry = load_entry(path, SPEC, "survey-test")
    axes = configs.survey_plan(SPEC, "cpu", random.Random(secret))
    record = run_survey(SPEC, entry, axes, [], secret)
    found = survey_findings({"axes": axes, "joint": [], "seed": secret}, record)
    return axes, found, record


@pytest.fixture(scope="module")
def seed_findings():
    return _findings(SPEC.source, 3)


@pytest.mark.parametrize("m, dims", [
    (1, {"Hq": 4, "Hkv": 2, "D": 64, "L": 36, "Q": 5, "P": 8}),
    (3, {"Hq": 8, "Hkv": 1, "D": 128, "L": 17, "Q": 40, "P": 16}),
    (4, {"Hq": 2, "Hkv": 2, "D": 64, "L": 9, "Q": 1, "P": 3}),
])
def test_a_uniform_case_builds_the_launch_the_survey_called(m, dims):
    """The mapping the whole layer stands on: the shapes the survey hands the launcher are
    those of the parity case that judges the point."""
    case = Case(m, dims, "float32", "normal", 5, uniform=True)
    built = build_launch(SPEC, case, case_launch(SPEC, case))
    assert [tuple(t.shape) for t in built] == [tuple(s) for s in _sequence_shapes(SPEC, m, dims)]
    assert token_count(SPEC, case) == survey_sizes(SPEC, m, dims)["tokens"]
    drawn = Case(m, dims, "float32", "normal", 5)  # the grid's drawn lengths: another launch
    assert case.id != drawn.id and ":uniform" in case.id


def test_the_plan_ties_the_sizes_a_launcher_sees():
    axes = {a["dim"]: a for a in configs.survey_plan(SPEC, "cpu", random.Random(0))}
    assert set(axes) == {"M", "Hq", "Hkv", "L", "Q", "P"}  # D is a list of values: its edge cases
    q = axes["Q"]
    _, dims = configs.point_of(q, 100)
    assert dims["Q"] == 100 and dims["L"] >= 100          # every token new: T grows with Q alone
    p = axes["P"]
    widths = {survey_sizes(SPEC, p["m"], configs.point_of(p, v)[1])["width"] for v in p["values"]}
    assert len(widths) == 1                                # the block table keeps its width along P
    hq = axes["Hq"]
    assert all(configs.point_of(hq, v)[1]["Hkv"] == 1 for v in hq["values"])
    # on the CPU every batch the grid and the workload judge and one more, then sampled sizes
    # up to the domain's end (a change there is a refusal: this device does not judge it)
    judged = max([*SPEC.parity.batch_sizes, *(c.m for c in SPEC.workload_for("cpu"))]) + 1
    assert axes["M"]["high"] == judged and set(range(1, judged + 1)) <= set(axes["M"]["values"])
    assert max(axes["M"]["values"]) == SPEC.domain.dims["M"].high


def test_the_seed_is_surveyed_and_its_own_changes_fit_the_budget(seed_findings):
    axes, found, _ = seed_findings
    assert found.refusal is None, found.refusal
    assert 0 < len(found.boundaries) <= configs.budget_of(axes)
    # the page size and the number of sequences reach the seed at run time: no kernel per value
    assert not [b for b in found.boundaries if b.dim in ("P", "M") and "variant" in b.why]
    cases = boundary_cases(SPEC, axes, found, 3)
    assert cases and all(c.uniform and c.origin == "config" for c in cases)


def test_a_launch_switch_on_the_packed_tokens_is_found_and_judged_where_it_switches(seed_findings):
    """token_residue_switch.py widens the KV tile where T % 89 == 61.  Along the chunk axis
    (T = m * Q, every Q up to 128 surveyed) the survey sees another kernel variant, and a
    uniform case lands on it; a size sampled past what the CPU judges (a batch, T = 5 * M,
    or a chunk over 128) may land on it too, and then the candidate is refused outright."""
    for secret in (3, 11):
        axes, found, record = _findings(SWITCH, secret)
        m = axes[0]["m"]
        chunk = next(a for a in axes if a["dim"] == "Q")
        judged_part = dict(chunk, values=[v for v in chunk["values"] if v <= chunk["exhaustive"]])
        along = configs.analyse(judged_part, configs.decode(record)["Q"].get)
        hits = [b for b in along.boundaries if (m * b.value) % 89 == 61]
        assert along.refusal is None and hits and "variant" in hits[0].why, along
        found_q = configs.Findings(boundaries=hits)
        judged = [c for c in boundary_cases(SPEC, axes, found_q, secret) if token_count(SPEC, c) % 89 == 61]
        assert judged and all(c.uniform for c in judged), "no boundary case packs the tokens the switch fires on"
        if found.refusal is not None:  # a sampled size past the judged ones landed on it
            dim, at = re.search(r"changes at (M|Q) = (\d+)", found.refusal).groups()
            assert f"beyond the largest {dim} this device judges" in found.refusal
            assert (int(at) * (5 if dim == "M" else m)) % 89 == 61
        else:
            assert {(b.dim, b.value) for b in hits} <= {(b.dim, b.value) for b in found.boundaries}
    # Negative control: the seed's own survey has no such change, and no fixed case of the
    # grid packs those tokens (so without the survey nothing lands on the switch).
    _, seed, _ = seed_findings
    assert not [b for b in seed.boundaries if "variant" in b.why and b.dim == "Q"]
    assert not [c for c in evaluation_cases(SPEC, "cpu") if token_count(SPEC, c) % 89 == 61]
