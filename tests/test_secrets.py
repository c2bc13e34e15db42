"""Nothing secret leaves: the scrub at the worker's door, and end to end through
`tik-agent eval` and `tik-agent optimize` with secrets in the parent's environment
and in a dotfile of its HOME.

The end-to-end runs switch the static rules and the audit hook off (in the driver
process only), so that hostile candidates really run and only the OS isolation and
the scrub stand between them and the secrets.  A second eval runs them under the
bare process sandbox, where they *can* read the secrets: the scrub must catch them
there (and the negative control is that the redaction marker shows up).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import uuid
import zlib
from pathlib import Path

import pytest

from tik_agent.judge import workerbox
from tik_agent.judge.records import Verdict
from tik_agent.outcomes import Outcome
from tik_agent.redaction import REDACTED, scrub_text, scrub_worker_data, secret_values
from tik_agent.run.runconfig import Limits, RunConfig
from tik_agent.sandbox.isolation import best
from tik_agent.sandbox.process import SandboxResult, open_worker_file
from seedutil import edit, small_rmsnorm

pytestmark = pytest.mark.slow  # evaluations, runs, exports or whole seeds under the interpreter

REPO = Path(__file__).resolve().parents[1]
REPORT_LEVEL = best().report().level


# --- the scrub -------------------------------------------------------------------------------------------

def test_secret_values_come_from_credential_names_and_key_shapes(monkeypatch) -> None:
    monkeypatch.setenv("MY_DB_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("INNOCENT", "sk-ant-api03-abcdefghijklmnopqrstu")
    monkeypatch.setenv("TIK_FLAG_TOKEN", "true")  # a setting, not a secret
    monkeypatch.setenv("EDITOR", "vim-with-a-long-name")
    values = secret_values()
    assert "hunter2hunter2" in values and "sk-ant-api03-abcdefghijklmnopqrstu" in values
    assert "true" not in values and "vim-with-a-long-name" not in values


def test_scrub_text_redacts_before_it_caps(monkeypatch) -> None:
    secret = "Zq" + uuid.uuid4().hex
    monkeypatch.setenv("SERVICE_SECRET", secret)
    text = "x" * 50 + secret + "tail"
    cleaned = scrub_text(text, limit=len(secret) // 2 + 10)  # a cut through the secret, were it still there
    assert secret[-8:] not in cleaned and cleaned.endswith(REDACTED + "tail")
    assert secret not in scrub_text(text) and REDACTED in scrub_text(text)
    assert len(scrub_text("y" * 20_000)) <= 8003
    assert scrub_text("nothing to hide") == "nothing to hide"  # negative control


def test_scrub_worker_data_walks_keys_lists_and_tuples(monkeypatch) -> None:
    secret = "Kq" + uuid.uuid4().hex
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    data = {"status": "runtime_error", "error": f"boom {secret}", secret: [("a", secret), 3], "n": 1.5}
    cleaned = scrub_worker_data(data)
    assert secret not in json.dumps(cleaned, default=str)
    assert cleaned["n"] == 1.5 and cleaned["status"] == "runtime_error"


def test_from_worker_scrubs_process_output(monkeypatch) -> None:
    secret = "Pq" + uuid.uuid4().hex
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    proc = SandboxResult(1, False, None, 0.1, f"out {secret}", f"err {secret}")
    cleaned = workerbox.from_worker(proc)
    assert secret not in cleaned.stdout + cleaned.stderr and REDACTED in cleaned.stderr


def test_worker_files_are_not_read_through_symlinks(tmp_path) -> None:
    target = tmp_path / "secret.json"
    target.write_text('{"status": "ok", "environment": {"key": "leaked"}}')
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "result.json").symlink_to(target)
    assert open_worker_file(tmp_path / "box" / "result.json") is None
    with open_worker_file(target) as handle:  # negative control: a plain file is read
        assert b"leaked" in handle.read()


def test_verdict_and_run_config_without_isolation_still_load() -> None:
    old = Verdict(Outcome.PASSED, None).to_dict()
    old.pop("isolation")
    assert Verdict.from_dict(old).isolation is None
    new = Verdict(Outcome.PASSED, None, isolation={"level": "full", "mechanism": "bwrap", "layers": ["pid"]})
    assert Verdict.from_dict(new.to_dict()).isolation == new.isolation
    config = RunConfig("r", "rmsnorm", "/x", "offline", None, None, 0, "cpu", 5, 1, 900.0, 1, Limits())
    d = config.to_dict()
    d.pop("sandbox")
    assert RunConfig.from_dict(d).sandbox == {}
    sandboxed = dataclasses.replace(config, sandbox={"mode": "strict", "level": "full"})
    assert RunConfig.from_dict(sandboxed.to_dict()).sandbox["level"] == "full"


# --- end to end -------------------------------------------------------------------------------------------

DRIVER = """
import sys
sys.path.insert(0, {repo!r})
from tik_agent.judge import evaluate
from tik_agent.sandbox import isolation, static

