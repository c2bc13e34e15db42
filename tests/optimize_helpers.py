"""Shared pieces of the optimize tests: a tiny seed, run templates, a scripted agent.

The tiny seed is rmsnorm with a five-case parity grid (fp32, N=256, batch 1
and 3, normal and special) and one small CPU timing cell, so that one
evaluation takes about two seconds under the interpreter.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from shared import built_once, content_key

from tik_agent.backends import device as devices
from tik_agent.search import setup
from tik_agent.agents.base import AgentContext, Proposal, Usage
from tik_agent.run.runconfig import Limits, RunConfig, SearchSettings
from tik_agent.spec.seeds import BUNDLED_DIR

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from tik_agent.cli import main; main()"]

TINY_WORKLOAD = """[[workload]]
name = "gpu"
M = 4
N = 4096
dtype = "bfloat16"
devices = ["cuda"]

[[workload]]
name = "small"
M = 16
N = 512
dtype = "float32"
devices = ["cpu"]

[tunables]
ROWS_PER_PROGRAM = [1, 2, 4, 8, 16]
NUM_WARPS = [1, 2, 4, 8, 16]
"""

# Edits a scripted agent can make to the rmsnorm kernel.
FASTER = ("ROWS_PER_PROGRAM = 1\n", "ROWS_PER_PROGRAM = 16\n")       # same bits, 16x fewer programs
WRONG_BITS = ("sum_sq / N + eps", "sum_sq / N + 2 * eps")            # changes the numerics
SAME = ("", "")                                                       # the parent itself
# Launch options the interpreter ignores: new sources, never faster.
NEUTRAL = [("NUM_WARPS = 4\n", f"NUM_WARPS = {w}\n") for w in (1, 2, 8, 16)]


def tiny_seed(dest: Path) -> Path:
    d = dest / "tiny-rmsnorm"
    shutil.copytree(BUNDLED_DIR / "rmsnorm", d)
    t = (d / "spec.toml").read_text()
    t = re.sub(r"batch_sizes = \[[^\]]*\]", "batch_sizes = [1, 3]", t)
    t = re.sub(r"dtypes = \[[^\]]*\]", 'dtypes = ["float32"]', t)
    t = re.sub(r"seeds = \[[^\]]*\]", "seeds = [0]", t)
    t = re.sub(r"regimes = \[[^\]]*\]", 'regimes = ["normal", "special"]', t)
    t = re.sub(r"^N = \[[^\]]*\]", "N = [256]", t, flags=re.M)
    (d / "spec.toml").write_text(t[: t.index("[[workload]]")] + TINY_WORKLOAD)
    return d


def tiny_config(seed_dir: Path, run_id: str, **limits) -> RunConfig:
    env = devices.environment("cpu")
    return RunConfig(
        run_id=run_id, seed_name="rmsnorm", seed_source=str(seed_dir), agent="offline", model=None, base_url=None,
        rng_seed=0, device="cpu", rounds=5, warmup=1, eval_timeout_s=120.0, workers=1,
        limits=Limits(**{"iterations": 4, **limits}), search=SearchSettings(explore=0.0),
        binding=devices.binding(env), created="test")


def copy_run(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest, symlinks=True)
    return dest


class ScriptedAgent:
    """Proposes ``script[attempt_index % len(script)]``: an (old, new) text edit of the parent, or None."""

    name = "scripted"
    model = "script-1"

    def __init__(self, script, usage: Usage = Usage(0, 0, 0.0), gate: threading.Event | None = None):
        self.script = list(script)
        self.usage = usage
        self.gate = gate
        self.contexts: list[AgentContext] = []
        self._lock = threading.Lock()

    def propose(self, context: AgentContext) -> Proposal:
        with self._lock:
            self.contexts.append(context)
        if self.gate is not None:
            self.gate.wait(30)
        step = self.script[context.attempt_index % len(self.script)]
        if step is None:
            return Proposal(None, "", self.usage, "prompt", "reply", error="no code in the reply")
        old, new = step
        source = context.parent_source.replace(old, new, 1) if old else context.parent_source
        return Proposal(source, f"replace {old.strip()!r} by {new.strip()!r}", self.usage, "prompt", "reply")


def cli(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess (as a person would), without a terminal."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TRITON_INTERPRET", None)
    return subprocess.run([*CLI, *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)


def popen_cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TRITON_INTERPRET", None)
    return subprocess.Popen([*CLI, *args], cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def template_run(name: str = "template", **config) -> Path:
    """A run of the tiny seed with its seed committed and its reference cached, no attempts
    yet: made once per test session (both xdist workers), copied by whoever needs one."""
    def build(base: Path) -> None:
        seed = tiny_seed(base)
        setup.create(base / "run", dataclasses.replace(tiny_config(seed, "run"), **config)).close()

    return built_once(f"{name}-{content_key(BUNDLED_DIR / 'rmsnorm', TINY_WORKLOAD, config)}", build) / "run"
