"""The OS boundary, proved from inside: a probe runs through the evaluator's own
isolation wrapper with no static rules and no audit hook, so only the operating
system stands between it and the parent.

On CI (CI=true) and wherever bubblewrap is installed the isolation must be full and
these tests must run; elsewhere they skip, saying which level the machine gives.
Each probe has a negative control: the same probe outside the sandbox (or under
the bare process sandbox) does reach what the sandbox denies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from tik_agent.sandbox import isolation
from tik_agent.sandbox.isolation import PROCESS, IsolationReport, level_of
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment

pytestmark = pytest.mark.slow  # sandboxed workers and CLI evaluations

REPORT = isolation.best().report()
MUST_BE_FULL = os.environ.get("CI") == "true" or shutil.which("bwrap") is not None


def test_isolation_is_full_where_it_must_be() -> None:
    if MUST_BE_FULL:
        assert REPORT.level == "full", REPORT.notice()
    else:
        pytest.skip(f"no bubblewrap and not CI: {REPORT.notice()}")


needs_full = pytest.mark.skipif(REPORT.level != "full" and not MUST_BE_FULL,
                                reason=f"isolation here is {REPORT.level}: {REPORT.notice()}")

PROBE = r'''
import ctypes, json, os, socket, sys, time

cfg = json.loads(sys.argv[1])
out = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups()}

def attempt(name, fn):
    try:
        value = fn()
        out[name] = "ok" if value is None else value
    except BaseException as exc:
        out[name] = f"denied: {type(exc).__name__}: {exc}"

def listing():
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                found[pid] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:200]
            except OSError as exc:
                found[pid] = f"unreadable: {exc}"
    return found

attempt("proc", listing)
attempt("ppid_environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read().decode(errors="replace"))
attempt("host_pid_environ", lambda: open(f"/proc/{cfg['host_pid']}/environ", "rb").read().decode(errors="replace"))
attempt("environ", lambda: dict(os.environ))
for i, path in enumerate(cfg["dotfiles"]):
    attempt(f"dotfile{i}", lambda: open(path).read())
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
out["status"] = {k: status[k].strip() for k in ("CapEff", "CapPrm", "NoNewPrivs", "Seccomp") if k in status}

libc = ctypes.CDLL(None, use_errno=True)
def c_open(path):
    fd = libc.open(path.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    os.write(fd, b"x"); os.close(fd)
def c_creat(path):
    fd = libc.creat(path.encode(), 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    os.close(fd)
def py_open(path):
    with open(path, "w") as handle:
        handle.write("x")
def storage(path):
    import torch
    torch.UntypedStorage.from_file(path, shared=True, nbytes=16)
def tensor_save(path):
    import torch
    torch.save(torch.ones(2), path)
routes = {"py_open": py_open, "c_open": c_open, "c_creat": c_creat, "storage": storage, "tensor_save": tensor_save}
for where, base in (("in", cfg["inside"]), ("out", cfg["outside"])):
    for name, fn in routes.items():
        attempt(f"write_{where}_{name}", lambda: fn(os.path.join(base, f"{name}.bin")))
attempt("write_input", lambda: py_open(cfg["input"]))
def replace_input():
    py_open(cfg["input"] + ".new")
    os.replace(cfg["input"] + ".new", cfg["input"])
attempt("replace_input", replace_input)
if not cfg.get("control"):  # the unsandboxed control must not litter the machine
    attempt("write_root", lambda: py_open(f"/tik-escape-{cfg['token']}.txt"))
    attempt("write_tmp", lambda: py_open(f"/tmp/tik-escape-{cfg['token']}.txt"))

def connect():
    with socket.create_connection(("127.0.0.1", cfg["port"]), timeout=2) as conn:
        return conn.recv(16).decode()
attempt("connect", connect)
attempt("interfaces", lambda: [name for _, name in socket.if_nameindex()])

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", cfg["marker"]])
    os._exit(0)
time.sleep(0.3)
print(json.dumps(out))
'''


def _marked_alive(marker: str) -> list[int]:
    alive = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                alive.append(int(proc.name))
        except OSError:
            continue
    return alive


def _wait_gone(marker: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _marked_alive(marker):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """Things outside the sandbox the probe goes for, and a listening socket."""
    token = uuid.uuid4().hex   # in names, which the probe is told
    secret = uuid.uuid4().hex  # only in contents, which it must not reach
    outside = tmp_path_factory.mktemp("outside")
    outside.chmod(0o777)  # so that only the isolation, not file modes, stops nobody
    open_home = tmp_path_factory.mktemp("home")
    open_home.chmod(0o755)
    readable = open_home / ".anthropic_key"
    readable.write_text(f"sk-ant-open-{secret}")
    readable.chmod(0o644)
    real_home = Path.home() / f".tik-isolation-probe-{token}"
    real_home.write_text(f"sk-ant-home-{secret}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello")

    threading.Thread(target=serve, daemon=True).start()
    yield {"token": token, "secret": secret, "outside": str(outside), "dotfiles": [str(readable), str(real_home)],
           "port": server.getsockname()[1]}
    server.close()
    real_home.unlink()


def _probe(world: dict, workdir: Path, isolation_choice=None, env_secret: str | None = None,
           control: bool = False) -> tuple[dict, str]:
    marker = f"tik-probe-{uuid.uuid4().hex}"
    (workdir / "probe.py").write_text(PROBE)
    (workdir / "input.txt").write_text("seed")
    cfg = dict(world, secret=None, inside=str(workdir.resolve()), input=str((workdir / "input.txt").resolve()),
               marker=marker, host_pid=os.getpid(), control=control)
    if control:  # a control may write where it likes: not into the directory the real probe must leave empty
        cfg["outside"] = str(workdir.resolve())
    env = scrubbed_environment(workdir=workdir)
    argv = [sys.executable, "-I", "probe.py", json.dumps(cfg)]
    old = os.environ.get("TIK_PROBE_API_KEY")
    if env_secret:
        os.environ["TIK_PROBE_API_KEY"] = env_secret  # in the parent: the probe must not find it
    try:
        result = run_sandboxed(argv, workdir, SandboxLimits(wall_seconds=120), env, isolation=isolation_choice)
    finally:
        if env_secret:
            os.environ.pop("TIK_PROBE_API_KEY") if old is None else os.environ.__setitem__("TIK_PROBE_API_KEY", old)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), marker


@pytest.fixture(scope="module")
def inside(world, tmp_path_factory):
    """One probe run under the evaluator's isolation (the strongest this machine gives)."""
    workdir = tmp_path_factory.mktemp("sandbox")
    secret = f"env-{world['secret']}"
    out, marker = _probe(world, workdir, env_secret=secret)
    return {"out": out, "marker": marker, "workdir": workdir, "secret": secret}


