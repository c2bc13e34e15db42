"""``tik-agent export SEED`` (issue 20, item 2): the wheel of a seed itself, certified by the
seed's own audit, with provenance "seed"; a second export reuses the audit and the file;
installed in a fresh venv it runs, verifies, and ``enable_all()`` switches every tik kernel
package installed, refusing two that route one op.

The seeds are small copies standing in for the bundled ones (:mod:`seedwheels`); the
audit, its cache and the wheels are real, each built once per session.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from seedwheels import SECOND_NAME, bundled_as, seed_wheels, small_bundled, wheel_of
from tik_agent.backends import device as devices
from tik_agent.cli import run as cli
from tik_agent.export import wheel_certificate
from tik_agent.judge import seedaudit
from tik_agent.judge.auditcache import AuditKey
from tik_agent.judge.options import EvalOptions
from tik_agent.spec.grid import evaluation_cases
from tik_agent.spec.schema import load_spec
from venvutil import make_env, run_installed

pytestmark = pytest.mark.slow  # seed audits, exports and fresh venvs under the interpreter

RMS, LP = "tik_kernel_rmsnorm", "tik_kernel_logprobs"


@pytest.fixture(scope="module")
def bundled() -> Path:
    return small_bundled()


@pytest.fixture(scope="module")
def built() -> Path:
    return seed_wheels()


@pytest.fixture(scope="module")
def rms_wheel(built) -> Path:
    return wheel_of(built / "wheels", RMS)


@pytest.fixture
def no_audit(monkeypatch):
    """Any computation of a seed's outputs or audit fails the test: the cache must serve it."""
    def refuse(*args, **kwargs):
        raise AssertionError("the seed was audited again")

    for name in ("compute_reference", "evaluate"):
        monkeypatch.setattr(seedaudit, name, refuse)


def test_the_seed_wheel_is_certified_by_the_seeds_own_audit(bundled, rms_wheel):
    cert = wheel_certificate(rms_wheel)
    spec = load_spec(bundled / "rmsnorm")
    kernel = (bundled / "rmsnorm" / "kernel.py").read_bytes()
    assert cert["provenance"] == "seed" and cert["run"] is None
    assert cert["kernel"]["sha256"] == cert["seed"]["sha256"] == hashlib.sha256(kernel).hexdigest()
    binding = devices.binding(devices.probe_environment("cpu"))
    assert cert["audit"]["key"] == AuditKey.of(spec, EvalOptions(device="cpu"), binding).digest
    cases = [c.id for c in evaluation_cases(spec, "cpu")]
    # The grid's cases and those the audit drew for itself (hidden shapes, batch sizes around literals).
    assert cert["parity"]["cases_passed"] == cert["parity"]["cases_total"] > len(cases) > 0
    assert set(cases) <= {c["id"] for c in cert["cases"]} and {c["outcome"] for c in cert["cases"]} == {"passed"}
    assert cert["speedups"]["vs_seed"] == 1.0 and cert["speedups"]["cells"]  # timed against itself
    assert cert["distribution"]["version"].startswith("0.1.0+seed")


def test_the_seed_directory_export_is_its_own_seed(bundled, built):
    cert = wheel_certificate(wheel_of(built / "wheels", LP))
    assert cert["provenance"] == "seed" and cert["seed"]["name"] == "logprobs"
    assert cert["kernel"]["sha256"] == hashlib.sha256((bundled / "logprobs" / "kernel.py").read_bytes()).hexdigest()


