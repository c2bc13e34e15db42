"""The exported wheel where tik-agent is not: installed with pip, imported in a fresh process
(the venv and the fresh interpreters: :mod:`venvutil`)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from exportutil import PACKAGE, git_file, shared_run, shared_wheel
from venvutil import child_env, make_env
from venvutil import run_installed as run_fresh

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.fixture(scope="module")
def run_dir() -> Path:
    return shared_run()


@pytest.fixture(scope="module")
def wheel() -> Path:
    return shared_wheel()


@pytest.fixture(scope="module")
def env_python(wheel, tmp_path_factory) -> Path:
    return make_env(tmp_path_factory.mktemp("env"), wheel)


@pytest.fixture(scope="module")
def installed(env_python, run_dir, tmp_path_factory) -> dict:
    """What a fresh process sees after ``pip install``: bits, the op, torch.compile, verify()."""
    base = tmp_path_factory.mktemp("installed")
    python = env_python
    best = base / "best_kernel.py"
    best.write_bytes(git_file(run_dir, "main", "kernel.py"))
    return run_fresh(python, f"""
        import importlib.util
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import {PACKAGE} as pkg
        import torch
        from torch.library import opcheck

        facts = {{"interpret": os.environ.get("TRITON_INTERPRET"), "file": pkg.__file__,
                  "import_warnings": [str(w.message) for w in caught if w.category.__name__ == "EnvironmentMismatch"],
                  "tik_modules": sorted(m for m in sys.modules if m.startswith("tik_agent"))}}
        spec = importlib.util.spec_from_file_location("run_best_kernel", {str(best)!r})
        best = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(best)
        op = torch.ops.{PACKAGE}.rms_norm

        def bits(t):
            return t.view({{4: torch.int32, 2: torch.int16}}[t.element_size()])

        same = []
        gen = torch.Generator().manual_seed(7)
        for m, n, dtype in [(1, 100, torch.float32), (5, 257, torch.bfloat16), (9, 1000, torch.float16),
                            (3, 4096, torch.float32)]:
            x = torch.randn(m, n, generator=gen).to(dtype)
            w = torch.randn(n, generator=gen).to(dtype)
            ref = best.rms_norm(x, w, 1e-6)
            same.append([torch.equal(bits(pkg.rms_norm(x, w)), bits(ref)), torch.equal(bits(op(x, w)), bits(ref))])
        facts["same_bits"] = same
        compiled = torch.compile(lambda x, w: op(x, w) * 2, backend="aot_eager", fullgraph=True)
        x, w = torch.randn(6, 300), torch.randn(300)
        facts["compiled_same"] = torch.equal(bits(compiled(x, w)), bits(best.rms_norm(x, w, 1e-6) * 2))
        facts["opcheck"] = opcheck(op.default, (x, w))
        report = pkg.verify()
        facts["report"] = report.to_dict()
        facts["summary"] = report.summary()
        facts["certificate_cases"] = len(pkg.CERTIFICATE["cases"])
        print(json.dumps(facts))
    """, base)


def test_the_wheel_imports_nothing_of_tik_agent(installed):
    assert installed["tik_modules"] == []
    assert "/venv/lib/" in installed["file"]  # imported from the installed wheel, not the source tree


def test_without_cuda_the_package_turns_on_the_interpreter(installed):
    assert installed["interpret"] == "1"


def test_the_installed_kernel_gives_the_runs_best_kernels_bits(installed):
    assert installed["same_bits"] == [[True, True]] * 4


def test_the_custom_op_passes_torch_checks_and_compiles(installed):
    assert set(installed["opcheck"].values()) == {"SUCCESS"}, installed["opcheck"]
    assert installed["compiled_same"]


def test_verify_passes_on_this_machine(installed):
    report = installed["report"]
    assert report["passed"], installed["summary"]
    assert report["failures"] == []
    assert len(report["cases"]) == installed["certificate_cases"]
    assert all(c["passed"] and c["certified"] == "passed" for c in report["cases"])
    assert [f["file"] for f in report["files"]] == ["kernel.py", "_seed_kernel.py"]
    assert report["device"] == "cpu" and report["environment"]["interpreter"] is True
    assert installed["summary"].startswith("PASSED")


def test_in_the_certified_environment_nothing_is_flagged(installed):
    assert installed["import_warnings"] == []
    assert installed["report"]["environment_differences"] == []
    assert "NOT the certified environment" not in installed["summary"]


def test_other_torch_and_triton_versions_are_flagged_at_import_and_by_verify(env_python, tmp_path):
    """pip may keep a torch or triton other than the certified ones (the ranges accept them): say so."""
    facts = run_fresh(env_python, f"""
        import warnings
        os.environ["TRITON_INTERPRET"] = "1"  # as the package would set it: triton is imported first here
        import torch, triton
        certified = (torch.__version__, triton.__version__)
        torch.__version__, triton.__version__ = "2.99.0", "3.99.0"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import {PACKAGE} as pkg
            from {PACKAGE} import _cases
            # One case: the mismatch is what is read here (every case passes verify() in the
            # certified environment: the installed fixture).
            every = _cases.certified_cases
            _cases.certified_cases = lambda certificate: every(certificate)[:1]
            report = pkg.verify(stop_at_first=True)
        print(json.dumps({{"cases": len(report.cases),
                          "warnings": [str(w.message) for w in caught if w.category.__name__ == "EnvironmentMismatch"],
                          "differences": report.environment_differences, "summary": report.summary(),
                          "certified": certified}}))
    """, tmp_path)
    torch_v, triton_v = facts["certified"]
    assert len(facts["warnings"]) == 2  # one at import, one from verify()
    assert f"torch 2.99.0 (certified: {torch_v})" in facts["warnings"][0]
    assert f"triton 3.99.0 (certified: {triton_v})" in facts["warnings"][0] and "verify()" in facts["warnings"][0]
    assert facts["differences"] == [f"torch 2.99.0 (certified: {torch_v})", f"triton 3.99.0 (certified: {triton_v})"]
    assert "NOT the certified environment" in facts["summary"] and facts["cases"] == 1


def test_a_tampered_kernel_fails_verify(wheel, tmp_path):
    """Same wheel, kernel.py edited after install: ``python -m <package>`` (verify()) reports the hash and
    the bits, as a report and exit code 1, not as an exception."""
    python = make_env(tmp_path, wheel)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    kernel = site / PACKAGE / "kernel.py"
    text = kernel.read_text()
    # Reassociating the product changes the rounding of some elements: a real numerical change.
    old = "y = x * rstd[:, None] * w[None, :]"
    assert old in text
    kernel.write_text(text.replace(old, "y = x * (rstd[:, None] * w[None, :])"))
    env = child_env()
    proc = subprocess.run([str(python), "-m", PACKAGE, "--json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-4000:]  # a failed check, reported: not a crash
    report = json.loads(proc.stdout)
    summary = subprocess.run([str(python), "-m", PACKAGE, "--stop-at-first"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    # The certified domain first, then the verdict.
    assert summary.returncode == 1 and summary.stdout.startswith("Certified domain"), summary.stderr[-4000:]
    assert "\nFAILED on " in summary.stdout, summary.stdout
    assert "kernel.py: sha256" in summary.stdout
    assert not report["passed"]
    assert report["failures"][0].startswith("kernel.py: sha256")
    assert "does not match the certificate" in report["failures"][0]
    failed = [c for c in report["cases"] if not c["passed"]]
    assert failed and {c["failed"] for c in failed} == {"parity"}
    assert "output vs seed: index" in failed[0]["message"]
    assert [f["file"] for f in report["files"] if f["expected_sha256"] != f["actual_sha256"]] == ["kernel.py"]


MATMUL_PROBE = """
    import importlib.util
    import torch

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    if {configure}:
        load("backend", {backend!r}).configure()  # what the package does before importing triton
    mm = load("matmul_kernel", {kernel!r})
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(33, 200, generator=gen), torch.randn(200, 80, generator=gen)
    full = mm.matmul(a, b)
    rows = torch.cat([mm.matmul(a[i : i + 1], b) for i in range(a.shape[0])])
    torch.save({{"a": a, "b": b, "full": full}}, {out!r})
    print(json.dumps({{"interpret": os.environ.get("TRITON_INTERPRET"),
                      "invariant": torch.equal(full.view(torch.int32), rows.view(torch.int32))}}))
