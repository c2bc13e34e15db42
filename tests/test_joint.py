"""The survey's points of combined sizes (tik_agent.judge.joint and joint_analysis), on
launchers written as plain functions of the sizes: what each axis predicts, what is
judged, what is refused.  The launchers marked "red team" are a helper's, written
against the first version of the layer, each of which it let through."""

import json
import random

import pytest

from tik_agent.judge import joint
from tik_agent.judge.joint_analysis import BUDGET, PAIRINGS
from tik_agent.judge.joint_far import FAR, FAR_ELEMENTS

LABELS = ["M", "N", "constexpr BLOCK", "constexpr ROWS", "option num_warps", "grid"]
STRUCTURE = json.dumps([[["kernel", 1], *LABELS, ["grid rank", 1]]])
WIDE = json.dumps([[["wide_kernel", 9], *LABELS, ["grid rank", 1]]])
SPLIT = json.dumps([[["kernel", 1], *LABELS, "SPLIT", ["grid rank", 1]]])
BLOCK, ROWS, WARPS, GRID = 2, 3, 4, 5


def _axes(high_m=600, high_n=4096, base_n=100, rows=8):
    common = {"m": rows, "dims": {"N": base_n}, "dtype": "float32", "device": "cpu"}
    return [{**common, "dim": "M", "values": list(range(1, high_m + 1)), "high": high_m, "exhaustive": high_m,
             "top": high_m},
            {**common, "dim": "N", "values": list(range(1, high_n + 1)), "high": high_n, "exhaustive": high_n,
             "top": high_n}]


