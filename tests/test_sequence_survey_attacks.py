"""Hostile launchers against the sequences layout's survey (attention), each a patch of
the seed and where it fires: the red teams' and the reviews' switches that escaped a
version of the survey, kept so that each stays judged (tests/test_sequence_survey.py has
the survey's own tests and helpers)."""

import pytest

from test_sequence_survey import SPEC, _findings, _sizes
from tik_agent.judge import joint_sequences
from tik_agent.judge.config_cases import boundary_cases
from tik_agent.spec.cases import Case


def _patched(tmp_path, patches: list):
    """The seed with each (old, new) applied (each old once in it), as a file."""
    source = SPEC.source.read_text()
    for old, new in patches:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = tmp_path / "patched.py"
    path.write_text(source)
    return path

R4 = "Hkv >= 8 and Hq == 4 * Hkv"
FORWARD_TILE = ("TILE=TILE,\n        BLOCK_Q=BLOCK_Q, HEADS=HEADS_PER_PROGRAM, ROWS=max(MIN_DOT, "
                "triton.next_power_of_2(BLOCK_Q * HEADS_PER_PROGRAM)), SEQ_CHUNK=SEQ_CHUNK,\n        BACKWARD=False")
# A red team's launchers against the twins' first dedupe (2026-12-06), kept as patches of the
# seed (a list of (old, new), each old once in the seed): each missed 8 of 8 secrets then.
RED_TEAM = {
    # a grid rank added at Hkv = 8 everywhere: the short axis and the twin gave the same reason
    "grid rank": [("    grid = (T // BLOCK_Q + num_seqs, Hkv * triton.cdiv(group, HEADS_PER_PROGRAM))\n",
                   f"    grid = (T // BLOCK_Q + num_seqs, Hkv * triton.cdiv(group, HEADS_PER_PROGRAM))"
                   f" + ((1,) if {R4} else ())\n"),
                  (FORWARD_TILE, f"TILE=2 * TILE if T > 64 and {R4} else " + FORWARD_TILE[5:])],
    # a tile twice as wide: the seed's bits on contexts of 16 or fewer, where the short axis judged it
    "wide tile": [(FORWARD_TILE, f"TILE=2 * TILE if {R4} else " + FORWARD_TILE[5:])],
    # a bool constexpr the reason did not list
    "bool constexpr": [("    BACKWARD: tl.constexpr,\n):", "    BACKWARD: tl.constexpr,\n    LONG: tl.constexpr = False,\n"
                        "    SEL: tl.constexpr = 0,\n):"),
                       ("        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n",
                        "        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n        if LONG and SEL == 1:\n"
                        "            p = tl.where(sees, tl.exp2((s - m_new[:, None]) * 1.4426950408889634), p)\n"),
                       ("BACKWARD=False, num_warps=NUM_WARPS,",
                        f"BACKWARD=False, LONG=bool(T > 64 and Hq == 4 * Hkv), SEL=1 if {R4} else 0, num_warps=NUM_WARPS,")],
}


@pytest.mark.parametrize("name", sorted(RED_TEAM))
def test_the_red_teams_launchers_against_the_twins_are_judged_where_they_switch(tmp_path, name):
    source = SPEC.source.read_text()
    for old, new in RED_TEAM[name]:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = tmp_path / "red.py"
    path.write_text(source)
    for secret in (1, 2):
        axes, found, _ = _findings(path, secret)
        assert found.refusal is None, found.refusal
        hits = [c for c in boundary_cases(SPEC, axes, found, secret)
                if c.dims["Hkv"] >= 8 and c.dims["Hq"] == 4 * c.dims["Hkv"] and c.dims["L"] > 16
                and (name == "wide tile" or _sizes(c)["tokens"] > 64)]
        assert hits, (secret, found.boundaries)


BUMP = [("    BACKWARD: tl.constexpr,\n):", "    BACKWARD: tl.constexpr,\n    bump=0,\n):"),
        ("        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n",
         "        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n        if bump != 0:\n"
         "            p = tl.where(sees, tl.exp2((s - m_new[:, None]) * 1.4426950408889634), p)\n")]
