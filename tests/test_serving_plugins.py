"""The wheels' serving-engine plugins against the real engines (issue 20, item 5).

vLLM and SGLang pin their own CUDA build of torch, so they live in venvs of their own
(``scripts/serving-venv.sh``; found at ``TIK_VLLM_VENV`` / ``TIK_SGLANG_VENV``, by default
``.venv-vllm`` / ``.venv-sglang``).  Each test makes a fresh venv layered on the engine's
(a ``.pth`` naming the engine venv's site-packages), pip-installs the rmsnorm seed wheel
there, and runs the engine's own plugin loader in a fresh process: the real entry points,
the real registry, the engine's own layer class.  Without the engine's venv the test
skips and says how to build one; nothing here stands in for an engine.

Triton runs through its interpreter (no GPU here): the engines import triton before the
wheel could switch the interpreter on, so the probes set ``TRITON_INTERPRET=1`` as a
CPU user must.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from seedwheels import seed_wheels, small_bundled, wheel_of
from venvutil import child_env

pytestmark = pytest.mark.slow  # an engine import alone takes a minute here

REPO = Path(__file__).resolve().parent.parent
RMS = "tik_kernel_rmsnorm"


def engine_venv(engine: str) -> Path:
    """The engine's venv, or a skip that says where it was looked for and how to make one."""
    venv = Path(os.environ.get(f"TIK_{engine.upper()}_VENV", REPO / f".venv-{engine}"))
    python = venv / "bin" / "python"
    found = python.is_file() and subprocess.run(
        [str(python), "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({engine!r}) is None)"],
        capture_output=True, timeout=60).returncode == 0
    if not found:
        pytest.skip(f"no {engine} venv at {venv} (build one with: bash scripts/serving-venv.sh {engine}; "
                    f"or set TIK_{engine.upper()}_VENV)")
    return venv


def layered(base: Path, engine: Path, *wheels: Path) -> Path:
    """A fresh venv that sees the engine venv's packages and holds ``wheels``; returns its python."""
    env = base / "venv"
    subprocess.run([str(engine / "bin" / "python"), "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    engine_site = subprocess.run([str(engine / "bin" / "python"), "-c",
                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "_engine.pth").write_text(engine_site + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                    "--disable-pip-version-check", "--quiet", *map(str, wheels)], check=True)
    return python


def probe(python: Path, body: str, cwd: Path, **env: str) -> dict:
    full = {**child_env(), "TRITON_INTERPRET": "1", **env}
    proc = subprocess.run([str(python), "-c", textwrap.dedent(body)], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


VLLM_PROBE = """
    import importlib.util, json, torch
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # vLLM's own loader: the vllm.general_plugins entry points
    spec = importlib.util.spec_from_file_location("seed", {seed!r})
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    bits = lambda t: t.view(torch.int32).tolist()
    gen = torch.Generator().manual_seed(5)
    x, r = torch.randn(6, 256, generator=gen), torch.randn(6, 256, generator=gen)
    facts = {{}}
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        norm = RMSNorm(256, eps=1e-6)
        with torch.no_grad():
            norm.weight.copy_(torch.randn(256, generator=gen))
        facts["class"] = [type(norm).__name__, isinstance(norm, RMSNorm)]
        w = norm.weight.data
        facts["plain"] = bits(norm(x)) == bits(seed.rms_norm(x, w, 1e-6))
        y, res = norm(x, r)
        facts["residual"] = [bits(y) == bits(seed.rms_norm(x + r, w, 1e-6)), bits(res) == bits(x + r)]
        facts["rows_alone"] = all(bits(norm(x[i:i + 1])) == bits(norm(x))[i:i + 1] for i in range(6))
        try:
            RMSNorm(256, var_hidden_size=128)(x)
            facts["partial_variance"] = None
        except Exception as exc:
            facts["partial_variance"] = f"{{type(exc).__name__}}: {{exc}}"
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def vllm_python(tmp_path_factory) -> Path:
    engine = engine_venv("vllm")
    return layered(tmp_path_factory.mktemp("vllm"), engine, wheel_of(seed_wheels() / "wheels", RMS))


def test_vllm_builds_its_rmsnorm_as_the_certified_kernel(vllm_python, tmp_path):
    facts = probe(vllm_python, VLLM_PROBE.format(seed=str(small_bundled() / "rmsnorm" / "kernel.py")), tmp_path)
    assert facts["class"] == ["TikRMSNorm", True]
    assert facts["plain"] and facts["residual"] == [True, True] and facts["rows_alone"]
    assert facts["partial_variance"].startswith("NotCertifiedError: vLLM RMSNorm: variance_size_override=128")


def test_vllm_without_the_plugin_keeps_its_own_rmsnorm(vllm_python, tmp_path):
    """The control: the same venv, the plugin left out by VLLM_PLUGINS, builds vLLM's own class."""
    facts = probe(vllm_python, VLLM_PROBE.format(seed=str(small_bundled() / "rmsnorm" / "kernel.py")), tmp_path,
                  VLLM_PLUGINS="some_other_plugin")
    assert facts["class"] == ["RMSNorm", True] and facts["partial_variance"] is None


SGLANG_PROBE = """
    import importlib.util, json, torch
    from sglang.srt.plugins import load_plugins
    from sglang.srt.layers.layernorm import RMSNorm

    load_plugins()  # SGLang's own loader: the sglang.srt.plugins entry points, then the hooks applied
    spec = importlib.util.spec_from_file_location("seed", {seed!r})
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    bits = lambda t: t.view(torch.int32).tolist()
    gen = torch.Generator().manual_seed(5)
    x, r = torch.randn(6, 256, generator=gen), torch.randn(6, 256, generator=gen)
    norm = RMSNorm(256, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(256, generator=gen))
    w = norm.weight.data
    y, res = norm(x, r)
    facts = {{"hooked": getattr(RMSNorm.forward, "__wrapped__", None) is not None,
              "plain": bits(norm(x)) == bits(seed.rms_norm(x, w, 1e-6)),
              "residual": [bits(y) == bits(seed.rms_norm(x + r, w, 1e-6)), bits(res) == bits(x + r)]}}
    print(json.dumps(facts))
"""


def test_sglang_runs_its_rmsnorm_through_the_certified_kernel(tmp_path):
    engine = engine_venv("sglang")
    python = layered(tmp_path, engine, wheel_of(seed_wheels() / "wheels", RMS))
    facts = probe(python, SGLANG_PROBE.format(seed=str(small_bundled() / "rmsnorm" / "kernel.py")), tmp_path)
    assert facts == {"hooked": True, "plain": True, "residual": [True, True]}