def _honest(m, n):
    """BLOCK and num_warps follow the width, ROWS the batch, the grid the batch and ROWS."""
    block = 1 << max(4, (n - 1).bit_length())
    rows = 1 if m < 64 else 4
    return STRUCTURE, (m, n, block, rows, 4 if block <= 2048 else 8, -(-m // rows))


def _with(numbers, **parts):
    numbers = list(numbers)
    for name, value in parts.items():
        numbers[{"block": BLOCK, "rows": ROWS, "warps": WARPS, "grid": GRID}[name]] = value
    return tuple(numbers)


def _combinations(chosen) -> list:
    """The judged points that are combinations no axis predicts (not predicted pairings, nor
    the far points of variants judged elsewhere)."""
    return [p for p in chosen if "no axis launches" not in p.why and not p.why.startswith(FAR)]


def _far(chosen) -> dict:
    """The far points: {(m, N) where the variant was judged first: (m, N) where again}."""
    out = {}
    for p in chosen:
        if p.why.startswith(FAR):
            start = p.why.split("(from ", 1)[1].split(")", 1)[0]
            m, n = (int(part.split(" = ")[1]) for part in start.split(", "))
            out[(m, n)] = (p.m, p.dims["N"])
    return out


def _judge(launcher, axes=None, points=None, seed=7, pairings=False, boundaries=()):
    """As the worker runs it (the launcher called as asked), then as the parent does on what
    the worker recorded; both must agree.  The predicted pairings drawn for judging, and the
    far points, are left out unless ``pairings``."""
    axes = axes or _axes()
    points = points if points is not None else joint.draw(axes, random.Random(seed))
    axes = joint.with_coordinates(axes, points)
    rows, base_n = axes[0]["m"], axes[0]["dims"]["N"]
    record: dict = {}

    def at_point(m, dims):
        return record.setdefault(("point", joint.key_of(m, dims)), launcher(m, dims["N"]))

    def along(dim):
        return lambda v: record.setdefault((dim, v), launcher(v, base_n) if dim == "M" else launcher(rows, v))

    live = joint.judge(axes, points, at_point, {"M": along("M"), "N": along("N")}, seed, boundaries)
    replayed = joint.judge(axes, points, lambda m, dims: record.get(("point", joint.key_of(m, dims))),
                           {d: (lambda v, d=d: record.get((d, v))) for d in ("M", "N")}, seed, boundaries)
    assert [(p.m, p.dims, p.why) for p in live[0]] == [(p.m, p.dims, p.why) for p in replayed[0]]
    assert live[1] == replayed[1]
    return live if pairings else (_combinations(live[0]), live[1])


def test_the_draw_holds_the_corner_the_lattice_and_the_axes_survey_every_coordinate():
    axes = _axes()
    points = joint.draw(axes, random.Random(1))
    pairs = {(p["m"], p["dims"]["N"]) for p in points}
    assert (600, 4096) in pairs and {(63, 1025), (64, 1024), (65, 1023)} <= pairs  # corner; lattice
    assert len(points) > joint.SAMPLES and all(1 <= m <= 600 and 1 <= n <= 4096 for m, n in pairs)
    assert sum(m >= 300 and n >= 2048 for m, n in pairs) >= joint.NEAR_TOP // 2  # the top half, drawn
    short = [{**a, "values": a["values"][:10]} for a in axes]
    extended = joint.with_coordinates(short, points)
    assert {m for m, _ in pairs} <= set(extended[0]["values"])
    assert {n for _, n in pairs} | {100} <= set(extended[1]["values"])
    assert joint.draw(axes[:1], random.Random(1)) == []  # one axis: nothing to combine
    assert joint.draw(axes, random.Random(2)) != points  # the secret draws the rest


def test_a_separable_launcher_has_nothing_to_judge():
    assert _judge(_honest) == ([], None)


def test_pairings_no_axis_launched_are_judged_a_few_at_a_time_drawn_from_the_secret():
    """ROWS = 4 (from M >= 64) beside a BLOCK other than the base width's is a kernel no axis
    launches: predicted, so no switch, but compiled by no case.  Each evaluation judges a
    few of them, at the smallest sizes that launch them; over secrets, every one."""
    drawn = set()
    for seed in range(16):
        chosen, refusal = _judge(_honest, seed=seed, pairings=True)
        assert refusal is None and not _combinations(chosen)
        paired = [p for p in chosen if "no axis launches" in p.why]
        assert 0 < len(paired) <= PAIRINGS
        starts = {1, 17, 33, 129, 257, 513, 1025, 2049}  # where each block but the base width's (128) starts
        assert all(p.m == 64 and p.dims["N"] in starts for p in paired), chosen
        drawn |= {p.dims["N"] for p in paired}
        # Each is judged again at the widest rows of its block (the far point): N = BLOCK, as
        # many rows as a surveyed point of that kernel had within the far cap.
        far = _far(chosen)
        assert set(far) == {(64, p.dims["N"]) for p in paired}, chosen
        for (_, start), (m, n) in far.items():
            assert n == max(16, 1 << (start - 1).bit_length()) and 64 <= m <= 600 and m * n <= FAR_ELEMENTS["cpu"]
    assert drawn == starts

    def one_block(m, n):  # negative control: a launcher whose pairings the axes all launch
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, block=4096, warps=8)

    assert _judge(one_block, pairings=True) == ([], None)


def test_a_variant_one_axis_finds_is_judged_again_where_the_other_dimensions_are_large():
    """Red team (cand_chunks.py): ROWS = 8 from M = 600, summed one tree per 1024-wide chunk,
    has the seed's bits while a row is one chunk.  The boundary along the batch is judged at
    the axis's base width (100: one chunk); the far point grows the width as far as the
    variant and the far cap allow: N = 3495 at 600 rows, four chunks."""
    def chunks(m, n):
        rows = 8 if m >= 600 else 1
        return STRUCTURE, (m, n, 1024, rows, 4, -(-m // rows))

    axes = _axes(high_m=2000)
    chosen, refusal = _judge(chunks, axes=axes, pairings=True, boundaries=[("M", 600)])
    assert refusal is None and _far(chosen) == {(600, 100): (600, FAR_ELEMENTS["cpu"] // 600)}, chosen
    assert not _combinations(chosen)
    # Negative control: the same launcher with no boundary judged has nothing to judge again.
    assert _judge(chunks, axes=axes, pairings=True) == ([], None)


def test_a_far_point_stays_in_its_variant_and_skips_points_judged_already():
    """BLOCK = the width's power of two: the far point of each block's boundary along N is the
    last width of that block, which the next boundary's left side judges already; only the
    last block's (2049: up to the axis's end, 4096) is new.  The base's block (128) is the
    grid's to judge."""
    bounds = [("N", v) for v in (17, 33, 65, 129, 257, 513, 1025, 2049)]
    only_base = [{"m": 8, "dims": {"N": 100}}]  # no other point surveyed: each far point is grown
    chosen, refusal = _judge(_honest, points=only_base, pairings=True, boundaries=bounds)
    assert refusal is None and _far(chosen) == {(8, 2049): (8, 4096)}, chosen
    # With the survey's points, each far point is the widest surveyed point of its kernel
    # (its block's last width, with the most rows that keep ROWS = 1), none judged already.
    chosen, refusal = _judge(_honest, pairings=True, boundaries=bounds)
    far = {k: v for k, v in _far(chosen).items() if k[0] == 8}
    assert refusal is None and (8, 2049) in far
    sides = {(8, v + d) for _, v in bounds for d in (-1, 0)}
    for (_, start), (m, n) in far.items():
        assert n == 1 << (start - 1).bit_length() and m < 64 and (m, n) not in sides, far


def test_a_far_point_is_the_widest_point_the_survey_saw_the_variant_launch():
    """Red team (third round): three launchers whose far point, grown along the start's line
    alone, stayed within one chunk: the variant narrow on that line (ROWS = 8 at M = 600 only
    up to N = 1024, from M = 601 at every width), absent from a band the bisection probes, or
    starting at M = 1025 (past 2**20 // 1024).  Each is wrong where the variant meets two
    chunks; the far point now lands there."""
    def chunks(rule):
        def launcher(m, n):
            rows = 8 if rule(m, n) else 1
            return STRUCTURE, (m, n, 1024, rows, 4, -(-m // rows))
        return launcher

    cases = {
        "narrow line": (lambda m, n: m >= 601 or (m == 600 and n <= 1024), [("M", 600)], 600),
        "band": (lambda m, n: m >= 600 and (n <= 1024 or 1400 < n <= 1700), [("M", 600)], 600),
        "late start": (lambda m, n: m >= 1025, [("M", 1025)], 1025),
    }
    axes = _axes(high_m=8193, high_n=8192, base_n=256)
    for name, (rule, bounds, start) in cases.items():
        chosen, refusal = _judge(chunks(rule), axes=axes, pairings=True, boundaries=bounds)
        far = _far(chosen)
        assert refusal is None and set(far) == {(start, 256)}, (name, chosen)
        m, n = far[(start, 256)]
        assert rule(m, n) and n > 1024 and m * n <= FAR_ELEMENTS["cpu"], (name, far)
        # Negative control: grown along its line alone (no other point surveyed), it stays in one chunk.
        alone, _ = _judge(chunks(rule), axes=axes, points=[{"m": 8, "dims": {"N": 256}}], pairings=True,
                          boundaries=bounds)
        if name != "late start":  # 2**21 // 1025 reaches two chunks on the line itself
            assert all(n <= 1024 for _, n in _far(alone).values()), (name, alone)


def test_a_kernel_one_axis_swaps_in_keeps_the_parts_the_other_axis_moves():
    def wide_rows(m, n):  # another kernel for wide rows, whose ROWS still follows the batch
        structure, numbers = _honest(m, n)
        return (WIDE, numbers) if n > 2048 else (structure, numbers)

    assert _judge(wide_rows) == ([], None)


def test_a_switch_on_two_sizes_at_once_is_judged_where_it_starts():
    """Negative control: each axis alone sees the honest launcher here."""
    def switch(m, n):
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, rows=8) if m >= 300 and n >= 3000 else numbers

    chosen, refusal = _judge(switch)
    assert refusal is None and {(p.m, p.dims["N"]) for p in chosen} == {(300, 3000)}, (chosen, refusal)
    assert "constexpr or option" in chosen[0].why and "the smallest sizes found" in chosen[0].why
    # With no point inside the switch, nothing is found: the draw is what finds it.
    assert _judge(switch, points=[{"m": 10, "dims": {"N": 10}}]) == ([], None)


def test_each_kernel_variant_of_a_switch_is_judged_not_only_the_smallest():
    """Red team: ROWS = 8 where M >= 300 and N >= 3000 is (BLOCK 4096, ROWS 8) up to N = 4096
    and (BLOCK 8192, ROWS 8) above; the bisection used to keep only ROWS and judge the first."""
    def switch(m, n):
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, rows=8) if m >= 300 and n >= 3000 else numbers

    chosen, refusal = _judge(switch, axes=_axes(high_n=8192))
    assert refusal is None and {(p.m, p.dims["N"]) for p in chosen} == {(300, 3000), (300, 4097)}, chosen


def test_a_kernel_off_both_axes_is_judged_for_every_variant_it_compiles():
    """Red team: a launcher honest on every line an axis passes through (the base's width,
    8 to 24 rows) that swaps in another kernel everywhere else; a harmful variant of it
    where both sizes are large used to hide behind the kernel's first point."""
    def off_lines(m, n):
        structure, numbers = _honest(m, n)
        if n == 100 or 8 <= m <= 24:
            return structure, numbers
        return WIDE, _with(numbers, warps=16) if m >= 400 and n >= 3000 else numbers

    chosen, refusal = _judge(off_lines)
    assert refusal is None or "combinations of sizes" in refusal, refusal
    if refusal is None:
        assert any(p.m >= 400 and p.dims["N"] >= 3000 for p in chosen), chosen


def test_a_constexpr_two_dimensions_move_is_judged_and_too_many_pairings_refused():
    def both(m, n):  # a fixed block: one pairing of ROWS = 2 with it
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, block=1024, warps=4, rows=1 if m * n < 4000 else 2)

    chosen, refusal = _judge(both)
    assert refusal is None and chosen and all("constexpr or option" in p.why for p in chosen), refusal

    def budget(m, n):  # the block follows the width: ROWS = 2 beside each block is another kernel
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, rows=1 if m * n < 4000 else 2)

    chosen, refusal = _judge(budget)
    assert not chosen and "combinations of sizes" in refusal, refusal  # honest, and refused: say so


def test_a_flat_grid_is_not_judged_and_a_run_time_switch_is():
    def flat(m, n):  # the grid moves with both sizes, and a floor hides a change along one
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, grid=-(-m * n // 1024))

    assert _judge(flat) == ([], None)

    def split(m, n):  # a run-time integer that changes only where both sizes are large
        structure, numbers = _honest(m, n)
        return SPLIT, numbers + (2 if m * n >= 10 ** 6 else 1,)

    chosen, refusal = _judge(split)
    assert refusal is None and chosen and all(p.why.startswith(joint.NUMBER) for p in chosen), (chosen, refusal)


def test_a_product_of_the_sizes_is_predicted_and_one_more_where_both_are_large_is_judged():
    """Red team: ``numel = M * N + min(1, M // 300) * min(1, N // 3000)``, a run-time integer
    the kernel compares with its index, was predicted nowhere (two axes move it)."""
    def numel(flag):
        def launcher(m, n):
            structure, numbers = _honest(m, n)
            extra = min(1, m // 300) * min(1, n // 3000) if flag else 0
            return SPLIT, numbers + (m * n + extra,)
        return launcher

    assert _judge(numel(False)) == ([], None)  # M * N itself: a bilinear rule, no combination
    chosen, refusal = _judge(numel(True))
    assert refusal is not None or any(p.m >= 300 and p.dims["N"] >= 3000 for p in chosen), (chosen, refusal)

    def tiles(m, n):  # tiles of each dimension, multiplied: a product rule
        structure, numbers = _honest(m, n)
        return SPLIT, numbers + (-(-m // 16) * -(-n // 64),)

    assert _judge(tiles) == ([], None)

    def flat_tiles(m, n):  # a floor of M * N fits no rule, and its floor moves off the prediction
        structure, numbers = _honest(m, n)
        return SPLIT, numbers + (-(-m * n // 1024),)

    chosen, refusal = _judge(flat_tiles)  # honest, and refused: docs/security.md says so
    assert not chosen and "combinations of sizes" in refusal, refusal


def test_a_number_two_axes_move_at_the_corner_is_still_judged_elsewhere():
    """Red team: SPLIT moved by both axes at the corner only used to be predicted nowhere."""
    def unlocked(m, n):
        structure, numbers = _honest(m, n)
        split = 1 + (m > 590) + (n > 4000)  # a run-time integer, not a grid entry
        if 100 <= m <= 500 and 2100 <= n <= 3500:
            split = 3
        return SPLIT, numbers + (split,)

    chosen, refusal = _judge(unlocked)
    assert refusal is None and any(100 <= p.m <= 500 and 2100 <= p.dims["N"] <= 3500 for p in chosen), chosen


def test_a_number_in_a_kernel_one_axis_swaps_in_is_predicted():
    """Red team: a run-time integer of a kernel the width swaps in went unchecked."""
    def chunked(m, n):
        structure, numbers = _honest(m, n)
        if n <= 2048:
            return SPLIT, numbers + (1,)
        return json.dumps([[["split_kernel", 5], *LABELS, "SPLIT", ["grid rank", 1]]]), \
            numbers + (4 if m < 300 else 3,)

    chosen, refusal = _judge(chunked)
    assert refusal is None and any(p.m >= 300 and p.dims["N"] > 2048 for p in chosen), (chosen, refusal)


@pytest.mark.parametrize("kind", ["variants", "numbers"])
def test_more_combinations_than_the_budget_are_refused(kind):
    """Red team: numbers past the budget used to be dropped (decoys filled it)."""
    def many(m, n):
        structure, numbers = _honest(m, n)
        if m <= 20 or n <= 20 or m > 590:
            return SPLIT, numbers + (1,)
        odd = (m * 7 + n * 13) % (BUDGET + 5) + 100
        return SPLIT, (_with(numbers, warps=odd) + (1,)) if kind == "variants" else numbers + (odd,)

    chosen, refusal = _judge(many)
    assert not chosen and f"more than the {BUDGET} an evaluation judges" in refusal, refusal


def test_a_combination_too_large_to_judge_is_refused():
    def huge(m, n):
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, rows=8) if m >= 4000 and n >= 4000 else numbers

    chosen, refusal = _judge(huge, axes=_axes(high_m=8193, high_n=8192))
    assert not chosen and "more than a case on cpu can judge" in refusal and "M = 4000, N = 4000" in refusal, refusal


def test_a_point_the_record_lacks_is_a_refusal():
    axes, points = _axes(), [{"m": 600, "dims": {"N": 4096}}]
    chosen, refusal = joint.judge(joint.with_coordinates(axes, points), points, lambda m, dims: None,
                                  {"M": lambda v: _honest(v, 100), "N": lambda v: _honest(8, v)})
    assert not chosen and "did not report M = 600, N = 4096" in refusal, refusal


@pytest.mark.parametrize("forgery", ["numbers", "nesting"])
def test_a_forged_record_is_refused_not_raised(forgery):
    """Red team: a structure nested past the parser's depth raised RecursionError out of the judge."""
    deep = '["raised", ' + "[" * 100000

    def forged(m, n):
        structure, numbers = _honest(m, n)
        if m > 100:
            return (structure, numbers + (7,)) if forgery == "numbers" else (deep, numbers)
        return structure, numbers

    chosen, refusal = _judge(forged)
    assert not chosen and "cannot be read" in refusal, refusal


def test_two_launches_at_the_base_are_refused():
    calls = []

    def counting(m, n):  # a launcher that counts its calls
        calls.append(1)
        structure, numbers = _honest(m, n)
        return structure, _with(numbers, block=numbers[BLOCK] + len(calls) % 2)

    chosen, refusal = joint.judge(_axes(), [], lambda m, dims: counting(m, dims["N"]),
                                  {"M": lambda v: counting(v, 100), "N": lambda v: counting(8, v)})
    assert not chosen and "follows something other than the sizes" in refusal, refusal


def test_the_host_ops_refusal_of_a_survey_call_is_the_workers_verdict_not_a_missing_point():
    """Red team: the judge's catch-all swallowed it, and the parent then reported a missing point."""
    from tik_agent.sandbox.hostops import HostComputeError

    def refused(m, dims):
        raise HostComputeError("host compute: aten.mul.Tensor outside a Triton launch")

    axes, points = _axes(), [{"m": 600, "dims": {"N": 4096}}]
    with pytest.raises(HostComputeError):
        joint.judge(joint.with_coordinates(axes, points), points, refused,
                    {"M": lambda v: _honest(v, 100), "N": lambda v: _honest(8, v)})