# What the twins alone missed (red team, 2026-12-06; in-process over 6 secrets), each a patch
# of the seed, and where it fires.
MISSED = {
    # a run-time integer constant along a whole twin (judged 2 of 6, by chance): the bridge
    "run-time integer": (BUMP + [("BACKWARD=False, num_warps=NUM_WARPS,",
                                  "BACKWARD=False, bump=int(T > 64 and Hq == 4 * Hkv), num_warps=NUM_WARPS,")],
                         lambda c: c.dims["Hq"] == 4 * c.dims["Hkv"] and _sizes(c)["tokens"] > 64),
    # MHA with many tokens, or one sequence (0 of 6): the MHA axis's twin
    "MHA tokens": ([(FORWARD_TILE, "TILE=2 * TILE if Hkv >= 3 and T > 64 and Hq == Hkv else " + FORWARD_TILE[5:])],
                   lambda c: c.dims["Hkv"] >= 3 and c.dims["Hq"] == c.dims["Hkv"] and _sizes(c)["tokens"] > 64),
    "MHA one sequence": ([(FORWARD_TILE, "TILE=2 * TILE if Hkv >= 3 and num_seqs == 1 and Hq == Hkv else "
                           + FORWARD_TILE[5:])],
                         lambda c: c.dims["Hkv"] >= 3 and c.dims["Hq"] == c.dims["Hkv"] and c.m == 1),
}


@pytest.mark.parametrize("name", sorted(MISSED))
def test_what_the_twins_alone_missed_is_judged_where_it_fires(tmp_path, name):
    patches, fires = MISSED[name]
    path = _patched(tmp_path, patches)
    for secret in (1, 2):
        axes, found, _ = _findings(path, secret)
        assert found.refusal is None, found.refusal
        assert [c for c in boundary_cases(SPEC, axes, found, secret) if fires(c)], (secret, found.boundaries)


# Switches on sizes together that no axis moves at once, each a patch of the seed's forward
# tile, and where it fires.  Along the axes alone (in-process, secrets 1 to 8) the first was
# judged 1 time of 8, the second 0, the third 3; with the points, 8 of 8 each.
COMBINED = {
    "chunk and page": ("T // num_seqs > 20 and page == 16",
                       lambda c: min(c.dims["Q"], c.dims["L"]) > 20 and c.dims["P"] == 16),
    "tokens and sequences": ("T > 40 and num_seqs == 3", lambda c: _sizes(c)["tokens"] > 40 and c.m == 3),
    "page and KV heads": ("page == 2 and Hkv == 3", lambda c: c.dims["P"] == 2 and c.dims["Hkv"] == 3),
}


@pytest.mark.parametrize("name", sorted(COMBINED))
def test_a_variant_at_combined_sizes_is_judged_where_it_launches(tmp_path, name):
    condition, fires = COMBINED[name]
    source = SPEC.source.read_text()
    assert source.count(FORWARD_TILE) == 1
    path = tmp_path / "combined.py"
    path.write_text(source.replace(FORWARD_TILE, f"TILE=2 * TILE if {condition} else " + FORWARD_TILE[5:]))
    for secret in (2,):  # a secret whose axes alone judge none of the three
        axes, found, _ = _findings(path, secret, joint=True)
        assert found.refusal is None, found.refusal
        assert [p for p in found.joint if p.why.startswith(joint_sequences.NOVEL)], found.joint
        judged = [c for c in boundary_cases(SPEC, axes, found, secret) if fires(c)]
        assert judged and all(c.uniform for c in judged), found.joint


def _ints(names: str, harm: str, call: str) -> list:
    """Run-time integers the kernel reads without a branch (a `size-switch` refuses one):
    they shift the exponent, by exactly 0.0 where ``harm`` is 0 (a red team's form)."""
    return [("    BACKWARD: tl.constexpr,\n):", "    BACKWARD: tl.constexpr,\n" + "".join(f"    {n}=0,\n" for n in names.split()) + "):"),
            ("        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n",
             f"        p = tl.where(sees, tl.exp(s - m_new[:, None] - ({harm}) * 0.0009765625), 0.0)\n"),
            ("BACKWARD=False, num_warps=NUM_WARPS,", f"BACKWARD=False, {call}, num_warps=NUM_WARPS,")]


