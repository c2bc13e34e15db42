"""Promotion, parent selection, budgets, settings and the journal: pure rules, no evaluation."""

from __future__ import annotations

import json
import os

import pytest

from tik_agent.search.budget import Spend, StopReason, gauges, stop_reason
from tik_agent.errors import UsageError
from tik_agent.search.frontier import EXHAUSTED_AFTER, Frontier, Member, attempt_rng
from tik_agent.atomicfile import atomic_write_json
from tik_agent.outcomes import Outcome
from tik_agent.run.journal import AttemptRecord, AttemptStore, Journal, ResumeState
from tik_agent import figures
from tik_agent.search.promotion import Decision, confirm, screen, seed_is_parent, unresolved
from tik_agent.judge.records import Verdict
from tik_agent.run.runconfig import Limits, RunConfig, SearchSettings, parse_duration


def verdict(outcome=Outcome.PASSED, vs_parent=1.5, noise=0.01, reason=None):
    return Verdict(outcome, reason, speedup=vs_parent, speedup_vs_parent=vs_parent, noise=noise)


# --------------------------------------------------------------------------- promotion


@pytest.mark.parametrize("outcome", [o for o in Outcome if o is not Outcome.PASSED])
def test_a_failed_verdict_is_rejected_with_its_own_outcome(outcome):
    d = screen(verdict(outcome, reason="why"), floor=0.02)
    assert d.outcome.value == outcome.value and d.reason == "why"


@pytest.mark.parametrize("vs_parent,noise,expected", [
    (1.50, 0.01, "promising"),
    (1.03, 0.01, "promising"),     # beyond the floor and the noise
    (1.015, 0.001, "1.015x ±0.1% the parent, within the 2.0% promotion margin"),   # within the floor
    (1.015, 0.30, "1.015x ±30% the parent, within the noise (30.0%)"),   # within the floor, however noisy
    (1.10, 0.12, "noisy"),         # above the floor, within the noise: too noisy to rank
    (0.99, 0.05, "0.990x ±5% the parent, within the noise (5.0%)"),
    # The newcomer's trial saw "0.529x ±15% the parent, within the noise (14.8%)": a candidate at
    # half its parent's speed is slower, not within the noise.
    (0.80, 0.01, "0.800x ±1% the parent: slower, beyond the noise (1.0%)"),
    (0.529, 0.148, "0.529x ±15% the parent: slower, beyond the noise (14.8%)"),
])
def test_screen_needs_a_gain_over_the_parent_beyond_noise_and_floor(vs_parent, noise, expected):
    d = screen(verdict(vs_parent=vs_parent, noise=noise), floor=0.02)
    if expected == "promising":
        assert d.outcome is None and not d.noisy
    elif expected == "noisy":   # decides nothing: the loop re-times it
        assert d.outcome is None and d.noisy and d.reason.startswith("too noisy to rank")
    else:
        assert d.outcome is Outcome.NOT_FASTER and d.reason == expected and not d.noisy


def test_a_gain_must_hold_in_every_interleaved_round():
    v = verdict(vs_parent=1.10, noise=0.01)
    v.speedup_vs_parent_low = 0.98
    d = screen(v, floor=0.02)
    assert d.outcome is Outcome.NOT_FASTER and "not faster in every round" in d.reason
    v.speedup_vs_parent_low = 1.04
    assert screen(v, floor=0.02).outcome is None


def test_a_noisy_verdict_is_decided_by_a_lost_round_but_not_by_the_noise():
    v = verdict(vs_parent=1.20, noise=0.40)
    v.speedup_vs_parent_low = 0.95     # lost a round: decided by the paired rounds, whatever the noise
    d = screen(v, floor=0.05)
    assert d.outcome is Outcome.NOT_FASTER and not d.noisy
    v.speedup_vs_parent_low = 1.02     # won every round, gain within the noise: no decision
    d = screen(v, floor=0.05)
    assert d.outcome is None and d.noisy
    v.noise = 0.04                     # the same gain on a quiet machine: promising
    assert screen(v, floor=0.05) == Decision(None, screen(v, floor=0.05).reason)


