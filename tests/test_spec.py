"""Malformed specs and kernels give one clear error naming file, field and value."""

import pytest

from seedutil import copy_seed, edit
from tik_agent.spec.seeds import BUNDLED_DIR
from tik_agent import cli
from tik_agent.errors import SpecError
from tik_agent.spec.schema import load_spec


@pytest.fixture
def seed_dir(tmp_path):
    return copy_seed("rmsnorm", tmp_path)


def test_bundled_specs_load():
    for name in ("rmsnorm", "logprobs", "matmul"):
        spec = load_spec(BUNDLED_DIR / name)
        assert spec.name == name and spec.workload and spec.tunables


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ('entry = "rms_norm"\n', "", "kernel.entry: missing required field"),
        ('shape = ["M", "N"]\ndtype = "float"\n\n[[inputs]]', 'shape = ["M", -3]\ndtype = "float"\n\n[[inputs]]', "inputs[0].shape[1]: expected a dimension name or a positive integer (got -3)"),
        ('shape = ["N"]', 'shape = ["N", "Q"]', "inputs[1].shape[1]: unknown dimension"),
        ('shape = ["N"]', 'shape = ["N", "M"]', "must come first"),
        ('dtypes = ["float32", "bfloat16", "float16"]', 'dtypes = ["float32", "float8"]', "parity.dtypes[1]: unknown value"),
        ('name = "weight"\nshape = ["N"]\ndtype = "float"', 'name = "weight"\nshape = ["N"]\ndtype = "complex64"', "inputs[1].dtype: unknown dtype"),
        ('entry = "rms_norm"', 'entry = "rms_norm_fast"', "kernel.entry: no top-level function of that name"),
        ("batch_sizes = [1, 2, 3, 7, 16, 33]", "batch_sizes = [2, 4]", "parity.batch_sizes: must include 1"),
        ("batch_sizes = [1, 2, 3, 7, 16, 33]", "batch_sizes = [1, 2, 4]", "must include an odd size above 1"),
        ('ROWS_PER_PROGRAM = { values = [1, 2, 4, 8, 16], safe_on = ["cpu"] }', "ROWS_PER_PROGRAM = [1, 2]\nBLOCK_Q = [1]", "tunables.BLOCK_Q: kernel.py has no module-level constant"),
        ("[tolerance.float16]\nrtol = 2e-3", "[tolerance.float16]\nrtol = -1.0", "tolerance.float16.rtol: expected a finite number >= 0"),
        ('name = "decode"\nM = 4\nN = 4096', 'name = "decode"\nM = 4', "workload[0].N: missing"),
        ('name = "decode"\nM = 4\n', 'name = "decode"\nflops = "2 * M ** N"\nM = 4\n', "workload[0].flops: only +, *"),
        ('name = "decode"\nM = 4\n', 'name = "decode"\nflops = "4 * Q"\nM = 4\n', "workload[0].flops: only +, *"),
        ('name = "decode"\nM = 4\n', 'name = "decode"\nflops = 12\nM = 4\n', "workload[0].flops: expected an expression"),
        ("[kwargs]\neps = 1e-6", "[kwargs]\nepsilon = 1e-6", "kwargs.epsilon: rms_norm has no such parameter"),
        ("[parity]", "[parityy]\n[parity]", "parityy: unknown field"),
    ],
)
def test_malformed_spec_names_field(seed_dir, old, new, expected):
    edit(seed_dir / "spec.toml", old, new)
    with pytest.raises(SpecError) as info:
        load_spec(seed_dir)
    assert str(seed_dir / "spec.toml") in str(info.value)
    assert expected in str(info.value)


def test_a_cell_gives_its_flops_as_an_expression_of_its_dims(seed_dir):
    edit(seed_dir / "spec.toml", 'name = "decode"\nM = 4\n', 'name = "decode"\nflops = "3 * M * N + 4 * N"\nM = 4\n')
    cell = next(c for c in load_spec(seed_dir).workload if c.name == "decode")
    assert cell.flops == 3 * 4 * 4096 + 4 * 4096
    assert all(c.flops is None for c in load_spec(seed_dir).workload if c.name != "decode")


def test_not_toml(seed_dir):
    (seed_dir / "spec.toml").write_text("[kernel\nname=")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(seed_dir)


def test_kernel_syntax_error(seed_dir):
    edit(seed_dir / "kernel.py", "def rms_norm(", "def rms_norm((")
    with pytest.raises(SpecError, match="kernel.py:.*does not parse"):
        load_spec(seed_dir)


@pytest.mark.parametrize("name", ["spec.toml", "kernel.py"])
def test_cli_a_seed_file_that_is_not_utf8_is_one_line_naming_it(seed_dir, name, capsys):
    """Found by the newcomer's trial: a binary spec.toml or kernel.py was a UnicodeDecodeError
    traceback (exit 1) from check-seed."""
    path = seed_dir / name
    path.write_bytes(path.read_bytes().replace(b"RMSNorm", b"RMS\xffNorm", 1))
    assert cli.run(["check-seed", str(seed_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: not UTF-8 text (byte 0xff at offset" in err


def test_cli_kernel_that_fails_to_import_exits_2(seed_dir, capsys):
    edit(seed_dir / "kernel.py", "BLOCK_N = 1024", "BLOCK_N = 1024\nraise RuntimeError('broken at import')")
    assert cli.run(["check-seed", str(seed_dir)]) == 2
    err = capsys.readouterr().err
    assert "import failed: RuntimeError: broken at import" in err and "kernel.py" in err


def test_cli_bad_spec_exits_2(seed_dir, capsys):
    edit(seed_dir / "spec.toml", 'dtype = "float"', 'dtype = "float128"')
    assert cli.run(["check-seed", str(seed_dir)]) == 2
    assert "inputs[0].dtype: unknown dtype" in capsys.readouterr().err


def test_cli_unknown_seed_lists_known(capsys):
    assert cli.run(["check-seed", "rmsnormm"]) == 2
    err = capsys.readouterr().err
    assert "unknown seed 'rmsnormm'" in err and "logprobs, matmul, rmsnorm" in err


def test_cli_directory_without_spec(tmp_path, capsys):
    assert cli.run(["check-seed", str(tmp_path)]) == 2
    assert "not a seed directory" in capsys.readouterr().err


def test_cli_version_and_seeds(capsys):
    assert cli.run(["--version"]) == 0
    assert "tik-agent 0.1.0" in capsys.readouterr().out
    assert cli.run(["seeds"]) == 0
    out = capsys.readouterr().out
    for text in ("rms_norm(x, weight, eps=1e-06)", "token_logprobs(logits, targets)", "matmul(a, b)"):
        assert text in out


def test_a_device_without_a_workload_cell_is_one_line_naming_the_spec_and_device(tmp_path, capsys):
    from optimize_helpers import tiny_seed

    seed = tiny_seed(tmp_path)
    assert [c.name for c in load_spec(seed).workload_for("cpu")] == ["small"]   # negative control
    edit(seed / "spec.toml", 'dtype = "float32"\ndevices = ["cpu"]', 'dtype = "float32"\ndevices = ["cuda"]')
    with pytest.raises(SpecError, match="workload: no cell runs on cpu"):
        load_spec(seed)
    assert cli.run(["check-seed", str(seed)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(seed / "spec.toml") in err and "no cell runs on cpu" in err
