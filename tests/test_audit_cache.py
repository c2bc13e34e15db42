"""The seed-audit cache (issue 18, item 5): a second run of the same seed reuses the first
run's audit; a changed seed, spec, grid, device, option or version misses; --fresh-audit
and a corrupt entry recompute.

One real audit of the tiny seed is made per module (the ``audited`` fixture); every
test works on a private copy of its cache.  A test that must prove nothing was
computed replaces the seed's computations (in ``rundir`` and ``seedaudit``) with :func:`refuse_to_compute`,
so a miss ends at once in :class:`Recomputed` instead of a new audit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from optimize_helpers import cli, tiny_config, tiny_seed

import tik_agent
from tik_agent.judge import seedaudit
from tik_agent.judge.auditcache import CACHE_ENV, RECORD, AuditCache, AuditFiles, AuditKey, cache_root
from tik_agent.run import rundir
from tik_agent.search import setup
from tik_agent.run.lineage import EVALUATION_FILE, open_run
from tik_agent.spec.schema import load_spec

pytestmark = pytest.mark.slow  # the module's fixture audits the tiny seed (runs are created throughout)

# The seed's outputs and its audit, where a run's creation calls them: (module, name).
COMPUTATIONS = ((setup, "compute_reference"), (seedaudit, "compute_reference"), (seedaudit, "evaluate"))


class Recomputed(Exception):
    """Raised where the seed's outputs or audit would be computed."""


def refuse_to_compute(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise Recomputed

    for module, name in COMPUTATIONS:
        monkeypatch.setattr(module, name, refuse)


def count_computations(monkeypatch) -> Counter:
    calls: Counter = Counter()
    for module, name in COMPUTATIONS:
        def counted(*args, _real=getattr(module, name), _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "audits").iterdir() if not p.name.startswith("."))


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """The tiny seed, a run of it, and the cache that run's creation filled (one real audit)."""
    base = tmp_path_factory.mktemp("audited")
    seed = tiny_seed(base)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(base / "cache"))
        calls = count_computations(patch)
        setup.create(base / "first", tiny_config(seed, "first")).close()
    return SimpleNamespace(seed=seed, cache=base / "cache", first=base / "first", calls=dict(calls))


@pytest.fixture
def cache(audited, tmp_path, monkeypatch) -> Path:
    """A private copy of the filled cache, the one this test's runs use."""
    path = shutil.copytree(audited.cache, tmp_path / "cache")
    monkeypatch.setenv(CACHE_ENV, str(path))
    return path


@pytest.fixture
def seed(audited, tmp_path) -> Path:
    """A private copy of the seed (elsewhere: the seed's path is not part of the key)."""
    return shutil.copytree(audited.seed, tmp_path / "seed")


def test_a_second_run_reuses_the_first_runs_audit(audited, cache, seed, tmp_path, monkeypatch, caplog):
    assert audited.calls == {"compute_reference": 1, "evaluate": 1}  # the control: the first run computed
    [entry] = entries(cache)
    refuse_to_compute(monkeypatch)
    caplog.set_level(logging.INFO, logger="tik_agent")
    setup.create(tmp_path / "second", tiny_config(seed, "second")).close()
    assert f"reusing the seed's audit from {entry} (same seed, spec, grid, device and versions" in caplog.text
    assert "auditing the seed" not in caplog.text
    second, first = tmp_path / "second", audited.first
    assert (second / EVALUATION_FILE).read_bytes() == (first / EVALUATION_FILE).read_bytes()
    assert (second / rundir.REFERENCE_CACHE).read_bytes() == (first / rundir.REFERENCE_CACHE).read_bytes()
    lineage = open_run(second)
    root = lineage.root_commit()
    assert lineage.file_at(root, EVALUATION_FILE) == open_run(first).file_at(open_run(first).root_commit(),
                                                                             EVALUATION_FILE)
    assert lineage.trailers(root)["Audit-Reused"] == entry.name
    assert "Audit-Reused" not in open_run(first).trailers(open_run(first).root_commit())


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