def test_a_confirmation_too_noisy_to_rank_decides_nothing_until_the_retimes_are_spent():
    d = confirm(verdict(vs_parent=1.2, noise=0.3), 0.05)
    assert d.outcome is None and d.noisy and d.reason.startswith("confirming run: too noisy to rank")
    settled = unresolved(d, confirming=True, retimes=2)
    assert settled.outcome is Outcome.UNCONFIRMED and settled.noisy
    assert settled.reason.endswith("after 2 re-times; not promoted")
    assert unresolved(screen(verdict(vs_parent=1.2, noise=0.3), 0.05), False, 1).outcome is Outcome.NOT_FASTER


def test_a_candidate_from_the_seed_has_one_measurement():
    v = Verdict(Outcome.PASSED, None, speedup=2.5, speedup_low=2.1, noise=0.03)
    seed_is_parent(v)
    assert (v.speedup_vs_parent, v.speedup_vs_parent_low) == (2.5, 2.1)
    assert screen(v, 0.05).outcome is None


@pytest.mark.parametrize("noise, text", [(0.041, "±4%"), (0.004, "±0.4%"), (0.0, "±0%"), (None, "±?"),
                                         (0.63, "±63%")])
def test_every_speedup_is_written_with_its_spread(noise, text):
    assert figures.spread(noise) == text
    assert figures.speedup(2.957, noise) == f"2.957x {text}"
    assert figures.speedups(3.65, 1.21, noise, False) == f"3.650x {text} the seed (1.210x {text} its parent)"
    assert figures.speedups(3.65, 3.65, noise, True) == f"3.650x {text} the seed"   # one measurement, one figure


def test_paired_round_speedups_cancel_drift():
    from tik_agent.judge.timing import paired_speedups

    # The machine slows down 3x over the rounds; the candidate is 1.25x faster in each.
    samples = {"a": {"candidate": [4.0, 8.0, 12.0], "parent": [5.0, 10.0, 15.0]}}
    assert paired_speedups(samples, {"a": 1.0}, "parent") == pytest.approx([1.25, 1.25, 1.25])


def test_screen_without_parent_timing_is_not_faster():
    v = Verdict(Outcome.PASSED, None, speedup=2.0, speedup_vs_parent=None, noise=0.0)
    assert screen(v, 0.02).outcome is Outcome.NOT_FASTER


def test_confirmation_accepts_or_explains():
    assert confirm(verdict(vs_parent=1.4), 0.02).outcome is Outcome.ACCEPTED
    unconfirmed = confirm(verdict(vs_parent=1.01), 0.02)
    assert unconfirmed.outcome is Outcome.UNCONFIRMED and unconfirmed.reason.startswith("confirming run")
    flaky = confirm(verdict(Outcome.PARITY_FAILED, reason="bits differ"), 0.02)
    assert flaky.outcome is Outcome.PARITY_FAILED and "bits differ" in flaky.reason


# --------------------------------------------------------------------------- frontier


def frontier(explore=0.25, size=3):
    f = Frontier(size, explore)
    for name, speedup in [("seed", 1.0), ("a0001", 2.0), ("a0002", 3.0), ("a0003", 1.5)]:
        f.add(Member(f"c-{name}", name, speedup))
    return f


def test_frontier_ranks_and_keeps_the_best_size():
    f = frontier()
    assert [m.name for m in f.top()] == ["a0002", "a0001", "a0003"]
    assert f.best().name == "a0002"


def test_choices_mostly_exploit_sometimes_explore_and_repeat_on_resume():
    f = frontier(explore=0.25)
    picks = [f.choose(attempt_rng(7, i)).name for i in range(1, 401)]
    assert 0.6 < picks.count("a0002") / len(picks) < 0.9
    assert {"a0001", "a0003"} <= set(picks) and "seed" not in picks  # the seed is outside the top 3
    assert picks == [f.choose(attempt_rng(7, i)).name for i in range(1, 401)]
    assert [f.choose(attempt_rng(0, i)).name for i in range(1, 401)] != picks


