"""tik-agent export: naming, the certificate, the wheel's contents and the CLI's refusals.

The run these tests export is made the way ``tik-agent optimize`` makes one: a
lineage (``tik_agent.run.lineage``) whose root is a small rmsnorm seed and whose
accepted commits carry real verdicts from :func:`tik_agent.judge.evaluate.evaluate`
on this machine.  The variants change ``ROWS_PER_PROGRAM`` (identical bits,
fewer programs).
"""

from __future__ import annotations

import json
import shutil
import sys
import types
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from exportutil import git_file, git_rev, make_run, shared_run, shared_wheel
from tik_agent import figures
from tik_agent.cli import run as cli
from tik_agent.errors import UsageError
from tik_agent.export import export_wheel, wheel_certificate
from tik_agent.export.project import check_imports, distribution
from tik_agent.run.lineage import LineageWriter

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter


@pytest.fixture(scope="session")
def run_dir() -> Path:
    return shared_run()


@pytest.fixture(scope="session")
def empty_run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("empty-run"), variants=())


@pytest.fixture(scope="session")
def wheel() -> Path:
    return shared_wheel()


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def read_member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name)


# --------------------------------------------------------------------------- naming


def test_default_distribution_name_and_version():
    d = distribution("rmsnorm", "0123456789abcdef")
    assert (d.name, d.import_name, d.namespace, d.version) == (
        "tik-kernel-rmsnorm", "tik_kernel_rmsnorm", "tik_kernel_rmsnorm", "0.1.0+g0123456789")


@pytest.mark.parametrize("given, canonical, import_name", [
    ("My.Kernel_X", "my-kernel-x", "my_kernel_x"),
    ("fast-rmsnorm", "fast-rmsnorm", "fast_rmsnorm"),
    ("k", "k", "k"),
])
def test_distribution_names_are_normalised(given, canonical, import_name):
    d = distribution("rmsnorm", "abc", given, "1.0")
    assert (d.name, d.import_name) == (canonical, import_name)


@pytest.mark.parametrize("bad, reason", [
    ("-lead", "not a valid distribution name"), ("trail.", "not a valid distribution name"),
    ("two words", "not a valid distribution name"), ("", "not a valid distribution name"),
    ("9lives", "not a Python identifier"), ("torch", "shadow"), ("json", "shadow"), ("tik_agent", "shadow"),
])
def test_bad_distribution_names_are_usage_errors(bad, reason):
    with pytest.raises(UsageError, match=reason):
        distribution("rmsnorm", "abc", bad)


@pytest.mark.parametrize("version, normalised", [("1.0", "1.0"), ("2.0.0rc1", "2.0.0rc1"), ("0.1+Local.7", "0.1+local.7")])
def test_versions_are_validated_and_normalised(version, normalised):
    assert distribution("rmsnorm", "abc", None, version).version == normalised


def test_bad_version_is_a_usage_error():
    with pytest.raises(UsageError, match="--version"):
        distribution("rmsnorm", "abc", None, "one point oh")


# --------------------------------------------------------------------------- the wheel


def test_export_builds_exactly_one_wheel(wheel):
    assert [p.name for p in wheel.parent.glob("*.whl")] == [wheel.name]
    assert wheel.name.startswith("tik_kernel_rmsnorm-0.1.0+") and wheel.name.endswith("-py3-none-any.whl")