def test_a_second_export_reuses_the_audit_and_the_identical_file(bundled, built, rms_wheel, tmp_path, monkeypatch,
                                                                  no_audit, capsys):
    out = shutil.copytree(built / "wheels", tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.chdir(tmp_path)
    with bundled_as(bundled):
        assert cli(["export", "rmsnorm", "--out", str(out)]) == 0
        assert cli(["export", "rmsnorm", "--out", str(tmp_path / "elsewhere")]) == 0
    said = capsys.readouterr()
    assert "the seed rmsnorm itself, certified by its own audit" in said.out.replace("\n", " ")
    assert "reusing the seed's audit" in said.err and "already there with the same bytes; kept" in said.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # kept as it was, nothing added
    assert wheel_of(tmp_path / "elsewhere", RMS).read_bytes() == rms_wheel.read_bytes()  # reproducible
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out"]  # no run directory made


def test_other_bytes_under_the_wheels_name_are_refused_unless_force(bundled, rms_wheel, tmp_path, no_audit, capsys):
    out = tmp_path / "out"
    out.mkdir()
    mine = out / rms_wheel.name
    mine.write_bytes(b"my own file")
    with bundled_as(bundled):
        assert cli(["export", "rmsnorm", "--out", str(out)]) == 2
        assert str(mine) in capsys.readouterr().err.replace("\n", "")
        assert mine.read_bytes() == b"my own file"
        assert cli(["export", "rmsnorm", "--out", str(out), "--force"]) == 0
    assert mine.read_bytes() == rms_wheel.read_bytes() and sorted(out.iterdir()) == [mine]


@pytest.mark.parametrize("args, message", [
    (["rmsnorm", "--commit", "a0001"], "--commit: applies to a run only"),
    (["{run}", "--device", "cpu"], "--device: applies to a seed only"),
    (["{run}", "--fresh-audit"], "--fresh-audit: applies to a seed only"),
    (["no-such-seed"], "neither a run directory nor a bundled seed (the bundled seeds are: logprobs, rmsnorm"),
])
def test_options_and_names_that_do_not_fit_are_exit_2(bundled, tmp_path, capsys, args, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    (run / "spec.toml").write_text("")  # a run's working tree holds a spec too: run.json decides
    with bundled_as(bundled):
        code = cli(["export", *[a.format(run=run) for a in args], "--out", str(tmp_path / "out")])
    assert code == 2 and message in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "out").exists()


INSTALLED = """
    import importlib.metadata, importlib.util, torch
    import torch.nn.functional as F
    import {rms} as k
    import {lp} as lp

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    seed_rms, seed_lp = load({rms_seed!r}, "seed_rms"), load({lp_seed!r}, "seed_lp")
    bits = lambda t: t.view(torch.int32).tolist()
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(5, 256, generator=gen), torch.randn(256, generator=gen)
    logits, ids = torch.randn(3, 1024, generator=gen), torch.randint(0, 1024, (3,), generator=gen)
    facts = {{"provenance": k.CERTIFICATE["provenance"], "routes": [list(k.ROUTES), list(lp.ROUTES)],
              "direct": bits(k.rms_norm(x, w)) == bits(seed_rms.rms_norm(x, w, 1e-6))}}
    stock = F.rms_norm(x, (256,), w, 1e-6)

    def refused(call):  # only routed calls know the certificate: bf16 and two ids per row are not in it
        try:
            call()
        except (k.NotCertifiedError, lp.NotCertifiedError):
            return True
        return False

    half = lambda: F.rms_norm(x.bfloat16(), (256,), w.bfloat16(), 1e-6)
    two_ids = lambda: logits.log_softmax(-1).gather(-1, torch.stack([ids, ids], 1))
    facts["refused_before"] = [refused(half), refused(two_ids)]
    facts["installed"] = [p.import_name for p in k.installed_kernels()]
    enabled = k.enable_all()
    facts["enabled"] = [p.import_name for p in enabled]
    facts["on"] = [k.is_enabled(), lp.is_enabled()]
    facts["routed_rms"] = bits(F.rms_norm(x, (256,), w, 1e-6)) == bits(seed_rms.rms_norm(x, w, 1e-6))
    got = logits.log_softmax(-1).gather(-1, ids[:, None])[:, 0]
    facts["routed_lp"] = bits(got) == bits(seed_lp.token_logprobs(logits, ids))
    facts["refused_on"] = [refused(half), refused(two_ids)]
    lp.disable_all()  # any one package switches all of them off
    facts["off"] = [k.is_enabled(), lp.is_enabled()]
    facts["stock_again"] = bits(F.rms_norm(x, (256,), w, 1e-6)) == bits(stock)
    facts["refused_after"] = [refused(half), refused(two_ids)]
    facts["entry_points"] = {{g: sorted((e.name, e.value) for e in importlib.metadata.entry_points(group=g)
                                        if e.name.startswith("tik_kernel"))
                              for g in ("tik_kernels", "vllm.general_plugins", "sglang.srt.plugins")}}
    report = k.verify()
    facts["verify"] = [report.passed, report.summary().splitlines()[0]]
    print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def installed(built, bundled, tmp_path_factory) -> dict:
    """Both seed wheels in one fresh venv: what a user who ran ``pip install`` sees."""
    base = tmp_path_factory.mktemp("both")
    python = make_env(base, wheel_of(built / "wheels", RMS), wheel_of(built / "wheels", LP))
    return run_installed(python, INSTALLED.format(rms=RMS, lp=LP, rms_seed=str(bundled / "rmsnorm" / "kernel.py"),
                                                  lp_seed=str(bundled / "logprobs" / "kernel.py")), base)


def test_the_installed_seed_wheel_runs_the_seeds_bits_and_verifies(installed):
    assert installed["provenance"] == "seed" and installed["direct"]
    assert installed["verify"][0], installed["verify"]


def test_enable_all_switches_every_installed_package_and_disable_all_every_one_off(installed):
    assert installed["installed"] == [LP, RMS] == sorted(installed["enabled"])
    assert installed["on"] == [True, True] and installed["off"] == [False, False]
    assert installed["routed_rms"] and installed["routed_lp"] and installed["stock_again"]
    # The calls only a routed op refuses (outside the certificate) show each switch's state.
    assert installed["refused_before"] == [False, False]
    assert installed["refused_on"] == [True, True]
    assert installed["refused_after"] == [False, False]


def test_each_wheel_declares_its_entry_points(installed):
    assert installed["entry_points"] == {
        "tik_kernels": [[LP, LP], [RMS, RMS]],
        "vllm.general_plugins": [[LP, f"{LP}._vllm:register"], [RMS, f"{RMS}._vllm:register"]],
        "sglang.srt.plugins": [[LP, f"{LP}._sglang:register"], [RMS, f"{RMS}._sglang:register"]]}


CONFLICT = """
    import {rms} as k
    try:
        k.enable_all()
    except k.RoutingConflict as exc:
        refused = str(exc)
    else:
        refused = None
    import {second} as b
    facts = {{"refused": refused, "after_refusal": [k.is_enabled(), b.is_enabled()]}}
    facts["only"] = [p.import_name for p in k.enable_all(only=["{second}"])]
    facts["after_only"] = [k.is_enabled(), b.is_enabled()]
    print(json.dumps(facts))
"""


def test_two_packages_routing_one_op_are_refused_by_name(built, tmp_path):
    second = SECOND_NAME.replace("-", "_")
    python = make_env(tmp_path, wheel_of(built / "wheels", RMS), wheel_of(built / "second", second))
    facts = run_installed(python, CONFLICT.format(rms=RMS, second=second), tmp_path)
    assert facts["refused"] and f"{RMS} and {second} both route aten::rms_norm" in facts["refused"]
    assert facts["after_refusal"] == [False, False]  # nothing was enabled
    assert facts["only"] == [second] and facts["after_only"] == [False, True]


def test_the_wheels_readme_says_it_is_the_seed_itself(rms_wheel):
    with zipfile.ZipFile(rms_wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    assert "the batch-invariant seed\nkernel `rmsnorm` itself" in text and "| provenance | the seed itself" in text
    assert "| run |" not in text


def test_onpolicy_names_a_seed_wheel_by_its_seed(tmp_path):
    """``onpolicy --wheel`` of a seed's own wheel (here a seed directory's kernel that is not the
    bundled one) says what certifies it: the seed's own audit, not a run."""
    from tik_agent.onpolicy import sources
    from tik_agent.spec.seeds import BUNDLED_DIR

    kernel = (BUNDLED_DIR / "rmsnorm" / "kernel.py").read_bytes() + b"\n# my own copy of the seed\n"
    wheel = tmp_path / "seed.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{RMS}/spec.toml", (BUNDLED_DIR / "rmsnorm" / "spec.toml").read_text())
        zf.writestr(f"{RMS}/kernel.py", kernel)
        zf.writestr(f"{RMS}/certificate.json", json.dumps(
            {"provenance": "seed", "run": None, "kernel": {"sha256": hashlib.sha256(kernel).hexdigest()}}))
    chosen = sources.resolve([], [], [wheel], tmp_path / "w")["rmsnorm"]
    assert chosen.certified_by.basis == "certificate"
    assert chosen.certified_by.text == "certificate of seed.whl (the seed rmsnorm itself, by its own audit)"
