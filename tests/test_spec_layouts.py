"""The spec's sequences layout and several outputs: validated at the edge, one-line errors."""

import pytest

from seedutil import copy_seed, edit
from tik_agent.errors import SpecError
from tik_agent.spec.cases import Case, hidden_cases, make_inputs, parity_cases
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR


def test_bundled_specs_load_with_their_layout():
    attention = load_spec(BUNDLED_DIR / "attention")
    assert attention.layout == "sequences" and attention.sequences.page == "P"
    assert [i.role for i in attention.inputs] == ["tokens", "cache", "cache", "cu_seqlens", "seq_lens", "block_table"]
    fused = load_spec(BUNDLED_DIR / "add_rmsnorm")
    assert fused.layout == "rows" and [o.name for o in fused.outputs] == ["y", "new_residual"]
    assert load_spec(BUNDLED_DIR / "rmsnorm").outputs[0].name == "output"


@pytest.mark.parametrize("seed, old, new, field, words", [
    ("attention", 'layout = "sequences"', 'layout = "ragged"', "kernel.layout", "unknown layout"),
    ("attention", 'role = "block_table"\n', "", "inputs[5].role", "needs a role"),
    ("attention", 'role = "seq_lens"\ndtype = "int32"', 'role = "seq_lens"\nshape = ["M"]\ndtype = "int32"',
     "inputs[4].shape", "follows from its role"),
    ("attention", 'role = "cu_seqlens"\ndtype = "int32"', 'role = "cu_seqlens"\ndtype = "float"', "inputs[3].dtype", "integer"),
    ("attention", 'shape = ["BLOCKS", "P", "Hkv", "D"]', 'shape = ["BLOCKS", "D", "Hkv", "D"]', "inputs[1].shape", "page dim"),
    ("attention", 'role = "tokens"\nshape = ["T", "Hq", "D"]', 'role = "tokens"\nshape = ["Hq", "T", "D"]', "inputs[0].shape", "'T'"),
    ("attention", 'page = "P"', 'page = "PAGE"', "sequences.page", "unknown dimension"),
    ("attention", '[output]\nshape = ["T", "Hq", "D"]', '[output]\nshape = ["Hq", "T", "D"]', "outputs[0].shape", "'T'"),
    ("rmsnorm", "[parity]", '[sequences]\ncontext = "N"\nchunk = "N"\npage = "N"\n\n[parity]', "sequences", "only a spec"),
    ("rmsnorm", 'name = "x"\n', 'name = "x"\nrole = "tokens"\n', "inputs[0].role", "sequences layout"),
    ("add_rmsnorm", '[[outputs]]\nname = "new_residual"', '[[outputs]]\nname = "y"', "outputs[1].name", "duplicate"),
    ("add_rmsnorm", "[[outputs]]\nname = \"y\"", "[output]\nname = \"y\"", "output", "exactly one"),
])
def test_bad_specs_name_the_field(tmp_path, seed, old, new, field, words):
    directory = copy_seed(seed, tmp_path)
    edit(directory / "spec.toml", old, new)
    with pytest.raises(SpecError) as err:
        load_spec(directory)
    message = str(err.value)
    assert f": {field}: " in message and words in message and "\n" not in message, message


def test_sequence_inputs_are_consistent_and_hidden_shapes_valid():
    spec = load_spec(BUNDLED_DIR / "attention")
    case = next(c for c in parity_cases(spec) if c.m == 3)
    q, k, v, cu, lens, table, do = make_inputs(spec, case)
    assert do.shape == q.shape  # the upstream gradient of the backward entry, per token
    assert q.shape[0] == int(cu[-1]) and len(lens) == 3 and table.shape[0] == 3
    assert bool(((lens - (cu[1:] - cu[:-1])) >= 0).all()) and int(lens[0]) == case.dims["L"]
    assert table.shape[1] * k.shape[1] > int(lens.max())  # a padding column beyond every sequence's blocks
    for hidden in hidden_cases(spec):
        assert hidden.dims["Hq"] % hidden.dims["Hkv"] == 0 and hidden.dims["P"] not in spec.dims["P"]
    assert make_inputs(spec, Case(2, case.dims, "float16", "special", 0))[1].dtype.is_floating_point
