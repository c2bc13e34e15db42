"""The GPU check's scripts (scripts/gpu_check_*.py), loaded as modules by the tests."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check_steps():
    return _load("gpu_check_steps")


def gpu_check_limits():
    return _load("gpu_check_limits")