def test_greedy_frontier_and_exhaustion():
    f = frontier(explore=0.0)
    assert {f.choose(attempt_rng(0, i)).name for i in range(50)} == {"a0002"}
    for _ in range(EXHAUSTED_AFTER):
        f.note("c-a0002", no_code=True)
    assert f.choose(attempt_rng(0, 1)).name == "a0001"
    f.note("c-a0001", no_code=True)
    f.note("c-a0001", no_code=False)  # a candidate in between resets the streak
    assert not f.exhausted("c-a0001")
    for name in ("a0001", "a0003", "seed"):
        for _ in range(EXHAUSTED_AFTER):
            f.note(f"c-{name}", no_code=True)
    assert f.choose(attempt_rng(0, 1)) is None


# --------------------------------------------------------------------------- budgets


def spend(**kw):
    base = dict(attempts=0, in_flight=0, elapsed_s=0.0, tokens=0, cost_usd=0.0, since_improvement=0)
    return Spend(**{**base, **kw})


@pytest.mark.parametrize("limits,used,reason", [
    (Limits(iterations=5), spend(attempts=4), None),
    (Limits(iterations=5), spend(attempts=4, in_flight=1), StopReason.ITERATIONS),
    (Limits(iterations=99, time_s=60), spend(elapsed_s=61), StopReason.TIME),
    (Limits(iterations=99, max_tokens=1000), spend(tokens=1000), StopReason.TOKENS),
    (Limits(iterations=99, max_cost_usd=0.5), spend(cost_usd=0.51), StopReason.COST),
    (Limits(iterations=99, patience=3), spend(since_improvement=3), StopReason.PATIENCE),
    (Limits(iterations=99, patience=3), spend(since_improvement=2), None),
])
def test_stop_reasons(limits, used, reason):
    assert stop_reason(limits, used) == reason


def test_gauges_cover_every_budget():
    g = {x.name: x for x in gauges(Limits(iterations=10, max_cost_usd=2.0), spend(attempts=5, cost_usd=0.5))}
    assert set(g) == {"attempts", "time", "tokens", "cost", "patience"}
    assert g["attempts"].fraction == 0.5 and g["cost"].fraction == 0.25 and g["tokens"].fraction is None


@pytest.mark.parametrize("text,seconds", [("8h", 28800), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                          ("3600", 3600), ("1.5h", 5400), ("2d", 172800)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "8x", "h", "-5", "0", "1h junk"])
def test_parse_duration_rejects_nonsense(text):
    with pytest.raises(UsageError, match="--time-budget"):
        parse_duration(text)


@pytest.mark.parametrize("kw,flag", [({"iterations": 0}, "--iterations"), ({"max_tokens": -1}, "--max-tokens"),
                                     ({"max_cost_usd": 0}, "--max-cost"), ({"patience": 0}, "--patience")])
def test_limits_name_the_bad_flag(kw, flag):
    with pytest.raises(UsageError, match=flag):
        Limits(**kw)


def config(**kw):
    base = dict(run_id="r", seed_name="rmsnorm", seed_source="/s", agent="offline", model=None, base_url=None,
                rng_seed=0, device="cpu", rounds=2, warmup=1, eval_timeout_s=60.0, workers=1,
                limits=Limits(iterations=3), search=SearchSettings(),
                binding={"device": "cpu", "torch": "2.13.0", "triton": "3.9.0"}, created="now")
    return RunConfig(**{**base, **kw})


def test_run_config_round_trip_and_extension(tmp_path):
    c = config()
    c.save(tmp_path)
    assert RunConfig.load(tmp_path) == c
    longer = c.extended(limits={"iterations": 10, "patience": None, "time_s": 60.0}, workers=2)
    assert longer.limits == Limits(iterations=10, time_s=60.0) and longer.workers == 2
    assert longer.seed_name == c.seed_name


def test_noisy_retimes_is_checked_and_defaults_for_older_runs(tmp_path):
    with pytest.raises(UsageError, match="noisy_retimes: must be >= 0 .got -1."):
        SearchSettings(noisy_retimes=-1)
    data = config().to_dict()
    del data["search"]["noisy_retimes"]   # run.json of a run made before the setting existed
    assert RunConfig.from_dict(data).search.noisy_retimes == 2