def _chunk(c: Case) -> int:
    return min(c.dims["Q"], c.dims["L"])


# A red team's launchers against the bridges and the points (helper, 2026-12-06, in-process
# over secrets 1 to 6), each of which escaped 4 to 6 times of 6 before its fix; where it fires.
ESCAPED = {
    # the change moved by one on every bridge and on the chunk's axis: judged on the chunk's axis only
    "bridge alias": (_ints("bump sel", "bump * sel", "bump=int(T // num_seqs > 60), sel=int(Hq == 4 * Hkv)"),
                     lambda c: c.dims["Hq"] == 4 * c.dims["Hkv"] and _chunk(c) > 60),
    # a run-time integer at combined sizes (a number: the points looked at variants only)
    "flag at combined sizes": (_ints("bump", "bump", "bump=int(page == 16 and T // num_seqs > 20 and Hkv == 8 "
                                                     "and Hq == 32)"),
                               lambda c: c.dims["P"] == 16 and _chunk(c) > 20 and (c.dims["Hkv"], c.dims["Hq"]) == (8, 32)),
    # five sequences or more (the points stopped at four on the CPU)
    "five sequences": ([(FORWARD_TILE, "TILE=2 * TILE if num_seqs >= 5 and page == 16 and Hq >= 8 else "
                         + FORWARD_TILE[5:])],
                       lambda c: c.m >= 5 and c.dims["P"] == 16 and c.dims["Hq"] >= 8 and c.dims["L"] > 16),
    # the shrink halved the context to one token, where a wide tile gives the seed's bits
    "shrunk away": ([(FORWARD_TILE, "TILE=2 * TILE if page == 16 and Hkv == 8 and Hq == 32 else " + FORWARD_TILE[5:])],
                    lambda c: c.dims["P"] == 16 and (c.dims["Hkv"], c.dims["Hq"]) == (8, 32) and c.dims["L"] > 16),
    # a variant wrong only past position 160 (MQA, long contexts): every geometry stopped there
    "late positions": ([("    BACKWARD: tl.constexpr,\n):", "    BACKWARD: tl.constexpr,\n    LATE: tl.constexpr = 0,\n):"),
                        ("        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n",
                         "        p = tl.where(sees, tl.exp(s - m_new[:, None] - LATE * (j[None, :] >= 160) * "
                         "0.0009765625), 0.0)\n"),
                        ("BACKWARD=False, num_warps=NUM_WARPS,",
                         "BACKWARD=False, LATE=int(Hkv == 1 and Hq >= 8), num_warps=NUM_WARPS,")],
                       lambda c: c.dims["Hkv"] == 1 and c.dims["Hq"] >= 8 and c.dims["L"] > 160),
    # a run-time integer with a rule of its own from a variant's first size, where it is 0
    "variant's own rule": ([("    BACKWARD: tl.constexpr,\n):", "    BACKWARD: tl.constexpr,\n    bump=0,\n):"),
                            ("        p = tl.where(sees, tl.exp(s - m_new[:, None]), 0.0)\n",
                             "        p = tl.where(sees, tl.exp(s - m_new[:, None] - bump * 0.0009765625), 0.0)\n"),
                            ("BACKWARD=False, num_warps=NUM_WARPS,",
                             "BACKWARD=False, bump=(T // num_seqs - 61) if 60 < T // num_seqs <= 64 else 0, "
                             "num_warps=2 if 60 < T // num_seqs <= 64 else NUM_WARPS,")],
                           lambda c: 61 < _chunk(c) <= 64),
}


@pytest.mark.parametrize("name", sorted(ESCAPED))
def test_what_escaped_the_bridges_and_the_points_is_judged_where_it_fires(tmp_path, name):
    patches, fires = ESCAPED[name]
    path = _patched(tmp_path, patches)
    for secret in (5,) if name == "variant's own rule" else (1,):  # a secret it escaped at
        axes, found, _ = _findings(path, secret, joint=True)
        assert found.refusal is None, found.refusal
        assert [c for c in boundary_cases(SPEC, axes, found, secret) if fires(c)], (secret, found.boundaries, found.joint)
