"""The sandboxed child process: timeouts, group kill, output capture, env and limits."""

from __future__ import annotations

import json
import math
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tik_agent.sandbox import process
from tik_agent.sandbox.netns import network_isolation_available
from tik_agent.sandbox.process import (
    OUTPUT_TAIL_BYTES,
    SandboxLimits,
    SandboxResult,
    run_sandboxed,
    scrubbed_environment,
)


def run_python(workdir: Path, code: str, limits: SandboxLimits | None = None, **extra: str) -> SandboxResult:
    script = workdir / "child.py"
    script.write_text(textwrap.dedent(code))
    env = scrubbed_environment(extra, workdir=workdir)
    return run_sandboxed([sys.executable, str(script)], workdir, limits or SandboxLimits(wall_seconds=30), env)


def process_gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer exists or is a zombie nobody has reaped yet."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in {"Z", "X"}:
            return True
        time.sleep(0.05)
    return False


def marked_gone(marker: str, within: float = 5.0) -> bool:
    """True once no live process on this machine has ``marker`` in its command line.

    By command line, not pid: inside a PID namespace the child sees other pids."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                    alive.append(proc.name)
            except OSError:
                continue
        if not alive:
            return True
        time.sleep(0.05)
    return False


def spawn_grandchild(marker: str) -> str:
    return f"""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", {marker!r}])
    with open("grandchild.pid", "w") as handle:
        handle.write(str(child.pid))
"""


@pytest.fixture
def marker(tmp_path: Path) -> str:
    return f"tik-grandchild-{tmp_path.name}-{time.monotonic_ns()}"


def test_exit_code_is_reported(tmp_path: Path) -> None:
    result = run_python(tmp_path, "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)")
    assert (result.returncode, result.signal, result.timed_out) == (7, None, False)
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert not result.ok


def test_signal_is_reported(tmp_path: Path) -> None:
    result = run_python(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert (result.returncode, result.signal, result.timed_out) == (None, signal.SIGTERM, False)


def test_success_runs_in_workdir_without_stdin(tmp_path: Path) -> None:
    result = run_python(tmp_path, "import os, sys; print(os.getcwd()); print(repr(sys.stdin.read()))")
    assert result.ok
    assert result.stdout.splitlines() == [str(tmp_path.resolve()), "''"]


def test_timeout_kills_child_and_grandchild(tmp_path: Path, marker: str) -> None:
    code = spawn_grandchild(marker) + "    time.sleep(1000)\n"
    start = time.monotonic()
    result = run_python(tmp_path, code, SandboxLimits(wall_seconds=1.5))
    assert time.monotonic() - start < 10
    assert result.timed_out and result.returncode is None and result.signal == signal.SIGKILL
    assert 1.5 <= result.wall_seconds < 10
    assert (tmp_path / "grandchild.pid").read_text()
    assert marked_gone(marker)


def test_grandchild_of_a_finished_child_is_killed(tmp_path: Path, marker: str) -> None:
    result = run_python(tmp_path, spawn_grandchild(marker))
    assert result.ok, result.stderr
    assert (tmp_path / "grandchild.pid").read_text()
    assert marked_gone(marker)


def test_marked_gone_sees_a_live_process(marker: str) -> None:
    """Negative control: the marker search finds a process that is still running."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        time.sleep(0.2)
        assert not marked_gone(marker, within=0.5)
    finally:
        child.kill()
        child.wait()
    assert marked_gone(marker)


def test_chatty_child_does_not_hang_and_output_is_trimmed(tmp_path: Path) -> None:
    code = """
        import sys
        chunk = "x" * 1023 + "\\n"
        for _ in range(10 * 1024):
            sys.stdout.write(chunk)
            sys.stderr.write(chunk)
        print("END")
    """
    result = run_python(tmp_path, code, SandboxLimits(wall_seconds=60))
    assert result.ok
    assert result.stdout.endswith("END\n")
    assert "bytes trimmed" in result.stdout.splitlines()[0]
    assert len(result.stdout) < OUTPUT_TAIL_BYTES + 100
    assert len(result.stderr) < OUTPUT_TAIL_BYTES + 100


def test_output_is_read_from_our_descriptor_not_the_path(tmp_path: Path) -> None:
    secret = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret.write_text("TOP-SECRET")
    code = f"""
        import os
        print("mine", flush=True)
        os.remove("sandbox.stdout")
        os.symlink({str(secret)!r}, "sandbox.stdout")
    """
    result = run_python(tmp_path, code)
    assert result.ok and result.stdout == "mine\n"


def test_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO_API_KEY", "s3cret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "s3cret")
    monkeypatch.setenv("HARMLESS_LOOKING", "value")
    result = run_python(
        tmp_path, "import json, os; print(json.dumps(dict(os.environ)))", TRITON_INTERPRET="1"
    )
    env = json.loads(result.stdout)
    assert "s3cret" not in result.stdout
    assert not {"FOO_API_KEY", "ANTHROPIC_API_KEY", "HARMLESS_LOOKING"} & set(env)
    assert env["TRITON_INTERPRET"] == "1"
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path.resolve())
    assert env["TRITON_CACHE_DIR"].startswith(str(tmp_path.resolve()))
    assert (env["OMP_NUM_THREADS"], env["PYTHONHASHSEED"], env["PYTHONDONTWRITEBYTECODE"]) == ("1", "0", "1")


