"""The GPU check's steps script (scripts/gpu_check_steps.py), loaded as a module by the tests."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def gpu_check_steps():
    spec = importlib.util.spec_from_file_location("gpu_check_steps", REPO / "scripts" / "gpu_check_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
