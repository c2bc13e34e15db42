"""The on-policy check: Triton kernels give ratio exactly 1.0, the check can fail, each kernel says
what certifies it, and a kernel that switches with the batch only at real hidden sizes is caught."""

import hashlib
import json
import shutil
import zipfile

import pytest
import torch

from tik_agent import cli
from tik_agent.cli.onpolicy_commands import set_label
from tik_agent.errors import UsageError
from tik_agent.onpolicy import kernels, reach, report, sources
from tik_agent.onpolicy.model import Config
from tik_agent.spec.schema import load_spec
from tik_agent.spec.seeds import BUNDLED_DIR

from fakerun import fake_run
from optimize_helpers import tiny_seed
from seedutil import edit

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

TINY = Config(vocab=128, dim=32, layers=1, heads=2, kv_heads=1, head_dim=64, ffn=64)
LAUNCH = "BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,\n    )\n    return y"
# Not batch invariant: fewer columns per chunk (another order of the sum of squares) below 8 rows.
SWITCH = "BLOCK_N=BLOCK_N if M >= 8 else 512, ROWS=ROWS_PER_PROGRAM, num_warps=NUM_WARPS,\n    )\n    return y"


@pytest.fixture(scope="module")
def triton_set():
    return kernels.triton()


def test_the_bundled_kernels_are_on_policy(triton_set):
    side = report.compare(triton_set, TINY, sequences=3)
    assert side.tokens > 10
    assert side.identical_fraction == 1.0 and side.max_abs_ratio_minus_1 == 0.0
    assert side.mean_abs_ratio_minus_1 == 0.0 and side.kl_k3 == 0.0
    assert side.grad_norm > 0  # the trainer's backward ran through the kernels


def test_the_bundled_kernels_are_on_policy_in_bfloat16(triton_set):
    side = report.compare(triton_set, TINY, sequences=2, dtype="bfloat16")
    assert side.dtype == "bfloat16" and side.tokens > 5
    assert side.identical_fraction == 1.0 and side.kl_k3 == 0.0 and side.grad_norm > 0


def test_a_batch_dependent_kernel_is_caught(tmp_path):
    """Negative control: a matmul whose K step follows the batch (a config picked by
    shape) gives the trainer's large batch other bits than the sampler's small ones."""
    path = tmp_path / "matmul.py"
    path.write_text((BUNDLED_DIR / "matmul" / "kernel.py").read_text())
    edit(path, "BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,", "BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, "
         "BLOCK_K=BLOCK_K if M <= 8 else 16,")
    side = report.compare(kernels.triton({"matmul": path}), TINY, sequences=3)
    assert side.identical_fraction < 1.0 and side.max_abs_ratio_minus_1 > 0.0
    assert side.mean_abs_ratio_minus_1 > 0.0 and side.kl_k3 > 0.0
    assert side.sources["matmul"] == str(path)


def test_ratio_statistics_are_the_ones_rl_engineers_read():
    worst, mean, k3 = report.ratio_statistics([0.0, 0.1, -0.1])
    assert worst == pytest.approx(abs(torch.tensor(0.1).exp().item() - 1))
    assert mean == pytest.approx((abs(torch.tensor(0.1).exp().item() - 1) + abs(torch.tensor(-0.1).exp().item() - 1)) / 3)
    assert k3 > 0
    assert report.ratio_statistics([0.0, 0.0]) == (0.0, 0.0, 0.0)
    assert report.ratio_statistics([float("inf")])[0] == float("inf")


def test_stock_figures_are_measured_on_the_same_tokens(triton_set):
    stock = report.compare(kernels.stock(), TINY, sequences=3)
    triton = report.compare(triton_set, TINY, sequences=3)
    assert stock.tokens == triton.tokens
    assert 0.0 <= stock.identical_fraction <= 1.0


