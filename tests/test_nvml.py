"""NVML loaded by its absolute path before the worker's guard (tik_agent.backends.nvml): the
guard refuses a library loaded by a bare name, which is how pynvml loads it by itself."""

import ctypes.util
import shutil
import sys
import types
from pathlib import Path

import pytest

from tik_agent.backends import nvml


def _some_shared_library() -> Path:
    found = ctypes.util.find_library("m")  # a bare name; its file is one of the system's folders
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib/aarch64-linux-gnu"):
        if found and (Path(folder) / found).exists():
            return Path(folder) / found
    pytest.skip("no libm found to stand in for NVML")


@pytest.fixture
def fake_pynvml(monkeypatch):
    module = types.SimpleNamespace(nvmlLib=None)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_preload_hands_pynvml_the_library_by_its_absolute_path(tmp_path, fake_pynvml):
    shutil.copy(_some_shared_library(), tmp_path / nvml.LIBRARY)
    path = nvml.preload((str(tmp_path / "missing"), str(tmp_path)))
    assert path == str((tmp_path / nvml.LIBRARY).resolve())
    assert fake_pynvml.nvmlLib is not None and fake_pynvml.nvmlLib._name == path  # loaded by the absolute path
    assert nvml.preload((str(tmp_path),)) == path  # once loaded, kept


def test_without_the_library_nothing_is_loaded(tmp_path, fake_pynvml):
    assert nvml.preload((str(tmp_path),)) is None and fake_pynvml.nvmlLib is None


def test_a_relative_folder_is_never_searched(tmp_path, fake_pynvml, monkeypatch):
    shutil.copy(_some_shared_library(), tmp_path / nvml.LIBRARY)
    monkeypatch.chdir(tmp_path)
    assert nvml.find((".",)) is None and nvml.preload((".",)) is None


def test_the_guard_refuses_the_bare_name_pynvml_would_use():
    """Why the preload exists: the worker's guard check for a dlopen (the negative control)."""
    from tik_agent.sandbox.guard import _Policy

    policy = _Policy("/tmp/sandbox", ("/opt/site-packages",), frozenset(), 0)
    with pytest.raises(PermissionError, match="not allowed"):
        policy.audit("ctypes.dlopen", (nvml.LIBRARY, 0))