"""


def test_the_wheels_ordered_dot_is_tik_agents(env_python, wheel, tmp_path):
    """The package carries its own copy of the interpreter's ordered dot (it cannot import tik-agent's):
    installed by the package's start-up, it must replace numpy's dot and give tik-agent's bits."""
    import zipfile

    import torch

    from tik_agent.sandbox.harness import load_kernel
    from tik_agent.spec.seeds import BUNDLED_DIR

    with zipfile.ZipFile(wheel) as zf:
        backend = tmp_path / "_backend.py"
        backend.write_bytes(zf.read(f"{PACKAGE}/_backend.py"))
    kernel = BUNDLED_DIR / "matmul" / "kernel.py"
    facts, outputs = {}, {}
    for configure in (True, False):
        out = tmp_path / f"out-{configure}.pt"
        probe = MATMUL_PROBE.format(configure=configure, backend=str(backend), kernel=str(kernel), out=str(out))
        if not configure:  # the control: the interpreter with numpy's (BLAS) dot
            probe = "os.environ['TRITON_INTERPRET'] = '1'\n" + textwrap.dedent(probe)
        facts[configure] = run_fresh(env_python, probe, tmp_path)
        outputs[configure] = torch.load(out)
    assert facts[True] == {"interpret": "1", "invariant": True}
    assert facts[False]["interpret"] == "1"
    saved = outputs[True]
    assert not torch.equal(saved["full"].view(torch.int32), outputs[False]["full"].view(torch.int32))
    ours = load_kernel(kernel, "probe").matmul(saved["a"], saved["b"])  # tik-agent's ordered dot (conftest)
    assert torch.equal(ours.view(torch.int32), saved["full"].view(torch.int32))
