"""A search space that is right on a GPU: tunables per device, bit probes that decide, dims that
exercise Triton's divisible-by-16 specialisation."""

from __future__ import annotations

import json

import pytest

from scriptutil import gpu_check_steps
from seedutil import copy_seed, edit
from tik_agent import cli
from tik_agent.errors import SpecError, UsageError
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent.spec.tunables import load_probes, split_for_device



def test_bundled_seeds_call_layout_tunables_safe_only_under_the_interpreter():
    rms = load_spec(BUNDLED_DIR / "rmsnorm")
    assert rms.tunables["NUM_WARPS"] == (1, 2, 4, 8, 16) and rms.tunables_safe_on["NUM_WARPS"] == ("cpu",)
    assert split_for_device(rms, "cpu")[0] == dict(rms.tunables)
    safe, unproven = split_for_device(rms, "cuda")
    assert safe == {} and unproven == dict(rms.tunables)
    mm = load_spec(BUNDLED_DIR / "matmul")
    safe, unproven = split_for_device(mm, "cuda")
    assert set(safe) == {"GROUP_M", "NUM_STAGES"} and set(unproven) == {"BLOCK_M", "BLOCK_N", "NUM_WARPS"}
    # Read in the sm_90 TTGIR (docs/gpu.md): these change a reduction's thread layout there.
    for name, layout in (("add_rmsnorm", {"ROWS_PER_PROGRAM", "NUM_WARPS"}),
                         ("attention", {"BLOCK_Q", "HEADS_PER_PROGRAM", "NUM_WARPS"})):
        assert set(split_for_device(load_spec(BUNDLED_DIR / name), "cuda")[1]) >= layout, name
    for name in ("rmsnorm", "add_rmsnorm", "logprobs", "matmul"):
        spec = load_spec(BUNDLED_DIR / name)
        for dim, values in spec.dims.items():
            assert any(v % 16 == 0 for v in values) and any(v % 2 == 1 for v in values), (name, dim, values)


def _record(same=True, inv=True, odd=True):
    return {"float32": {"same_bits_as_default": same, "batch_invariant": inv, "odd_stride_equal": odd}}


def test_probes_turn_unproven_values_into_safe_ones_or_drop_them():
    rms = load_spec(BUNDLED_DIR / "rmsnorm")
    probes = {"device": "cuda", "seeds": {"rmsnorm": {"tunables": {
        "NUM_WARPS": {"4": _record(), "8": _record(same=False), "16": _record(odd=False)},
        "ROWS_PER_PROGRAM": {"1": _record(), "2": _record(inv=False)}}}}}
    safe, unproven = split_for_device(rms, "cuda", probes)
    assert safe == {"NUM_WARPS": (4,), "ROWS_PER_PROGRAM": (1,)}
    assert unproven == {"NUM_WARPS": (1, 2), "ROWS_PER_PROGRAM": (4, 8, 16)}
    assert split_for_device(rms, "cpu", probes)[0] == dict(rms.tunables)  # the interpreter's own claim stands


@pytest.mark.parametrize("entry,message", [
    ('NUM_WARPS = { values = [4, 8], safe_on = ["tpu"] }', "safe_on: expected a list of devices"),
    ('NUM_WARPS = { values = [4, 8], safe = ["cpu"] }', "unknown key 'safe'"),
    ("NUM_WARPS = { safe_on = [] }", "expected a non-empty list"),
    ("NUM_WARPS = 4", "expected a list of values"),
])
def test_bad_tunable_entries_name_the_field(tmp_path, entry, message):
    seed = copy_seed("rmsnorm", tmp_path)
    edit(seed / "spec.toml", 'NUM_WARPS = { values = [1, 2, 4, 8, 16], safe_on = ["cpu"] }', entry)
    with pytest.raises(SpecError, match=r"spec.toml: tunables\.NUM_WARPS"):
        try:
            load_spec(seed)
        except SpecError as exc:
            assert message in str(exc), exc
            raise


