"""Test set-up: the CPU interpreter before triton is imported, seeded RNGs, one shared
directory per session (:mod:`shared`) and the fixtures built once in it."""

import os
import random
import shutil
import tempfile

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


@pytest.fixture(scope="session")
def template():
    """The tiny seed's run, seed committed, no attempts (built once: optimize_helpers.template_run).
    Never written to: tests take ``run``, a private copy."""
    from optimize_helpers import template_run

    return template_run()


@pytest.fixture
def run(template, tmp_path):
    """A private copy of the template run."""
    from optimize_helpers import copy_run

    return copy_run(template, tmp_path / "run")


def pytest_configure(config):
    """The controlling process (or a plain run) makes the session's shared directory; xdist
    workers inherit its name through the environment.  The tik-agent cache (the seed audits
    that runs reuse) lives there too: tests never read or write the user's own cache."""
    if hasattr(config, "workerinput"):
        return
    root = tempfile.mkdtemp(prefix="tik-tests-")
    config._tik_shared_root = root
    os.environ["TIK_TESTS_SHARED"] = root
    os.environ["TIK_AGENT_CACHE"] = os.path.join(root, "tik-agent-cache")


def pytest_unconfigure(config):
    root = getattr(config, "_tik_shared_root", None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)



_TIMELINE = os.environ.get("TIK_TEST_TIMELINE")  # a folder: where each test's time went, per worker


def pytest_runtest_logreport(report):
    """With TIK_TEST_TIMELINE set, one line per test phase (worker, end time, seconds,
    phase, test) appended to a file per worker, to read how the suite's time splits."""
    if _TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        import time

        with open(os.path.join(_TIMELINE, f"{worker}.tsv"), "a") as out:
            out.write(f"{worker}\t{time.time():.1f}\t{report.duration:.2f}\t{report.when}\t{report.nodeid}\n")
