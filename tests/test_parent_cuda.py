"""The parent holds no CUDA context: it counts GPUs, hands one to each worker and reads
worker outputs onto the CPU.  Checked without a GPU, with torch.cuda made to fail on
anything that would initialise a context."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import tik_agent
from tik_agent.backends import device as devices
from tik_agent.search.executor import LocalExecutor

PACKAGE = Path(tik_agent.__file__).parent
# Code that runs in the parent process (workers, the seed check and exported wheels are not).
PARENT = ["judge", "search", "run", "cli", "view", "agents", "spec"]
ALLOWED = {"is_available", "device_count"}  # neither creates a context


def _cuda_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "cuda" and isinstance(node.value.value, ast.Name) \
                and node.value.value.id == "torch" and node.attr not in ALLOWED:
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: torch.cuda.{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .cuda()")
    return found


def test_parent_code_touches_cuda_only_to_count_devices():
    uses = [u for part in PARENT for f in sorted((PACKAGE / part).rglob("*.py")) for u in _cuda_uses(f)]
    assert uses == []


def test_the_scan_sees_a_context_creating_call(tmp_path):
    """Negative control for the scan above."""
    bad = PACKAGE / "judge" / "_probe_tmp.py"
    try:
        bad.write_text("import torch\n\ndef f(x):\n    torch.cuda.synchronize()\n    return x.cuda()\n")
        assert len(_cuda_uses(bad)) == 2
    finally:
        bad.unlink()


@pytest.fixture
def no_context(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the parent initialised CUDA")

    for name in ("init", "_lazy_init", "current_device", "set_device", "synchronize", "Stream", "Event"):
        monkeypatch.setattr(torch.cuda, name, refuse)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_choosing_cuda_and_one_gpu_per_worker_makes_no_context(no_context):
    with pytest.raises(AssertionError, match="initialised CUDA"):  # the fixture bites
        torch.cuda.synchronize()
    assert devices.resolve("auto") == "cuda" and devices.resolve("cuda") == "cuda"
    seen = []
    executor = LocalExecutor("cuda", 2, environ={"CUDA_VISIBLE_DEVICES": "3,1"},
                             evaluate_fn=lambda spec, cand, options, **_: seen.append(options.cuda_device))
    slots = [executor.acquire(), executor.acquire()]
    for slot in slots:
        slot.evaluate(None, Path("cand.py"), devices_options())
    assert seen == ["3", "1"]  # each worker gets one entry of the parent's own list


def devices_options():
    from tik_agent.judge.options import EvalOptions

    return EvalOptions(device="cuda")


def test_worker_outputs_are_read_onto_the_cpu(monkeypatch, tmp_path):
    from tik_agent.judge import workerbox

    seen = {}
    real = torch.load

    def load(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    box = workerbox.WorkerBox.__new__(workerbox.WorkerBox)
    box.dir = tmp_path
    torch.save({"cases": {"c": {"full": torch.ones(2)}}}, tmp_path / "outputs.pt")
    out = box.outputs()
    assert seen.get("map_location") == "cpu" and out["cases"]["c"]["full"].device.type == "cpu"