def test_probes_from_another_device_are_refused(tmp_path, capsys):
    probes = tmp_path / "probes.json"
    probes.write_text(json.dumps({"device": "cuda", "seeds": {}}))
    with pytest.raises(UsageError, match="probed on 'cuda', not on 'cpu'"):
        load_probes(probes, "cpu")
    code = cli.run(["optimize", "rmsnorm", "--agent", "offline", "--device", "cpu", "--probes", str(probes),
                    "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "bits hold per device" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was created


def test_a_probes_file_that_is_not_text_is_one_line(tmp_path, capsys):
    """Found by the newcomer's trial: a binary --probes file was a UnicodeDecodeError traceback."""
    probes = tmp_path / "probes.json"
    probes.write_bytes(b"\xff\xfe{}")
    code = cli.run(["optimize", "rmsnorm", "--agent", "offline", "--device", "cpu", "--probes", str(probes),
                    "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{probes}: not a readable probes file" in err
    assert not (tmp_path / "run").exists()


def _rmsnorm_probing_block_n(tmp_path):
    """(seeds folder, results folder): rmsnorm offering BLOCK_N (part of its numerics) and
    ROWS_PER_PROGRAM as its tunables."""
    seeds = tmp_path / "seeds"
    seed = copy_seed("rmsnorm", seeds)
    spec_file = seed / "spec.toml"
    text = spec_file.read_text()
    start = text.index("[tunables]")
    spec_file.write_text(text[:start] + "[tunables]\nROWS_PER_PROGRAM = [1, 2]\nBLOCK_N = [1024, 128]\n")
    out = tmp_path / "out"
    out.mkdir()
    return seeds, out


def test_bit_probes_tell_a_bit_changing_value_from_safe_ones(tmp_path):
    """rmsnorm with BLOCK_N (part of the numerics) offered as a tunable: the probe must say its
    other value changes bits, while ROWS_PER_PROGRAM keeps them under the interpreter."""
    seeds, out = _rmsnorm_probing_block_n(tmp_path)
    assert gpu_check_steps().main(["probes", str(seeds), str(out), "--small"]) == 0
    probes = json.loads((out / "probes.json").read_text())
    got = probes["seeds"]["rmsnorm"]["tunables"]
    assert got["ROWS_PER_PROGRAM"]["2"]["float32"] == {"same_bits_as_default": True, "batch_invariant": True,
                                                       "odd_stride_equal": True}
    assert got["BLOCK_N"]["128"]["float32"]["same_bits_as_default"] is False
    assert got["BLOCK_N"]["1024"]["float32"]["same_bits_as_default"] is True
    assert "rmsnorm BLOCK_N" in (out / "summary.md").read_text()


def test_probes_json_keeps_each_value_probed_before_a_step_is_stopped(tmp_path, monkeypatch):
    """probes.json is rewritten as each value finishes: a probes step stopped at its third value
    (its limit ran out) leaves the first two, each whole, and nothing of the third."""
    import sys

    seeds, out = _rmsnorm_probing_block_n(tmp_path)
    steps = gpu_check_steps()
    probes_module = sys.modules["gpu_check_probes"]
    made = []

    def variant(*args):
        if len(made) == 2:
            raise KeyboardInterrupt("the step's limit")
        made.append(args[1:3])
        return real(*args)

    real = probes_module._variant
    monkeypatch.setattr(probes_module, "_variant", variant)
    with pytest.raises(KeyboardInterrupt):
        steps.main(["probes", str(seeds), str(out), "--small"])
    got = json.loads((out / "probes.json").read_text())["seeds"]["rmsnorm"]["tunables"]
    assert list(got) == ["ROWS_PER_PROGRAM"] and list(got["ROWS_PER_PROGRAM"]) == ["1", "2"]
    whole = {"same_bits_as_default": True, "batch_invariant": True, "odd_stride_equal": True}
    assert all(record == {"float32": whole} for record in got["ROWS_PER_PROGRAM"].values())


def test_bit_probes_of_the_sequences_layout_judge_every_invariance_launch(tmp_path):
    """attention (the sequences layout): TILE is part of its numerics (other bits), BLOCK_Q only
    spreads rows over programs (kept), and a constant that perturbs launches of several
    sequences is caught as batch-variant.  No odd-stride check: its inputs are whole caches."""
    from attention_seed import small_attention

    seeds = tmp_path / "seeds"
    seed = small_attention(seeds)
    edit(seed / "kernel.py", "SEQ_CHUNK = 64", "SEQ_CHUNK = 64\nPERTURB = 0")
    edit(seed / "kernel.py", "        BACKWARD=False, num_warps=NUM_WARPS,\n    )\n    return out\n",
         "        BACKWARD=False, num_warps=NUM_WARPS,\n    )\n"
         "    return out * (1 + 2 ** -20) if PERTURB and num_seqs > 1 else out\n")
    spec_file = seed / "spec.toml"
    text = spec_file.read_text()
    start, end = text.index("[tunables]"), text.index("[domain]")
    spec_file.write_text(text[:start] + '[tunables]\nBLOCK_Q = { values = [8, 4], safe_on = ["cpu"] }\n'
                         'TILE = [16, 32]\nPERTURB = { values = [0, 1], safe_on = ["cpu"] }\n\n' + text[end:])
    out = tmp_path / "out"
    out.mkdir()
    assert gpu_check_steps().main(["probes", str(seeds), str(out), "--small"]) == 0
    report = json.loads((out / "probes.json").read_text())["seeds"]["attention"]
    got = report["tunables"]
    assert report["sequences"] == 4
    kept = {"same_bits_as_default": True, "batch_invariant": True}
    assert got["BLOCK_Q"]["4"]["float32"] == kept and got["PERTURB"]["0"]["float32"] == kept
    assert got["TILE"]["32"]["float32"]["same_bits_as_default"] is False
    assert got["PERTURB"]["1"]["float32"] == {"same_bits_as_default": False, "batch_invariant": False}
    assert "attention PERTURB (float32): 0: yy-, 1: nn-" in (out / "summary.md").read_text()
    # Read as a cuda probe: the layout's two checks make a value safe there; a value that changed
    # bits is neither safe nor left to try.  (Under the rows layout's three, none would be safe.)
    probes = {**json.loads((out / "probes.json").read_text()), "device": "cuda"}
    safe, unproven = split_for_device(load_spec(seed), "cuda", probes)
    assert safe == {"BLOCK_Q": (8, 4), "TILE": (16, 32), "PERTURB": (0,)} and unproven == {}
