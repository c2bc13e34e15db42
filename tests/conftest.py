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
