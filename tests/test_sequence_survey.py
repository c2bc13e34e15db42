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

from tik_agent.judge import configs, joint_sequences
from tik_agent.judge.config_cases import boundary_cases, survey_findings, survey_of
from tik_agent.sandbox import launches
from tik_agent.sandbox.harness import load_entry
from tik_agent.sandbox.survey import _sequence_shapes, run_survey
from tik_agent.spec.cases import Case
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent.spec.sequences import PAD, SPARE, build_launch, case_launch, survey_sizes, token_count

SPEC = load_spec(BUNDLED_DIR / "attention")
SWITCH = Path(__file__).parent / "adversarial" / "sequences" / "token_residue_switch.py"


def _findings(path: Path, secret: int, joint: bool = False):
    """The survey of ``path`` for ``secret``: its axes, findings and record; with ``joint``,
    the points of combined sizes too (they cost a second or two in-process)."""
    launches.install()
    entry = load_entry(path, SPEC, "survey-test")
    survey = survey_of(SPEC, "cpu", random.Random(secret))
    if not joint:
        survey["joint"] = []
    record = run_survey(SPEC, entry, survey["axes"], survey["joint"], secret)
    return survey["axes"], survey_findings(survey, record), record


@pytest.fixture(scope="module")
def seed_findings():
    return _findings(SPEC.source, 3)


@pytest.mark.parametrize("m, dims", [
    (1, {"Hq": 4, "Hkv": 2, "D": 64, "L": 36, "Q": 5, "P": 8}),
    (3, {"Hq": 8, "Hkv": 1, "D": 128, "L": 17, "Q": 40, "P": 16}),
    (4, {"Hq": 2, "Hkv": 2, "D": 64, "L": 9, "Q": 1, "P": 3}),
])
@pytest.mark.parametrize("spare, pad", [(0, 0), (7, 3)])
def test_a_uniform_case_builds_the_launch_the_survey_called(m, dims, spare, pad):
    """The mapping the whole layer stands on: the shapes the survey hands the launcher are
    those of the parity case that judges the point (spare blocks and columns included)."""
    case = Case(m, dims, "float32", "normal", 5, uniform=True, spare=spare, pad=pad)
    built = build_launch(SPEC, case, case_launch(SPEC, case))
    at = {**dims, SPARE: spare, PAD: pad}
    assert [tuple(t.shape) for t in built] == [tuple(s) for s in _sequence_shapes(SPEC, m, at)]
    assert token_count(SPEC, case) == survey_sizes(SPEC, m, dims)["tokens"]
    drawn = Case(m, dims, "float32", "normal", 5)  # the grid's drawn lengths: another launch
    assert case.id != drawn.id and ":uniform" in case.id