static.check_source = lambda source, name, **_: []  # hostile code must get to run
_request = evaluate._request
def request(*args, **kwargs):
    req = _request(*args, **kwargs)
    req["guard"] = False  # and with no audit hook: the OS layer and the scrub alone
    return req
evaluate._request = request
if {bare!r}:
    isolation.best = lambda: isolation.PROCESS
from tik_agent import cli
codes = [cli.run(argv) for argv in {runs!r}]
print("EXIT CODES", codes)
"""

GRAB = """
import os, sys

def _grab():
    found = ["HOSTILE-RAN", repr(dict(os.environ))]
    # Every process first, the secrets' likeliest homes last: the evaluator keeps a message's
    # tail, and on a busy machine the other processes' environments alone outgrow it.
    paths = [f"/proc/{{pid}}/environ" for pid in os.listdir("/proc") if pid.isdigit()]
    paths += [f"/proc/{{os.getppid()}}/environ", "/proc/1/environ", {dotfile!r}, os.path.expanduser("~/.tik-key")]
    for path in paths:
        try:
            found.append(open(path, "rb").read().decode(errors="replace").replace("\\0", " "))
        except Exception as exc:
            found.append(f"{{path}}: {{type(exc).__name__}}")
    return " | ".join(found + ["HOSTILE-RAN"])  # at both ends: the evaluator keeps a message's tail
"""

AT_CALL = GRAB + """
def rms_norm(x, weight, eps=1e-6):
    text = _grab()
    print(text)
    print(text, file=sys.stderr)
    raise RuntimeError(text)
"""

AT_IMPORT = GRAB + """
_text = _grab()
print(_text, file=sys.stderr)
raise ImportError(_text)
"""


@pytest.fixture(scope="module")
def secrets(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    home.chmod(0o755)
    values = {"env": f"sk-ant-api03-{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}",
              "plain": f"pw{uuid.uuid4().hex}", "dot": f"sk-ant-dot-{uuid.uuid4().hex}"}
    dotfile = home / ".tik-key"
    dotfile.write_text(values["dot"])
    dotfile.chmod(0o644)
    tmp = tmp_path_factory.mktemp("tmp")
    tmp.chmod(0o777)
    env = dict(os.environ, ANTHROPIC_API_KEY=values["env"], MY_DB_PASSWORD=values["plain"], HOME=str(home),
               TMPDIR=str(tmp), PYTHONPATH=str(REPO))
    seed = small_rmsnorm(tmp_path_factory.mktemp("seed"))
    # Fewer cases still (the scrub and the isolation are what is watched; each run audits this seed).
    edit(seed / "spec.toml", "N = [256, 1000]", "N = [256]")
    edit(seed / "spec.toml", 'dtypes = ["float32", "bfloat16"]', 'dtypes = ["float32"]')
    return {"values": values, "env": env, "dotfile": str(dotfile), "tmp": tmp, "home": home, "seed": str(seed)}


def _everything_under(path: Path) -> str:
    """Every file's text under ``path``, git objects inflated."""
    chunks = []
    for f in path.rglob("*"):
        if not f.is_file() or f.is_symlink():
            continue
        data = f.read_bytes()
        if "/.git/objects/" in str(f):
            try:
                data = zlib.decompress(data)
            except zlib.error:
                pass
        chunks.append(data.decode("utf-8", errors="replace"))
    return "\n".join(chunks)