CHANGES = {
    "unchanged": lambda seed, config, mp: config,
    "kernel.py": lambda seed, config, mp: _edit(seed / "kernel.py", "ROWS_PER_PROGRAM = 1\n",
                                                "ROWS_PER_PROGRAM = 2\n"),
    "spec.toml": lambda seed, config, mp: _edit(seed / "spec.toml", "M = 16\nN = 512", "M = 12\nN = 512"),
    "tik-agent version": lambda seed, config, mp: mp.setattr(tik_agent, "__version__", tik_agent.__version__ + "+1"),
    "triton version": lambda seed, config, mp: mp.setattr("triton.__version__", "0.0.1"),
    "device": lambda seed, config, mp: dataclasses.replace(
        config, binding={**config.binding, "device_name": "another device"}),
    "timing rounds": lambda seed, config, mp: dataclasses.replace(config, rounds=3),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_of_what_the_audit_depends_on_misses(change, cache, seed, tmp_path, monkeypatch):
    config = tiny_config(seed, "run")
    config = CHANGES[change](seed, config, monkeypatch) or config
    refuse_to_compute(monkeypatch)
    if change == "unchanged":  # the control: the same seed, settings and versions hit
        setup.create(tmp_path / "run", config).close()
        return
    with pytest.raises(Recomputed):
        setup.create(tmp_path / "run", config)


def test_fresh_audit_recomputes_even_on_a_hit(cache, seed, tmp_path, monkeypatch):
    refuse_to_compute(monkeypatch)
    with pytest.raises(Recomputed):
        setup.create(tmp_path / "run", tiny_config(seed, "run"), fresh_audit=True)
    setup.create(tmp_path / "control", tiny_config(seed, "control")).close()  # the same, without it, hits


def test_fresh_audit_on_resuming_a_made_run_only_warns(audited, cache, tmp_path, monkeypatch, caplog):
    run = shutil.copytree(audited.first, tmp_path / "run", symlinks=True)
    refuse_to_compute(monkeypatch)
    setup.reopen(run, tiny_config(audited.seed, "first"), fresh_audit=True).close()
    assert "the seed's audit is already committed; --fresh-audit changes nothing here" in caplog.text


def _garbage_reference(entry: Path) -> None:
    (entry / "reference.pt").write_bytes(b"not a tensor file")


def _edited_timing(entry: Path) -> None:
    audit = json.loads((entry / "evaluation.json").read_text())
    audit["timing"][0]["seed"]["median_ms"] /= 2  # valid JSON, a better-looking seed
    (entry / "evaluation.json").write_text(json.dumps(audit))


def _truncated_record(entry: Path) -> None:
    text = (entry / RECORD).read_text()
    (entry / RECORD).write_text(text[: len(text) // 2])


def _record_of_another_key(entry: Path) -> None:
    record = json.loads((entry / RECORD).read_text())
    record["key"]["versions"]["torch"] = "0.0.1"
    (entry / RECORD).write_text(json.dumps(record))


def _missing_evaluation(entry: Path) -> None:
    (entry / "evaluation.json").unlink()


CORRUPTIONS = [_garbage_reference, _edited_timing, _truncated_record, _record_of_another_key, _missing_evaluation]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_corrupt_entry_is_recomputed_with_a_warning(corrupt, cache, seed, tmp_path, monkeypatch, caplog):
    [entry] = entries(cache)
    corrupt(entry)
    refuse_to_compute(monkeypatch)
    with pytest.raises(Recomputed):
        setup.create(tmp_path / "run", tiny_config(seed, "run"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"the cached audit {entry} is unusable" in w for w in warnings), warnings
    # Nothing of the entry is left in the run to be trusted half-way.
    assert not (tmp_path / "run" / EVALUATION_FILE).exists()
    assert not (tmp_path / "run" / rundir.REFERENCE_CACHE).exists()


def test_storing_replaces_a_corrupt_entry_whole(audited, cache, tmp_path):
    [entry] = entries(cache)
    _garbage_reference(entry)
    config = tiny_config(audited.seed, "first")
    key = AuditKey.of(load_spec(audited.first), setup.eval_options(config), config.binding)
    assert key.digest == entry.name
    first = AuditFiles(audited.first / rundir.REFERENCE_CACHE, audited.first / EVALUATION_FILE)
    assert AuditCache(cache).store(key, first) == entry
    into = AuditFiles(tmp_path / "reference.pt", tmp_path / "evaluation.json")
    assert AuditCache(cache).fetch(key, into) == entry
    assert into.reference.read_bytes() == first.reference.read_bytes()
    assert entries(cache) == [entry]  # no temporary or set-aside directory is left


def test_the_cache_root_follows_the_environment(tmp_path):
    assert cache_root({CACHE_ENV: str(tmp_path), "XDG_CACHE_HOME": "/x"}) == tmp_path
    assert cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/tik-agent")
    assert cache_root({}) == Path.home() / ".cache" / "tik-agent"


def test_a_new_cache_root_is_private(audited, tmp_path):
    root = tmp_path / "new" / "cache"
    key = AuditKey.of(load_spec(audited.first), setup.eval_options(tiny_config(audited.seed, "x")), {"device": "cpu"})
    AuditCache(root).store(key, AuditFiles(audited.first / rundir.REFERENCE_CACHE, audited.first / EVALUATION_FILE))
    assert root.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
def test_the_cli_says_the_audit_was_reused(cache, seed, tmp_path):
    assert "--fresh-audit" in cli("optimize", "--help").stdout
    # The tiny config's settings (the key has them); a time budget spent before the first attempt.
    args = ["optimize", str(seed), "--agent", "offline", "--rounds", "5", "--eval-timeout", "120",
            "--time-budget", "0.001", "--device", "cpu"]
    done = cli(*args, "--run-dir", str(tmp_path / "run"), env={CACHE_ENV: str(cache)})
    assert done.returncode == 0, done.stderr
    assert "reusing the seed's audit from" in done.stderr and "auditing the seed" not in done.stderr


@pytest.mark.slow
def test_the_cli_fresh_audit_recomputes_and_refreshes_the_entry(audited, cache, seed, tmp_path):
    [entry] = entries(cache)
    stored = json.loads((entry / RECORD).read_text())["stored"]
    args = ["optimize", str(seed), "--agent", "offline", "--rounds", "5", "--eval-timeout", "120",
            "--time-budget", "0.001", "--device", "cpu", "--fresh-audit"]
    done = cli(*args, "--run-dir", str(tmp_path / "run"), env={CACHE_ENV: str(cache)})
    assert done.returncode == 0, done.stderr
    assert "auditing the seed" in done.stderr and "reusing" not in done.stderr
    assert entries(cache) == [entry]
    assert (entry / "evaluation.json").read_bytes() == (tmp_path / "run" / EVALUATION_FILE).read_bytes()
    # A new audit (its timings are new measurements), now the entry's, committed as computed.
    assert (entry / "evaluation.json").read_bytes() != (audited.first / EVALUATION_FILE).read_bytes()
    assert json.loads((entry / RECORD).read_text())["stored"] >= stored
    lineage = open_run(tmp_path / "run")
    assert "Audit-Reused" not in lineage.trailers(lineage.root_commit())