def test_wheel_holds_the_package_and_nothing_of_tik_agent(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    package = {n.split("/", 1)[1] for n in names if n.startswith("tik_kernel_rmsnorm/")}
    assert package == {"__init__.py", "__main__.py", "_backend.py", "_cases.py", "_op.py", "_verify.py", "kernel.py",
                       "_seed_kernel.py", "certificate.json", "spec.toml", "_autograd.py", "_dropin.py",
                       "_sequences.py", "_masks.py", "_registry.py", "_serving.py", "_vllm.py", "_sglang.py",
                       "_domain.py", "_errors.py", "_views.py", "_regimes.py"}
    assert not [n for n in names if "tik_agent" in n]
    for name in package:
        if name.endswith(".py"):
            assert b"tik_agent" not in read_member(wheel, f"tik_kernel_rmsnorm/{name}"), name


def test_wheel_metadata_declares_ranges_for_torch_triton_and_numpy(wheel, run_dir):
    meta = read_member(wheel, ".dist-info/METADATA").decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    parsed = {Requirement(r).name: Requirement(r).specifier for r in requires}
    assert sorted(parsed) == ["numpy", "torch", "triton"]
    # ranges that accept the torch and triton in use (the certified ones), never a pin that swaps them
    env = json.loads(git_file(run_dir, "main", "evaluation.json"))["environment"]
    for name in ("torch", "triton"):
        assert parsed[name].contains(Version(env[name]).public), (parsed[name], env[name])
        assert not parsed[name].contains("99.0"), parsed[name]   # bounded above: no future major
    assert "Name: tik-kernel-rmsnorm" in meta
    # The README is the long description: provenance and use.
    best = git_file(run_dir, "main", "kernel.py")
    assert "Description-Content-Type: text/markdown" in meta
    for text in ("## Provenance", sha256(best), run_dir.name, "torch.ops.tik_kernel_rmsnorm.rms_norm", "verify()",
                 "TRITON_INTERPRET=1"):
        assert text in meta, text


def test_wheel_carries_the_winner_and_the_seed_verbatim(wheel, run_dir):
    assert read_member(wheel, "tik_kernel_rmsnorm/kernel.py") == git_file(run_dir, "main", "kernel.py")
    assert read_member(wheel, "tik_kernel_rmsnorm/_seed_kernel.py") == git_file(run_dir, "seed", "kernel.py")
    assert read_member(wheel, "tik_kernel_rmsnorm/spec.toml") == git_file(run_dir, "seed", "spec.toml")


def test_certificate_records_hashes_cases_environment_speedups_and_provenance(wheel, run_dir):
    from tik_agent.spec.grid import evaluation_cases
    from tik_agent.spec.schema import load_spec

    cert = wheel_certificate(wheel)
    evaluation = json.loads(git_file(run_dir, "main", "evaluation.json"))
    assert cert["schema"] == 1
    assert cert["seed"]["sha256"] == sha256(git_file(run_dir, "seed", "kernel.py")) == evaluation["seed_sha256"]
    assert cert["kernel"]["sha256"] == sha256(git_file(run_dir, "main", "kernel.py")) == evaluation["candidate_sha256"]
    assert cert["provenance"] == "run" and cert["audit"] is None  # a seed's own export says "seed"
    assert cert["run"]["run_id"] == run_dir.name
    assert cert["run"]["commit"] == git_rev(run_dir, "refs/heads/main")
    assert cert["run"]["root_commit"] == git_rev(run_dir, "refs/tags/seed")
    assert [a["attempt_id"] for a in cert["run"]["ancestry"]] == ["a0001", None]
    assert cert["kernel"]["attempt_id"] == "a0001"
    assert cert["environment"]["device"] == evaluation["environment"]["device"] == "cpu"
    assert {"torch", "triton", "python", "device_name"} <= set(cert["environment"])
    assert "executable" not in cert["environment"]
    assert cert["speedups"]["vs_seed"] == pytest.approx(evaluation["speedup"])
    assert [c["name"] for c in cert["speedups"]["cells"]] == [c["name"] for c in evaluation["timing"]]
    assert cert["parity"]["cases_passed"] == cert["parity"]["cases_total"] == len(evaluation["cases"])
    assert [c["id"] for c in cert["cases"]] == [c["case"] for c in evaluation["cases"]]
    assert all(c["outcome"] == "passed" for c in cert["cases"])
    grid = evaluation_cases(load_spec(run_dir), "cpu")
    # the fixed grid first, then the cases that evaluation drew (rebuilt from their recorded parameters)
    assert [(c["m"], c["dims"], c["invariance"], c["hidden"]) for c in cert["cases"][: len(grid)]] == [
        (c.m, c.dims, c.invariance, c.hidden) for c in grid]
    assert cert["agent"] == {"agent": "offline", "model": "none", "tokens_input": "0", "tokens_output": "0"}
    assert cert["distribution"]["op"] == "tik_kernel_rmsnorm::rms_norm"


def test_the_wheels_inputs_are_the_ones_tik_agent_checked(wheel, tmp_path):
    """verify() repeats the run's experiment: same inputs, same sub-batches, for every certified case."""
    import importlib.util

    from tik_agent.bits import digest
    from tik_agent.spec.cases import Case, make_inputs, subbatches
    from tik_agent.spec.schema import load_spec

    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path)
    package = tmp_path / "tik_kernel_rmsnorm"
    # _cases imports its siblings (_views, _regimes): load it inside a stand-in for the
    # package, without running the package's __init__ (which registers the op).
    parent = types.ModuleType("_exported_package")
    parent.__path__ = [str(package)]
    sys.modules["_exported_package"] = parent
    mod_spec = importlib.util.spec_from_file_location("_exported_package._cases", package / "_cases.py")
    cases_mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(cases_mod)
    shutil.copy2(package / "_seed_kernel.py", package / "kernel.py")  # load_spec wants the seed's file name
    spec = load_spec(package)
    wheel_spec = cases_mod.load_spec(package / "spec.toml")
    cert = cases_mod.load_certificate(package / "certificate.json")
    for raw, case in zip(cert["cases"], cases_mod.certified_cases(cert)):
        ours = Case.from_dict(raw)
        assert ours.id == case.id
        # The forward's inputs (tik-agent appends the backward's upstream gradients after them).
        forward = make_inputs(spec, ours)[: len(spec.inputs)]
        assert digest(cases_mod.make_inputs(wheel_spec, case, "cpu")) == digest(forward), case.id
        assert [(s.index, s.prefix) for s in subbatches(ours)] == cases_mod.subbatches(case)


