"""The on-policy check: certified kernels give ratio exactly 1.0, and the check can fail."""

import json

import pytest
import torch

from tik_agent import cli
from tik_agent.onpolicy import kernels, report
from tik_agent.onpolicy.model import Config
from tik_agent.spec.seeds import BUNDLED_DIR

from seedutil import edit

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

TINY = Config(vocab=128, dim=32, layers=1, heads=2, kv_heads=1, head_dim=64, ffn=64)


@pytest.fixture(scope="module")
def certified_set():
    return kernels.certified()


def test_certified_kernels_are_on_policy(certified_set):
    side = report.compare(certified_set, TINY, sequences=3)
    assert side.tokens > 10
    assert side.identical_fraction == 1.0 and side.max_abs_ratio_minus_1 == 0.0
    assert side.grad_norm > 0  # the trainer's backward ran through the kernels


def test_a_batch_dependent_kernel_is_caught(tmp_path):
    """Negative control: a matmul whose K step follows the batch (a config picked by
    shape) gives the trainer's large batch other bits than the sampler's small ones."""
    path = tmp_path / "matmul.py"
    path.write_text((BUNDLED_DIR / "matmul" / "kernel.py").read_text())
    edit(path, "BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,", "BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, "
         "BLOCK_K=BLOCK_K if M <= 8 else 16,")
    side = report.compare(kernels.certified({"matmul": path}), TINY, sequences=3)
    assert side.identical_fraction < 1.0 and side.max_abs_ratio_minus_1 > 0.0
    assert side.sources["matmul"] == str(path)


def test_stock_figures_are_measured_on_the_same_tokens(certified_set):
    stock = report.compare(kernels.stock(), TINY, sequences=3)
    certified = report.compare(certified_set, TINY, sequences=3)
    assert stock.tokens == certified.tokens
    assert 0.0 <= stock.identical_fraction <= 1.0


def test_cli_json(capsys, monkeypatch):
    monkeypatch.setattr(report, "Config", lambda: TINY)
    assert cli.run(["onpolicy", "--json", "--sequences", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    for side in ("certified", "stock"):
        assert {"max_abs_ratio_minus_1", "identical_fraction", "tokens"} <= set(data[side])
    assert data["certified"]["max_abs_ratio_minus_1"] == 0.0 and data["certified"]["identical_fraction"] == 1.0


def test_cli_refuses_an_unknown_kernel_kind(capsys):
    assert cli.run(["onpolicy", "--kernel", "softmax=x.py"]) == 2
    assert "KIND=FILE" in capsys.readouterr().err


def test_a_wheels_kernel_replaces_the_seed_of_its_kind(tmp_path):
    import zipfile

    from tik_agent.onpolicy import sources

    wheel = tmp_path / "tik_kernel_rmsnorm-0.1.0-py3-none-any.whl"
    kernel = (BUNDLED_DIR / "rmsnorm" / "kernel.py").read_text() + "\n# the wheel's copy\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tik_kernel_rmsnorm/spec.toml", (BUNDLED_DIR / "rmsnorm" / "spec.toml").read_text())
        zf.writestr("tik_kernel_rmsnorm/kernel.py", kernel)
    kind, path = sources.from_wheel(wheel, tmp_path)
    assert kind == "rmsnorm" and path.read_text() == kernel
    assert kernels.certified({kind: path}).sources["rmsnorm"] == str(path)