@pytest.fixture(scope="module")
def outside_run(world, tmp_path_factory):
    """Negative control: the same probe with no isolation at all, as the parent's user."""
    workdir = tmp_path_factory.mktemp("unsandboxed")
    (workdir / "probe.py").write_text(PROBE)
    (workdir / "input.txt").write_text("seed")
    marker = f"tik-probe-{uuid.uuid4().hex}"
    elsewhere = tmp_path_factory.mktemp("outside-control")
    cfg = dict(world, secret=None, inside=str(workdir), outside=str(elsewhere), input=str(workdir / "input.txt"), marker=marker,
               host_pid=os.getpid(), control=True)
    proc = subprocess.run([sys.executable, "-I", str(workdir / "probe.py"), json.dumps(cfg)], cwd=workdir,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for pid in _marked_alive(marker):
        os.kill(pid, signal.SIGKILL)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_full
def test_not_root_and_no_capabilities(inside) -> None:
    out = inside["out"]
    assert out["uid"] != 0 and out["euid"] != 0 and 0 not in out["groups"]
    assert int(out["status"]["CapEff"], 16) == 0 and int(out["status"]["CapPrm"], 16) == 0
    assert out["status"]["NoNewPrivs"] == "1"
    assert out["status"]["Seccomp"] == "2"  # a filter is loaded


@needs_full
def test_proc_shows_only_the_sandbox(inside, outside_run) -> None:
    me = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    seen = inside["out"]["proc"]
    assert isinstance(seen, dict) and len(seen) <= 4, seen  # the namespace's init, the probe, its children
    assert me not in seen.values(), seen
    assert inside["out"]["host_pid_environ"].startswith("denied")
    # Negative control: unsandboxed, the parent (this test process) is there to read.
    assert me in outside_run["proc"].values()
    assert not outside_run["host_pid_environ"].startswith("denied")


@needs_full
def test_parent_environment_and_dotfiles_stay_out(inside, outside_run, world) -> None:
    text = json.dumps(inside["out"])
    assert world["secret"] not in text
    for i in range(len(world["dotfiles"])):
        assert inside["out"][f"dotfile{i}"].startswith("denied"), inside["out"][f"dotfile{i}"]
        assert world["secret"] in outside_run[f"dotfile{i}"]  # negative control


@needs_full
@pytest.mark.parametrize("route", ["py_open", "c_open", "c_creat", "storage", "tensor_save"])
def test_no_write_outside_by_any_route(inside, outside_run, world, route) -> None:
    out = inside["out"]
    assert out[f"write_in_{route}"] == "ok", out[f"write_in_{route}"]  # the probe's route works...
    assert out[f"write_out_{route}"].startswith("denied"), out[f"write_out_{route}"]  # ...but not outside
    assert outside_run[f"write_out_{route}"] == "ok"  # negative control: unsandboxed it writes


@needs_full
def test_outside_dir_and_inputs_unchanged(inside, world) -> None:
    assert list(Path(world["outside"]).iterdir()) == []
    out = inside["out"]
    assert out["write_input"].startswith("denied") and out["replace_input"].startswith("denied")
    assert (inside["workdir"] / "input.txt").read_text() == "seed"
    assert out["write_root"].startswith("denied") and out["write_tmp"].startswith("denied")
    assert not Path(f"/tik-escape-{world['token']}.txt").exists()
    assert not Path(f"/tmp/tik-escape-{world['token']}.txt").exists()


@needs_full
def test_no_network(inside, outside_run) -> None:
    assert inside["out"]["connect"].startswith("denied")
    assert outside_run["connect"] == "hello"  # negative control
    assert inside["out"]["interfaces"] == ["lo"]


@needs_full
def test_detached_grandchild_dies_with_the_sandbox(inside) -> None:
    assert _wait_gone(inside["marker"]), _marked_alive(inside["marker"])


def test_detached_grandchild_survives_the_bare_process_sandbox(world, tmp_path) -> None:
    """Negative control for the test above: without a PID namespace, setsid escapes."""
    out, marker = _probe(world, tmp_path, isolation_choice=PROCESS, control=True)
    try:
        time.sleep(0.3)
        assert _marked_alive(marker)
    finally:
        for pid in _marked_alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_levels() -> None:
    assert level_of(isolation.LAYERS) == "full"
    assert level_of(("user", "pid", "mount", "net", "nnp", "landlock")) == "full"
    assert level_of(("user", "pid", "mount", "net", "nnp")) == "partial"
    assert level_of(("pid", "net", "nnp", "seccomp", "landlock")) == "partial"
    assert level_of(("net", "nnp")) == "process"


def test_report_round_trip_and_notice() -> None:
    full = IsolationReport("full", "bwrap", isolation.LAYERS)
    assert full.notice() is None and IsolationReport.from_dict(full.to_dict()) == full
    part = IsolationReport("partial", "unshare", ("pid", "net", "nnp"), "bwrap: not installed")
    line = part.notice()
    assert "\n" not in line and "partial" in line and "mount" in line and "bwrap: not installed" in line


def test_strict_refuses_a_weaker_machine(monkeypatch) -> None:
    from tik_agent.errors import UsageError

    monkeypatch.setattr(isolation, "best", lambda: isolation.Isolation("process", ("net",), why="bwrap: not installed"))
    with pytest.raises(UsageError, match="--sandbox strict: .*process.*missing: user, pid, mount"):
        isolation.require("strict")
    assert isolation.require("auto").level == "process"
    with pytest.raises(UsageError, match="unknown mode"):
        isolation.require("lax")


@needs_full
def test_eval_cli_strict_exits_2_on_a_weaker_machine(monkeypatch, capsys) -> None:
    from tik_agent import cli

    seed = "seed_kernels/rmsnorm/kernel.py"
    monkeypatch.setattr(isolation, "best", lambda: isolation.Isolation("process", ("net",)))
    assert cli.run(["eval", seed, "--seed", "rmsnorm", "--sandbox", "strict"]) == 2
    err = capsys.readouterr().err
    assert "--sandbox strict" in err and len(err.strip().splitlines()) == 1


def test_eval_cli_says_so_on_one_line_when_not_full(monkeypatch, capsys, tmp_path) -> None:
    from tik_agent import cli

    bad = tmp_path / "cand.py"
    bad.write_text("import os\n")  # rejected by the static rules: nothing runs
    monkeypatch.setattr(isolation, "best", lambda: isolation.Isolation("process", ("net",)))
    assert cli.run(["eval", str(bad), "--seed", "rmsnorm", "--json"]) == 1
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sandbox:")]
    assert len(notices) == 1 and "process" in notices[0]


def test_no_notice_when_full(monkeypatch, capsys, tmp_path) -> None:
    from tik_agent import cli

    bad = tmp_path / "cand.py"
    bad.write_text("import os\n")
    monkeypatch.setattr(isolation, "best", lambda: isolation.Isolation("bwrap", isolation._CONTAINED, False, True, True))
    assert cli.run(["eval", str(bad), "--seed", "rmsnorm", "--json", "--sandbox", "strict"]) == 1
    assert "sandbox:" not in capsys.readouterr().err


def test_optimize_strict_exits_2_before_creating_the_run(monkeypatch, capsys, tmp_path) -> None:
    from tik_agent import cli

    monkeypatch.setattr(isolation, "best", lambda: isolation.Isolation("unshare", ("pid", "net"), why="bwrap: x"))
    run_dir = tmp_path / "run"
    argv = ["optimize", "rmsnorm", "--agent", "offline", "--iterations", "1", "--run-dir", str(run_dir)]
    assert cli.run(argv + ["--sandbox", "strict"]) == 2
    err = capsys.readouterr().err
    assert "--sandbox strict" in err and "unshare" in err and "mount" in err
    assert not run_dir.exists() or not any(run_dir.iterdir())


@needs_full
def test_unshare_fallback_still_holds_the_boundary(world, tmp_path) -> None:
    """The next mechanism down (no bwrap): PID and network namespaces, Landlock for the files."""
    if not shutil.which("unshare"):
        pytest.skip("util-linux unshare is not installed")
    fallback = isolation.Isolation("unshare", ("pid", "net"), False, landlock=True, seccomp="seccomp" in REPORT.layers)
    assert fallback.report().level == "partial" and "mount" in fallback.report().missing
    out, marker = _probe(world, tmp_path, isolation_choice=fallback, env_secret=f"env-{world['secret']}")
    assert len(out["proc"]) <= 4 and world["secret"] not in json.dumps(out)
    assert all(out[f"dotfile{i}"].startswith("denied") for i in range(len(world["dotfiles"])))
    assert all(out[f"write_out_{r}"].startswith("denied") for r in ("py_open", "c_open", "c_creat", "storage"))
    assert out["write_in_storage"] == "ok" and out["connect"].startswith("denied")
    assert _wait_gone(marker)