def test_cli_json(capsys, monkeypatch):
    monkeypatch.setattr(report, "Config", lambda: TINY)
    assert cli.run(["onpolicy", "--json", "--sequences", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["on_policy"] is True and data["label"] == "certified"
    assert [(r["kernels"], r["dtype"]) for r in data["results"]] == [
        ("certified", "float32"), ("stock", "float32"), ("certified", "bfloat16"), ("stock", "bfloat16")]
    for r in data["results"]:
        assert {"max_abs_ratio_minus_1", "mean_abs_ratio_minus_1", "kl_k3", "identical_fraction", "tokens"} <= set(r)
        if r["kernels"] == "certified":
            assert r["max_abs_ratio_minus_1"] == 0.0 and r["identical_fraction"] == 1.0
    assert [k["kind"] for k in data["kernels"]] == list(kernels.KINDS)
    for k in data["kernels"]:
        assert k["certified_by"]["basis"] == "bundled" and k["shape_check"]["passed"] is None


def test_cli_refuses_an_unknown_kernel_kind(capsys):
    assert cli.run(["onpolicy", "--kernel", "softmax=x.py"]) == 2
    assert "KIND=FILE" in capsys.readouterr().err


# ----------------------------------------------------------------- what certifies a kernel


def _wheel(path, kernel: bytes, certified: bytes):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tik_kernel_rmsnorm/spec.toml", (BUNDLED_DIR / "rmsnorm" / "spec.toml").read_text())
        zf.writestr("tik_kernel_rmsnorm/kernel.py", kernel)
        zf.writestr("tik_kernel_rmsnorm/certificate.json", json.dumps({
            "kernel": {"sha256": hashlib.sha256(certified).hexdigest()},
            "run": {"run_id": "r1", "commit": "ab" * 20}}))
    return path


def _variant(text: str = "") -> bytes:
    return ((BUNDLED_DIR / "rmsnorm" / "kernel.py").read_text() + f"\n# a variant{text}\n").encode()


def test_a_wheels_kernel_is_certified_by_its_certificate_only_when_the_hashes_match(tmp_path):
    good = _wheel(tmp_path / "good.whl", _variant(), _variant())
    chosen = sources.resolve([], [], [good], tmp_path / "w1")
    assert chosen["rmsnorm"].origin == f"--wheel {good}" and chosen["rmsnorm"].path.read_bytes() == _variant()
    assert chosen["rmsnorm"].certified_by.basis == "certificate" and "r1" in chosen["rmsnorm"].certified_by.text
    assert chosen["matmul"].certified_by.basis == "bundled"
    # Negative control: a kernel.py edited after the export is not what the certificate vouches for.
    tampered = _wheel(tmp_path / "tampered.whl", _variant(" edited"), _variant())
    assert not sources.resolve([], [], [tampered], tmp_path / "w2")["rmsnorm"].certified


def test_a_kernel_file_nobody_evaluated_is_uncertified_and_never_labelled_certified(tmp_path):
    loose = tmp_path / "loose.py"
    loose.write_bytes(_variant())
    chosen = sources.resolve([f"rmsnorm={loose}"], [], [], tmp_path / "w")
    assert chosen["rmsnorm"].certified_by is None and chosen["rmsnorm"].to_dict()["certified_by"] is None
    label = set_label([k for k, s in chosen.items() if not s.certified])
    assert "certified" not in label.replace("uncertified", "") and "rmsnorm" in label
    # The same bytes as the bundled seed are the seed.
    same = tmp_path / "same.py"
    shutil.copyfile(BUNDLED_DIR / "rmsnorm" / "kernel.py", same)
    assert sources.resolve([f"rmsnorm={same}"], [], [], tmp_path / "w2")["rmsnorm"].bundled
    assert set_label([]) == "certified"


def test_a_run_certifies_its_accepted_kernels_by_their_bytes(tmp_path):
    run = fake_run(tmp_path, [_variant()])
    chosen = sources.resolve([], [run], [], tmp_path / "w")
    assert chosen["rmsnorm"].certified_by.basis == "run" and "a0001" in chosen["rmsnorm"].certified_by.text
    same, other = tmp_path / "same.py", tmp_path / "other.py"
    same.write_bytes(_variant())
    other.write_bytes(_variant(" not in the run"))
    explicit = sources.resolve([f"rmsnorm={same}"], [run], [], tmp_path / "w2")["rmsnorm"]
    assert explicit.origin == f"--kernel {same}" and explicit.certified_by.basis == "run"
    # Negative control: another file given beside the run is used, and uncertified.
    assert not sources.resolve([f"rmsnorm={other}"], [run], [], tmp_path / "w3")["rmsnorm"].certified


def test_two_runs_of_one_kind_are_refused(tmp_path):
    run = fake_run(tmp_path, [_variant()])
    with pytest.raises(UsageError, match="one per kind"):
        sources.resolve([], [run, run], [], tmp_path / "w")


# ----------------------------------------------------------------- shapes the decoder never reaches


def _switching(path):
    path.write_text((BUNDLED_DIR / "rmsnorm" / "kernel.py").read_text())
    edit(path, LAUNCH, SWITCH)
    return path


def test_a_small_batch_block_switch_fails_at_the_workloads_hidden_size(tmp_path):
    """The seed's contract at a workload cell of N=2048 (so that 512 and 1024 columns per chunk
    differ): the switching variant fails, an honest copy (another file, same kernel) passes."""
    seed = tiny_seed(tmp_path)
    edit(seed / "spec.toml", 'name = "small"\nM = 16\nN = 512', 'name = "small"\nM = 16\nN = 2048')
    spec = load_spec(seed)
    honest = tmp_path / "honest.py"
    honest.write_bytes(_variant())
    cases = reach.reach_cases(spec, honest.read_text())
    assert cases[0].dims == {"N": 2048} and cases[0].m == 16 and cases[0].dtype == "float32"
    passed = reach.check_reach("rmsnorm", spec, honest)
    assert passed.passed is True and passed.failure is None and "M=1," in passed.shapes
    failed = reach.check_reach("rmsnorm", spec, _switching(tmp_path / "switch.py"))
    assert failed.passed is False and "[invariance]" in failed.failure
    # The literal it compares with adds batch sizes on both sides of it.
    literal = reach.reach_cases(spec, (tmp_path / "switch.py").read_text())
    assert {7, 8, 9} <= {c.m for c in literal if c.origin == "literal"}


@pytest.mark.slow
def test_cli_fails_a_kernel_the_small_decoder_cannot_tell_apart(tmp_path, capsys, monkeypatch):
    """The decoder alone gives the switching rmsnorm ratio 1.0 (its hidden size is one chunk
    either way); the shape check at the seed's workload fails it: exit 1, and it is uncertified."""
    monkeypatch.setattr(report, "Config", lambda: TINY)
    switch = _switching(tmp_path / "switch.py")
    assert cli.run(["onpolicy", "--json", "--sequences", "2", "--kernel", f"rmsnorm={switch}"]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["ratios_exactly_one"] is True and data["shape_checks_passed"] is False and data["on_policy"] is False
    rms = next(k for k in data["kernels"] if k["kind"] == "rmsnorm")
    assert rms["certified_by"] is None and rms["shape_check"]["passed"] is False
    assert data["label"] != "certified" and all(r["kernels"] != "certified" for r in data["results"])
    assert "rmsnorm is not batch invariant at its workload shapes" in captured.err