def test_binding_names_the_field_and_both_values():
    with pytest.raises(UsageError, match=r"triton='3\.9\.0'.*triton='3\.8\.0'"):
        config().check_binding({"device": "cpu", "torch": "2.13.0", "triton": "3.8.0"})
    config().check_binding({"device": "cpu", "torch": "2.13.0", "triton": "3.9.0", "python": "other"})


def test_run_config_schema_is_checked(tmp_path):
    atomic_write_json(tmp_path / "run.json", {"schema": 99})
    with pytest.raises(UsageError, match="schema"):
        RunConfig.load(tmp_path)


# --------------------------------------------------------------------------- journal


def record(aid, outcome=Outcome.NOT_FASTER, **kw):
    return AttemptRecord(attempt_id=aid, index=int(aid[1:]), parent_commit="c0", parent_id="seed",
                         outcome=outcome, **kw)


def test_record_round_trip():
    r = record("a0003", Outcome.ACCEPTED, speedup=2.5, commit="abc", input_tokens=10)
    assert AttemptRecord.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_replay_counts_finished_once_and_finds_unfinished(tmp_path):
    j = Journal(tmp_path)
    j.append("session", t=100.0)
    for aid, idx in (("a0001", 1), ("a0002", 2), ("a0003", 3)):
        j.append("started", attempt_id=aid, index=idx, parent_commit="c0", t=101.0)
    j.append("proposed", attempt_id="a0001", input_tokens=100, output_tokens=20, cost_usd=0.01, t=102.0)
    j.append("proposed", attempt_id="a0002", input_tokens=50, output_tokens=5, cost_usd=None, t=103.0)
    j.append("finished", record=record("a0001").to_dict(), t=110.0)
    j.append("finished", record=record("a0001").to_dict(), t=111.0)  # a duplicate is not a second attempt
    j.append("session", t=500.0)
    j.append("started", attempt_id="a0002", index=2, parent_commit="c0", t=505.0)  # a redo
    state = ResumeState.replay(j.events())
    assert list(state.finished) == ["a0001"]
    assert state.unfinished == ["a0002", "a0003"]
    assert state.next_index == 4
    assert (state.input_tokens, state.output_tokens) == (150, 25) and state.cost_usd == pytest.approx(0.01)
    assert state.elapsed_s == pytest.approx(11.0 + 5.0) and state.sessions == 2


def test_a_torn_last_line_is_dropped(tmp_path):
    j = Journal(tmp_path)
    j.append("session", t=1.0)
    with open(j.path, "a") as fh:
        fh.write('{"event": "started", "attempt_id": "a00')  # power cut mid-write
    assert [e["event"] for e in j.events()] == ["session"]
    j.repair()
    j.append("started", attempt_id="a0001", index=1, parent_commit="c", t=2.0)
    assert [e["event"] for e in j.events()] == ["session", "started"]


def test_a_corrupt_middle_line_is_an_error(tmp_path):
    (tmp_path / "journal.jsonl").write_text('{"event": "session"}\nnot json\n{"event": "session"}\n')
    with pytest.raises(UsageError, match="journal.jsonl:2"):
        Journal(tmp_path).events()


def test_attempt_files_are_write_once_and_set_aside_never_deleted(tmp_path):
    store = AttemptStore(tmp_path)
    path = store.write("a0001", "candidate.py", "x = 1\n")
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert oct(path.stat().st_mode & 0o777) == "0o444"
    with pytest.raises(FileExistsError):
        store.write("a0001", "candidate.py", "x = 2\n")
    first = store.set_aside("a0001")
    store.write("a0001", "candidate.py", "x = 3\n")
    second = store.set_aside("a0001")
    assert [p.name for p in store.interrupted("a0001")] == ["a0001.interrupted-1", "a0001.interrupted-2"]
    assert (first / "candidate.py").read_text() == "x = 1\n" and (second / "candidate.py").read_text() == "x = 3\n"
    assert store.set_aside("a0009") is None
