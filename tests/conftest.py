"""Test set-up: the CPU interpreter before triton is imported, seeded RNGs."""

import os
import random

import pytest

from tik_agent.backends import interpreter

HAS_CUDA = False
if os.environ.get("TRITON_INTERPRET") != "1":
    import torch

    HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    interpreter.activate()

import torch  # noqa: E402

DEVICE = "cuda" if HAS_CUDA else "cpu"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _seed_rngs():
    random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.fixture
def device():
    return DEVICE


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _audit_cache(tmp_path_factory):
    """The seed-audit cache (tik_agent/judge/auditcache.py) of this test session, never the
    user's: runs of the same seed in one session share it, a new session starts empty."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIK_AGENT_CACHE", str(tmp_path_factory.mktemp("audit-cache")))
        yield
