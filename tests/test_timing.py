"""Timing rules: weighted speedup, noise, and the per-cell regression cap."""

import pytest

from tik_agent.judge.timing import CellTiming, regressions, stats, weighted_noise, weighted_speedup


def cell(name, seed_ms, cand_ms, weight=1.0, spread=0.0):
    s = stats([seed_ms * (1 - spread), seed_ms, seed_ms * (1 + spread)])
    c = stats([cand_ms * (1 - spread), cand_ms, cand_ms * (1 + spread)])
    return CellTiming(name, "M=1", weight, s, c)


def test_stats_median_and_iqr():
    st = stats([5.0, 1.0, 3.0, 2.0, 4.0])
    assert st.median_ms == 3.0 and st.min_ms == 1.0 and st.n == 5 and st.iqr_ms == pytest.approx(2.0)
    with pytest.raises(ValueError):
        stats([])


def test_weighted_speedup_is_a_ratio_of_weighted_latency_sums():
    cells = [cell("decode", 10.0, 5.0, weight=3.0), cell("train", 100.0, 100.0, weight=1.0)]
    assert weighted_speedup(cells) == pytest.approx((3 * 10 + 100) / (3 * 5 + 100))


def test_regression_beyond_cap_and_noise():
    assert [c.name for c in regressions([cell("a", 10.0, 10.6)])] == ["a"]   # 6% slower, no noise
    assert regressions([cell("a", 10.0, 10.4)]) == []                        # under the 1.05 cap
    assert regressions([cell("a", 10.0, 10.6, spread=0.2)]) == []            # within the noise


def test_a_regression_must_hold_in_every_round():
    c = cell("a", 10.0, 10.6)
    slow_everywhere = CellTiming(c.name, c.shape, c.weight, c.seed, c.candidate, None, (0.9, 0.95, 0.93))
    once_faster = CellTiming(c.name, c.shape, c.weight, c.seed, c.candidate, None, (0.9, 1.02, 0.93))
    assert slow_everywhere.regressed() and not once_faster.regressed()


def test_weighted_noise():
    cells = [cell("a", 10, 10, weight=1.0, spread=0.1), cell("b", 10, 10, weight=3.0, spread=0.0)]
    assert weighted_noise(cells) == pytest.approx(0.25 * cells[0].noise)


def test_cell_round_trip():
    c = cell("a", 10.0, 8.0)
    assert CellTiming.from_dict(c.to_dict()) == c


def _leave_finalizer(ran: list):
    """A started generator in a reference cycle: its ``finally`` runs when the cyclic
    collector frees it (no import needed: what a candidate can do)."""
    def body():
        try:
            yield 1
        finally:
            ran.append(True)

    gen = body()
    for _ in gen:
        break

    def hold():
        return gen, hold


def test_the_wall_clock_timer_runs_no_cyclic_finalizer_inside_the_timed_call():
    import gc

    from tik_agent.backends.timers import WallClockTimer

    ran: list = []
    during: list = []

    def timed():
        junk = [[i] for i in range(20000)]  # far past the collector's allocation threshold
        during.append(bool(ran))
        return len(junk)

    gc.collect()
    _leave_finalizer(ran)
    WallClockTimer().measure(timed)
    assert during == [False]
    gc.collect()
    assert ran == [True]  # collected afterwards, outside the timed region
    assert gc.isenabled()


def test_the_graph_stand_in_runs_no_cyclic_finalizer_inside_a_replay():
    import gc

    from tik_agent.backends.graph_timer import EagerReplayBackend

    ran: list = []
    during: list = []

    def call(_s):
        junk = [[i] for i in range(20000)]
        during.append(bool(ran))
        return len(junk)

    backend = EagerReplayBackend()
    graph, _ = backend.capture(call, [0], 1)
    during.clear()
    gc.collect()
    _leave_finalizer(ran)
    backend.replay_ms(graph)
    backend.eager_ms(call, [0], 1)
    assert during == [False, False]
    gc.collect()
    assert ran == [True] and gc.isenabled()