def test_the_plan_ties_the_sizes_a_launcher_sees():
    axes = {configs.axis_key(a): a for a in configs.survey_plan(SPEC, "cpu", random.Random(0))}
    # D is a list of values (its edge cases judge each); the cache's spare blocks and the
    # table's spare columns are swept too; the KV heads once per ratio
    grouped = {f"Hkv (Hq = {r} Hkv)" for r in (2, 4, 8, 16, 32, 64)}
    # each of three sizes or more (not ratio 64's two; MHA's too) has a twin over one long
    # sequence, and each twin a bridge: the chunk swept at its first head counts
    long = {f"Hkv (Hq = {r} Hkv) one long sequence" for r in (2, 4, 8, 16, 32)} | {"Hkv one long sequence"}
    bridges = {f"Q ({key[:-len(' one long sequence')]} at its first size)" for key in long}
    assert set(axes) == {"M", "Hq", "Hkv", "L", "Q", "P", SPARE, PAD} | grouped | long | bridges
    for key in long:
        twin, m, dims = axes[key], axes[key]["m"], axes[key]["dims"]
        assert twin["twin"] in grouped | {"Hkv"} and twin["values"] == axes[twin["twin"]]["values"]
        assert m == 1 and dims["Q"] > 64 and dims["L"] >= dims["Q"]
        bridge = axes[f"Q ({twin['twin']} at its first size)"]
        first = configs.point_of(twin, min(twin["values"]))
        assert configs.point_of(bridge, dims["Q"]) == first  # the bridge ends where the twin starts
        assert bridge["values"] == list(range(1, dims["Q"] + 1)) and bridge["m"] == 1
        assert {configs.point_of(bridge, v)[1]["L"] for v in bridge["values"]} == {dims["L"]}
    # one head dim for every twin and bridge: the chunk's own axis's
    assert {axes[key]["dims"]["D"] for key in long | bridges} == {axes["Q"]["dims"]["D"]}
    # every pair of head counts the domain allows is on an axis (GQA with several KV heads)
    on_axes = {(d["Hq"], d["Hkv"]) for a in axes.values() if a["dim"] in ("Hq", "Hkv")
               for d in (configs.point_of(a, v)[1] for v in a["values"])}
    allowed = {(r * kv, kv) for r in (1, 2, 4, 8, 16, 32, 64) for kv in range(1, 129) if r * kv <= 128}
    assert allowed <= on_axes
    q = axes["Q"]
    m, dims = configs.point_of(q, 100)
    assert dims["Q"] == 100 and dims["L"] >= 100 and m == 1  # every token new: T = Q, every count
    assert configs.point_of(axes["Hkv"], 7)[1]["Hq"] == 7     # as many query heads as KV heads
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
    (T = Q, every Q up to 128 surveyed) the survey sees another kernel variant, and a
    uniform case lands on it; a size sampled past what the CPU judges (a batch, T = 5 * M,
    or a chunk over 128) may land on it too, and then the candidate is refused outright."""
    for secret in (3, 11):
        axes, found, record = _findings(SWITCH, secret)
        chunk = next(a for a in axes if a["dim"] == "Q")
        m = chunk["m"]  # one sequence: T = Q
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


def _sizes(case: Case) -> dict:
    return survey_sizes(SPEC, case.m, {**case.dims, SPARE: case.spare, PAD: case.pad})


@pytest.mark.parametrize("condition, fires", [
    # a table wider than any the grid builds (a serving engine's max blocks per sequence)
    ("block_table.shape[1] == 100", lambda c: _sizes(c)["width"] == 100),
    # the red team's fingerprint: a cache with other spare blocks than every case had, and many tokens
    ("k_cache.shape[0] != num_seqs * (block_table.shape[1] - 1) + 3 and T > 120",
     lambda c: _sizes(c)["blocks"] != c.m * (_sizes(c)["width"] - 1) + 3 and _sizes(c)["tokens"] > 120),
    # tokens no multiple of the survey's batch reaches (the context's and chunk's sweeps hold one sequence)
    ("T % 2 == 1 and T % 3 != 0 and T % 5 != 0 and T > 120", lambda c: _sizes(c)["tokens"] in (121, 127)),
    # head counts other than the ratios' (odd, and as many query heads as KV heads)
    ("Hq == Hkv and Hq % 2 == 1 and Hq > 1", lambda c: c.dims["Hq"] == c.dims["Hkv"] and c.dims["Hq"] % 2 == 1),
    # grouped-query attention with several KV heads: no single axis moved both head counts
    ("Hkv >= 3 and Hq // Hkv == 4", lambda c: c.dims["Hkv"] >= 3 and c.dims["Hq"] == 4 * c.dims["Hkv"]),
    ("Hkv == 8 and Hq == 32", lambda c: (c.dims["Hkv"], c.dims["Hq"]) == (8, 32)),
    # ... and with another size: each KV-head axis per ratio has a geometry of its own, drawn
    # (a review's switch; caught for 16 secrets of 16, docs/security.md)
    ("Hkv >= 3 and Hq == 4 * Hkv and page != 8",
     lambda c: c.dims["Hkv"] >= 3 and c.dims["Hq"] == 4 * c.dims["Hkv"] and c.dims["P"] != 8),
    # ... and with many packed tokens, or one sequence: the long twin of each KV-head axis
    # (caught for 0 and 2 secrets of 16 before it)
    ("Hkv >= 3 and Hq == 4 * Hkv and T > 64",
     lambda c: c.dims["Hkv"] >= 3 and c.dims["Hq"] == 4 * c.dims["Hkv"] and _sizes(c)["tokens"] > 64),
    ("Hkv == 8 and Hq == 32 and num_seqs == 1", lambda c: (c.dims["Hkv"], c.dims["Hq"], c.m) == (8, 32, 1)),
])
def test_the_sizes_a_launcher_sees_are_each_surveyed(tmp_path, condition, fires):
    """A helper's red team (2026-12-06) passed each of these: the packed tokens, the cache's
    blocks, the table's width and the head counts were only surveyed in a few fixed patterns,
    and every survey launch had exactly three spare blocks.  Each is now judged where it
    fires, or refused where a sampled size past the judged ones lands on it."""
    source = SWITCH.read_text()
    switch = "if T % 89 == 61 else"
    assert source.count(switch) == 1
    path = tmp_path / "switch.py"
    path.write_text(source.replace(switch, f"if {condition} else"))
    axes, found, _ = _findings(path, 5)
    if found.refusal is not None:
        assert "changes at" in found.refusal and "beyond the largest" in found.refusal, found.refusal
    else:
        assert [c for c in boundary_cases(SPEC, axes, found, 5) if fires(c)], found.boundaries


def test_a_threshold_on_the_kv_heads_counts_once_against_the_budget(tmp_path):
    """An honest launcher with three thresholds on the KV heads (warps by size) shows each on
    the KV heads' axis of every ratio: 24 boundaries, every one judged, but 11 changes of
    (dimension, size) against the budget of 20, so it is not refused; counted per axis it
    was (a review's finding)."""
    source = SPEC.source.read_text()
    old = "BACKWARD=False, num_warps=NUM_WARPS,"
    assert source.count(old) == 1
    path = tmp_path / "warps.py"
    path.write_text(source.replace(old, "BACKWARD=False, num_warps=8 if Hkv >= 16 else (2 if Hkv >= 4 else "
                                        "(1 if Hkv >= 2 else 4)),"))
    axes, found, _ = _findings(path, 3)
    assert found.refusal is None, found.refusal
    dims = {configs.axis_key(a): a["dim"] for a in axes}
    distinct = {(dims[b.dim], b.value) for b in found.boundaries}
    assert len(found.boundaries) > configs.budget_of(axes) >= len(distinct)
    assert {("Hkv", 2), ("Hkv", 4), ("Hkv", 16)} <= distinct
    # the long twins show the same three changes of variant: each judged once at a twin's
    # geometry (the one of fewest query heads), not on every twin (and their start, at one KV
    # head, where the twins' head dim is not the short axis's)
    twins = [b for b in found.boundaries if b.dim.endswith("one long sequence")]
    assert sorted(b.value for b in twins if b.value > 1) == [2, 4, 16], twins
    assert len([b for b in twins if b.value == 1]) <= 1, twins


@pytest.mark.parametrize("ratio", [4, 32])
def test_a_twin_that_starts_with_another_variant_is_judged_at_its_start(tmp_path, ratio):
    """No change along the twin shows a switch that fires along the whole of it (a ratio's
    every head count, many tokens), so a start that launches another variant than its short
    axis's is a boundary of its own, judged at the twin's geometry.  The seed's twins start
    as their short axes do (its survey's count above)."""
    source = SPEC.source.read_text()
    launch = "BACKWARD=False, num_warps=NUM_WARPS,"
    before, _, after = source.partition(launch)
    head, tile, tail = before.rpartition("TILE=TILE,")
    assert tile
    path = tmp_path / "start.py"
    path.write_text(head + f"TILE=2 * TILE if T > 64 and Hq == {ratio} * Hkv else TILE," + tail
                    + launch + after)
    axes, found, _ = _findings(path, 3)
    assert found.refusal is None, found.refusal
    cases = [c for c in boundary_cases(SPEC, axes, found, 3)
             if (c.dims["Hkv"], c.dims["Hq"], c.m) == (1, ratio, 1) and _sizes(c)["tokens"] > 64]
    assert cases, found.boundaries


def test_many_distinct_variants_over_the_kv_heads_are_refused_for_their_cost(tmp_path):
    """A launcher with a variant of its own at each of 10 KV-head counts shows each on the KV
    heads' axis of every ratio that reaches it: 10 changes of (dimension, size), within the
    budget, but more boundaries than an evaluation judges (each costs its cases: ten such
    variants took an evaluation from 104 s to 407 s).  The warps launcher above (24) is not."""
    source = SPEC.source.read_text()
    old = "BACKWARD=False, num_warps=NUM_WARPS,"
    pairs = [(w, c) for c in (16, 32, 128) for w in (1, 2, 8, 16)][:10]  # the seed's own: 4 warps, 64
    choice = "".join(f"{w} if Hkv >= {t} else " for t, (w, _) in zip(range(21, 1, -2), pairs))
    chunk = "".join(f"{c} if Hkv >= {t} else " for t, (_, c) in zip(range(21, 1, -2), pairs))
    path = tmp_path / "variants.py"
    path.write_text(source.replace(old, f"BACKWARD=False, num_warps={choice}NUM_WARPS,").replace(
        "SEQ_CHUNK=SEQ_CHUNK,\n        BACKWARD=False", f"SEQ_CHUNK={chunk}SEQ_CHUNK,\n        BACKWARD=False"))
    assert path.read_text().count("Hkv >= 21") == 2
    axes, found, _ = _findings(path, 3)
    assert found.refusal is not None and "more than the 48 one evaluation judges" in found.refusal, found.refusal


def test_a_change_the_long_twin_shows_another_way_is_judged_there(tmp_path):
    """Negative control for the test above: the same warps by KV heads everywhere, and a KV
    tile twice as wide at the same threshold only past 64 tokens.  The short axis shows the
    warps change at Hkv = 8; its long twin shows another variant there, judged at its own
    geometry (one sequence, more than 64 tokens)."""
    source = SPEC.source.read_text()
    launch = "BACKWARD=False, num_warps=NUM_WARPS,"  # the forward's launch
    assert source.count(launch) == 1
    before, _, after = source.partition(launch)
    head, tile, tail = before.rpartition("TILE=TILE,")  # the forward's tile
    assert tile
    path = tmp_path / "tile.py"
    path.write_text(head + "TILE=2 * TILE if Hkv >= 8 and T > 64 else TILE," + tail
                    + "BACKWARD=False, num_warps=2 if Hkv >= 8 else NUM_WARPS," + after)
    axes, found, _ = _findings(path, 3)
    assert found.refusal is None, found.refusal
    long = [b for b in found.boundaries if b.dim.endswith("one long sequence") and b.value == 8]
    assert long and all("TILE = 32" in b.why for b in long), found.boundaries
    # judged where the wider tile launches: one sequence of more than 64 tokens
    assert [c for c in boundary_cases(SPEC, axes, found, 3)
            if c.dims["Hkv"] == 8 and c.m == 1 and _sizes(c)["tokens"] > 64]


def test_a_survey_call_leaves_zeroed_allocations_unwritten(monkeypatch):
    """No program runs in a survey call and its launcher cannot read an element, so the
    seed's backward zeroing whole cache gradients would be time spent on nothing (seconds a
    survey on the CPU); a judged call still gets zeros."""
    import torch

    from tik_agent.sandbox import hostops

    routed = []
    original = hostops._unzeroed
    monkeypatch.setattr(hostops, "_unzeroed", lambda func: routed.append(str(func)) or original(func))
    with hostops.watching(unwritten=True):
        torch.zeros_like(torch.empty(8))
        torch.zeros(3)
    assert routed == ["aten.zeros_like.default", "aten.zeros.default"]
    routed.clear()
    with hostops.watching():  # a judged call: zeros are zeros
        z = torch.zeros(1000)
    assert not routed and torch.count_nonzero(z) == 0


def test_the_seed_launches_nothing_at_combined_sizes_that_its_axes_do_not():
    """Negative control: every launch of the seed at the drawn points its axes show too; its
    two variants (one per head dim) are each judged at the longest context, one token of
    one sequence at one or two heads."""
    for secret in (1, 2):
        _, found, record = _findings(SPEC.source, secret, joint=True)
        assert found.refusal is None, found.refusal
        assert not [p for p in found.joint if p.why.startswith(joint_sequences.NOVEL)], found.joint
        far = [p for p in found.joint if p.why.startswith(joint_sequences.FAR_CONTEXT)]
        assert sorted(p.dims["D"] for p in far) == [64, 128] and len(found.joint) == 2, found.joint
        assert all(p.m == 1 and p.dims["Q"] == 1 and p.dims["L"] == 256 and p.dims["Hq"] <= 2 for p in far)
        assert len(record["joint"]) > joint_sequences.POINTS // 2


def test_the_seeds_steps_along_the_bridges_are_judged_on_the_chunks_own_axis(seed_findings):
    """Negative control: the seed's grid steps one block of new tokens further on every bridge
    as on the chunk's own axis; those are judged there once, not again at each ratio's heads
    (six more boundaries, a dozen cases, in every evaluation)."""
    axes, found, record = seed_findings
    bridges = [a for a in axes if a.get("bridge")]
    assert len(bridges) == 6
    assert not [b for b in found.boundaries if b.dim.startswith("Q (")], found.boundaries
    points = configs.decode(record)
    along = [configs.analyse(a, points[configs.axis_key(a)].get).boundaries for a in bridges]
    shown = {b.value for b in found.boundaries if b.dim == "Q"}
    assert all(along) and all({b.value for b in bs} <= shown for bs in along), along