def test_scrubbed_environment_starts_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/opt/bin:/usr/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("GITHUB_TOKEN", "x")
    env = scrubbed_environment()
    assert env["PATH"] == "/opt/bin:/usr/bin" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
                        "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"}


@pytest.mark.parametrize(
    "name",
    ["FOO_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "MY_SECRET", "ANTHROPIC_BASE_URL", "OPENAI_ORG",
     "AWS_REGION", "HF_TOKEN", "aws_profile"],
)  # fmt: skip
def test_credential_like_extra_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        scrubbed_environment({name: "x"})


@pytest.mark.parametrize("extra", [{"A=B": "x"}, {"": "x"}, {"OK": "nul\0"}, {"OK": 3}])
def test_malformed_extra_is_refused(extra: dict) -> None:
    with pytest.raises(ValueError):
        scrubbed_environment(extra)


def test_file_size_limit_stops_a_large_write(tmp_path: Path) -> None:
    code = """
        import sys
        try:
            with open("big.bin", "wb") as handle:
                for _ in range(50):
                    handle.write(b"\\0" * 100_000)
        except OSError as err:
            print(err.errno)
            sys.exit(3)
    """
    result = run_python(tmp_path, code, SandboxLimits(wall_seconds=30, file_bytes=1_000_000))
    assert result.returncode == 3, result
    assert (tmp_path / "big.bin").stat().st_size <= 1_000_000


def test_cpu_limit_stops_a_busy_loop(tmp_path: Path) -> None:
    result = run_python(tmp_path, "while True: pass", SandboxLimits(wall_seconds=30, cpu_seconds=1))
    assert not result.timed_out
    assert result.signal in {signal.SIGXCPU, signal.SIGKILL}
    assert result.wall_seconds < 10


def test_memory_limit_stops_a_large_allocation(tmp_path: Path) -> None:
    code = "buffer = bytearray(2 * 1024**3)"
    result = run_python(tmp_path, code, SandboxLimits(wall_seconds=30, memory_bytes=512 * 1024**2))
    assert result.returncode == 1 and "MemoryError" in result.stderr


def test_limits_are_applied_in_the_child(tmp_path: Path) -> None:
    code = """
        import resource
        names = ["RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_AS"]
        print([resource.getrlimit(getattr(resource, n))[0] for n in names])
    """
    limits = SandboxLimits(wall_seconds=30, cpu_seconds=20, memory_bytes=2**32, file_bytes=2**30, max_processes=500)
    result = run_python(tmp_path, code, limits)
    assert result.stdout.strip() == str([0, 500, 2**30, 20, 2**32])


@pytest.mark.skipif(not network_isolation_available(), reason="no network namespaces here")
def test_network_is_isolated(tmp_path: Path) -> None:
    result = run_python(tmp_path, "import socket; print([n for _, n in socket.if_nameindex()])")
    assert result.stdout.strip() == "['lo']"


def test_keyboard_interrupt_kills_the_group_and_reraises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        marker: str) -> None:
    pid_file = tmp_path / "grandchild.pid"

    def interrupted(pid: int, deadline: float, watchdog=None) -> bool:
        while not pid_file.exists() or not pid_file.read_text():
            time.sleep(0.02)
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "_wait_without_reaping", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_python(tmp_path, spawn_grandchild(marker) + "    time.sleep(1000)\n")
    assert marked_gone(marker)


def test_missing_executable_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_sandboxed([str(tmp_path / "nope")], tmp_path, SandboxLimits(), scrubbed_environment())


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="argv"):
        run_sandboxed([], tmp_path, SandboxLimits(), {})
    with pytest.raises(ValueError, match="workdir"):
        run_sandboxed(["true"], tmp_path / "missing", SandboxLimits(), {})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"wall_seconds": 0}, "wall_seconds"),
        ({"wall_seconds": -1}, "wall_seconds"),
        ({"wall_seconds": math.inf}, "wall_seconds"),
        ({"wall_seconds": math.nan}, "wall_seconds"),
        ({"wall_seconds": True}, "wall_seconds"),
        ({"wall_seconds": "10"}, "wall_seconds"),
        ({"cpu_seconds": 0}, "cpu_seconds"),
        ({"memory_bytes": -5}, "memory_bytes"),
        ({"file_bytes": 1.5}, "file_bytes"),
        ({"max_processes": False}, "max_processes"),
    ],
)
def test_limits_are_validated(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"SandboxLimits.{field}"):
        SandboxLimits(**kwargs)


def test_default_limits_are_valid() -> None:
    limits = SandboxLimits()
    assert limits.wall_seconds == 600
    assert limits.cpu_seconds is limits.memory_bytes is limits.file_bytes is limits.max_processes is None
