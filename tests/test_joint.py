"""The survey's points of combined sizes (tik_agent.judge.joint), on launchers written as
plain functions of the sizes: what each axis predicts, what is judged, what is refused."""

import json
import random

from tik_agent.judge import joint

STRUCTURE = json.dumps([[["kernel", 1], "M", "N", "constexpr BLOCK", "constexpr ROWS", "grid", ["grid rank", 1]]])
WIDE = json.dumps([[["wide_kernel", 9], "M", "N", "constexpr BLOCK", "constexpr ROWS", "grid", ["grid rank", 1]]])


def _axes(high_m=600, high_n=4096):
    base = {"N": 100}
    common = {"m": 8, "dims": base, "dtype": "float32", "device": "cpu"}
    return [{**common, "dim": "M", "values": list(range(1, high_m + 1)), "high": high_m, "exhaustive": high_m,
             "top": high_m},
            {**common, "dim": "N", "values": list(range(1, high_n + 1)), "high": high_n, "exhaustive": high_n,
             "top": high_n}]


def _honest(m, n):
    """BLOCK follows the width, ROWS the batch, the grid the batch and ROWS."""
    block = 1 << max(4, (n - 1).bit_length())
    rows = 1 if m < 64 else 4
    return STRUCTURE, (m, n, block, rows, -(-m // rows))


def _judge(launcher, axes=None, points=None, seen=None):
    axes = axes or _axes()
    points = points if points is not None else joint.draw(axes, random.Random(7))
    seen = seen if seen is not None else []

    def at_point(m, dims):
        seen.append((m, dims["N"]))
        return launcher(m, dims["N"])

    along = {"M": lambda m: launcher(m, 100), "N": lambda n: launcher(8, n)}
    return joint.judge(axes, points, at_point, along)


def test_the_draw_holds_the_corner_and_the_axes_survey_every_coordinate():
    axes = _axes()
    points = joint.draw(axes, random.Random(1))
    assert {"m": 600, "dims": {"N": 4096}} in points and len(points) > joint.SAMPLES // 2
    assert all(1 <= p["m"] <= 600 and 1 <= p["dims"]["N"] <= 4096 for p in points)
    wide = [{**a, "values": a["values"][:10]} for a in axes]
    extended = joint.with_coordinates(wide, points)
    assert {p["m"] for p in points} <= set(extended[0]["values"])
    assert {p["dims"]["N"] for p in points} | {100} <= set(extended[1]["values"])
    assert joint.draw(axes[:1], random.Random(1)) == []  # one axis: nothing to combine


def test_a_separable_launcher_has_nothing_to_judge():
    assert _judge(_honest) == ([], None)


def test_a_kernel_that_follows_one_axis_with_its_own_constexprs_has_nothing_to_judge():
    def wide_rows(m, n):  # another kernel for wide rows; ROWS still follows the batch there
        structure, numbers = _honest(m, n)
        return (WIDE, numbers) if n > 2048 else (structure, numbers)

    assert _judge(wide_rows) == ([], None)


def test_a_switch_on_two_sizes_at_once_is_judged_where_it_starts():
    """Negative control: each axis alone sees the honest launcher here."""
    def switch(m, n):
        structure, numbers = _honest(m, n)
        if m >= 300 and n >= 3000:
            numbers = numbers[:2] + (numbers[2] // 2,) + numbers[3:]
        return structure, numbers

    chosen, refusal = _judge(switch)
    assert refusal is None and len(chosen) == 1, (chosen, refusal)
    point = chosen[0]
    assert (point.m, point.dims) == (300, {"N": 3000}), point
    assert "constexpr or option" in point.why and "from M = 600, N = 4096" in point.why
    # Without the corner and with no drawn point inside the switch, nothing is found: the draw matters.
    assert _judge(switch, points=[{"m": 10, "dims": {"N": 10}}]) == ([], None)


def test_a_constexpr_two_dimensions_move_is_judged():
    def both(m, n):
        structure, numbers = _honest(m, n)
        return structure, numbers[:3] + (1 if m * n < 4000 else 2,) + numbers[4:]

    chosen, refusal = _judge(both)
    assert refusal is None and chosen and all("constexpr or option" in p.why for p in chosen)


def test_a_number_off_its_prediction_is_judged_and_a_flat_grid_is_not():
    def flat(m, n):  # the grid moves with both sizes: no prediction, nothing to judge
        structure, numbers = _honest(m, n)
        return structure, numbers[:4] + (-(-m * n // 1024),)

    assert _judge(flat) == ([], None)

    def chunk(m, n):  # a run-time integer that changes only where both sizes are large
        structure, numbers = _honest(m, n)
        return structure, numbers[:1] + (n if m * n < 10 ** 6 else n + 1,) + numbers[2:]

    chosen, refusal = _judge(chunk)
    assert refusal is None and len(chosen) == 1 and chosen[0].why.startswith(joint.NUMBER), chosen


def test_more_combinations_than_the_budget_are_refused():
    def many(m, n):
        structure, numbers = _honest(m, n)
        return structure, numbers[:3] + ((m * 7 + n * 13) % 11 + 100 if m > 20 and n > 20 else numbers[3],) + numbers[4:]

    chosen, refusal = _judge(many)
    assert not chosen and "more than the 4 an evaluation judges" in refusal, refusal


def test_a_combination_too_large_to_judge_is_refused():
    axes = _axes(high_m=8193, high_n=8192)

    def huge(m, n):
        structure, numbers = _honest(m, n)
        return structure, numbers[:3] + (8 if m >= 4000 and n >= 4000 else numbers[3],) + numbers[4:]

    chosen, refusal = _judge(huge, axes=axes)
    assert not chosen and "more than a case on cpu can judge" in refusal and "M = 4000, N = 4000" in refusal, refusal


def test_a_point_the_record_lacks_is_a_refusal():
    def missing(m, n):
        return None if (m, n) == (600, 4096) else _honest(m, n)

    chosen, refusal = _judge(missing)
    assert not chosen and "did not report M = 600, N = 4096" in refusal, refusal


def test_a_forged_record_is_refused_not_raised():
    def forged(m, n):
        structure, numbers = _honest(m, n)
        return structure, numbers + ((7,) if m > 100 else ())

    chosen, refusal = _judge(forged)
    assert not chosen and "cannot be read (ValueError)" in refusal, refusal


def test_two_launches_at_the_base_are_refused():
    calls = []

    def counting(m, n):  # a launcher that counts its calls
        calls.append(1)
        structure, numbers = _honest(m, n)
        return structure, numbers[:2] + (numbers[2] + len(calls) % 2,) + numbers[3:]

    chosen, refusal = _judge(counting)
    assert not chosen and "follows something other than the sizes" in refusal, refusal