def test_rendered_modules_import_only_torch_triton_and_the_stdlib(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path)
    check_imports(tmp_path / "tik_kernel_rmsnorm")
    (tmp_path / "tik_kernel_rmsnorm" / "kernel.py").write_text("import tik_agent.bits\n")
    with pytest.raises(UsageError, match="kernel.py:1: imports 'tik_agent.bits'"):
        check_imports(tmp_path / "tik_kernel_rmsnorm")


def test_export_of_a_named_commit(run_dir, tmp_path):
    wheel = export_wheel(run_dir, tmp_path, commit="a0002", name="rmsnorm-rows2")
    cert = wheel_certificate(wheel)
    a0002 = git_rev(run_dir, "a0002")
    assert cert["run"]["commit"] == a0002 != git_rev(run_dir, "main")
    assert cert["kernel"]["sha256"] == sha256(git_file(run_dir, "a0002", "kernel.py"))
    assert [a["attempt_id"] for a in cert["run"]["ancestry"]] == ["a0002", "a0001", None]
    assert b"ROWS_PER_PROGRAM = 2" in read_member(wheel, "rmsnorm_rows2/kernel.py")


# --------------------------------------------------------------------------- the CLI


def test_cli_export_prints_the_wheel_path(run_dir, tmp_path, capsys):
    assert cli(["export", str(run_dir), "--out", str(tmp_path), "--version", "3.1"]) == 0
    out = capsys.readouterr().out
    (wheel,) = tmp_path.glob("*.whl")
    assert f"wheel: {wheel.resolve()}" in out.replace("\n", "")
    cert = wheel_certificate(wheel)
    cases = len(cert["cases"])
    assert f"{cases}/{cases} parity cases" in out
    # The newcomer's trial: the line said "5.56x the seed's speed", the one speedup shown without
    # its spread (issue 19, item 5).
    speed = figures.speedup(cert["speedups"]["vs_seed"], cert["speedups"]["noise"], 2)
    assert "±" in speed and f"{speed} the seed's speed" in out.replace("\n", " ")


def test_the_wheels_readme_gives_every_speedup_with_its_spread(wheel):
    """The METADATA long description (the wheel's README): the headline, the table's figure and
    each timing cell, as every other view writes them (found in the newcomer's trial)."""
    readme = read_member(wheel, "METADATA").decode()
    speedups = wheel_certificate(wheel)["speedups"]
    assert f"**{figures.speedup(speedups['vs_seed'], speedups['noise'], 2)} as fast as** the seed" in readme
    assert f"| speedup vs seed | {figures.speedup(speedups['vs_seed'], speedups['noise'])} (workload-weighted) |" \
        in readme
    for cell in speedups["cells"]:
        row = next(ln for ln in readme.splitlines() if ln.startswith(f"| {cell['name']} |"))
        assert row.rstrip(" |").endswith(figures.spread(cell["noise"])), row


@pytest.mark.parametrize("args, message", [
    (["--name", "-bad-"], "not a valid distribution name"),
    (["--name", "3d"], "not a Python identifier"),
    (["--version", "v-one"], "not a valid PEP 440 version"),
    (["--commit", "deadbeef"], "not a commit of the lineage"),
    (["--commit", "seed"], "is the seed itself"),
])
def test_cli_refuses_bad_input_with_exit_2(run_dir, tmp_path, capsys, args, message):
    assert cli(["export", str(run_dir), "--out", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert not list(tmp_path.glob("*.whl"))


def test_cli_refuses_a_run_that_accepted_nothing(empty_run, tmp_path, capsys):
    assert cli(["export", str(empty_run), "--out", str(tmp_path)]) == 2
    assert "accepted no kernel" in capsys.readouterr().err.replace("\n", " ")


def test_cli_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert cli(["export", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "not a tik-agent run" in capsys.readouterr().err


def test_records_that_disagree_with_the_files_are_refused(run_dir, tmp_path, capsys):
    """A verdict whose candidate hash is not the committed kernel's would certify another kernel."""
    run = tmp_path / run_dir.name
    shutil.copytree(run_dir, run)
    writer = LineageWriter(run)
    best = writer.best_commit()
    record = json.loads(git_file(run, "main", "evaluation.json"))
    record["candidate_sha256"] = "0" * 64
    folder = run / "attempts" / "a0003"
    folder.mkdir()
    (folder / "evaluation.json").write_text(json.dumps(record))
    (folder / "candidate.py").write_bytes(git_file(run, "main", "kernel.py"))
    sha = writer.commit_variant("a0003", best, folder / "candidate.py", folder / "evaluation.json",
                                "a0003\n\nAttempt-Id: a0003\nSpeedup-Vs-Seed: 9.0")
    writer.set_best(sha)
    assert cli(["export", str(run), "--out", str(tmp_path / "out")]) == 2
    assert "records disagree with its files" in capsys.readouterr().err.replace("\n", " ")