def _leaks(secrets, text: str) -> list[str]:
    return [name for name, value in secrets["values"].items() if value in text]


def _drive(secrets, tmp_path: Path, runs: list[list[str]], bare: bool) -> str:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(repo=str(REPO), bare=bare, runs=runs))
    proc = subprocess.run([sys.executable, str(driver)], cwd=tmp_path, env=secrets["env"], capture_output=True,
                          text=True, timeout=900)
    assert "EXIT CODES" in proc.stdout, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _candidates(secrets, tmp_path: Path) -> list[Path]:
    files = []
    for name, template in (("at_call.py", AT_CALL), ("at_import.py", AT_IMPORT)):
        f = tmp_path / name
        f.write_text(textwrap.dedent(template.format(dotfile=secrets["dotfile"])))
        files.append(f)
    return files


@pytest.mark.slow
def test_eval_of_hostile_candidates_and_a_seed_leaks_nothing(secrets, tmp_path) -> None:
    seed = secrets["seed"]
    runs = [["eval", str(c), "--seed", seed, "--json", "--no-timing"] for c in _candidates(secrets, tmp_path)]
    runs.append(["eval", str(Path(seed) / "kernel.py"), "--seed", seed, "--json", "--rounds", "1"])
    text = _drive(secrets, tmp_path, runs, bare=False)
    # The hostile two are rejected; the seed against itself passes, or is "slower" when the machine is busy.
    seed_ok = "EXIT CODES [1, 1, 0]" in text or ("EXIT CODES [1, 1, 1]" in text and '"outcome": "slower"' in text)
    assert seed_ok, text[-3000:]
    assert '"level": "full"' in text or REPORT_LEVEL != "full"  # each verdict says which isolation held
    assert text.count("HOSTILE-RAN") >= 2  # the hostile code did run, and its report came back
    assert _leaks(secrets, text) == [] and _leaks(secrets, _everything_under(tmp_path)) == []
    assert _leaks(secrets, _everything_under(secrets["tmp"])) == []


@pytest.mark.slow
def test_eval_under_the_bare_process_sandbox_is_scrubbed(secrets, tmp_path) -> None:
    """Here the candidate can read the parent's environment and the dotfile: the scrub must catch both."""
    at_call = _candidates(secrets, tmp_path)[0]
    text = _drive(secrets, tmp_path, [["eval", str(at_call), "--seed", secrets["seed"], "--json", "--no-timing"]],
                  bare=True)
    assert "HOSTILE-RAN" in text and REDACTED in text  # it reached secrets, and they were replaced
    assert _leaks(secrets, text) == []


@pytest.mark.slow
def test_offline_optimize_run_leaks_nothing(secrets, tmp_path) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "tik_agent", "optimize", secrets["seed"], "--agent", "offline", "--iterations", "1",
           "--rounds", "1", "--run-dir", str(run_dir)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=secrets["env"], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "run.json").read_text())
    assert config["sandbox"]["mode"] == "auto" and config["sandbox"]["level"] in ("full", "partial", "process")
    files = _everything_under(run_dir)
    assert "isolation" in files  # the verdicts say which isolation they ran under
    assert _leaks(secrets, proc.stdout + proc.stderr) == [] and _leaks(secrets, files) == []
    assert _leaks(secrets, _everything_under(secrets["tmp"])) == []
