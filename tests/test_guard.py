"""The audit-hook guard, exercised in one sandboxed child (hooks cannot be removed).

The child imports torch and triton (interpreter mode), installs the guard, runs every
probe below and writes a JSON verdict per probe into its sandbox directory.  It also
runs the three legitimate kernels of the static corpus under the guard, to show the
guard leaves normal Triton work alone.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tik_agent.sandbox.isolation import PROCESS
from tik_agent.sandbox.process import SandboxLimits, run_sandboxed, scrubbed_environment

REPO = Path(__file__).resolve().parents[1]
LEGIT = REPO / "tests" / "adversarial" / "static" / "legit"

# name -> (code run in the guarded child, expected outcome).  In the code, SANDBOX and
# OUTSIDE are directories; OUTSIDE is writable by the user, so "denied" is the guard.
PROBES: dict[str, tuple[str, str]] = {
    "write_inside": ("open(SANDBOX + '/ok.txt', 'w').write('x')", "ok"),
    "write_outside": ("open(OUTSIDE + '/new.txt', 'w')", "denied"),
    "append_outside": ("open(OUTSIDE + '/readable.txt', 'a')", "denied"),
    "read_write_outside": ("open(OUTSIDE + '/readable.txt', 'r+')", "denied"),
    "os_open_create_outside": ("os.open(OUTSIDE + '/raw.txt', os.O_WRONLY | os.O_CREAT)", "denied"),
    "pathlib_write_outside": ("pathlib.Path(OUTSIDE, 'p.txt').write_text('x')", "denied"),
    "write_dev_null": ("open('/dev/null', 'w').write('x')", "ok"),
    "read_outside": ("open(OUTSIDE + '/readable.txt').read()", "ok"),
    "read_ssh_key": ("open(OUTSIDE + '/.ssh/id_rsa').read()", "denied"),
    "read_dotenv": ("open(OUTSIDE + '/.env').read()", "denied"),
    "read_parent_environ": ("open(f'/proc/{os.getppid()}/environ', 'rb').read()", "denied"),
    "read_own_status": ("open('/proc/self/status').read()", "ok"),
    "symlink_escape": (
        "os.symlink(OUTSIDE + '/readable.txt', SANDBOX + '/link')\nopen(SANDBOX + '/link', 'w')",
        "denied",
    ),
    "remove_inside": ("open(SANDBOX + '/gone', 'w').close()\nos.remove(SANDBOX + '/gone')", "ok"),
    "remove_outside": ("os.remove(OUTSIDE + '/readable.txt')", "denied"),
    "rename_out_of_sandbox": ("os.rename(SANDBOX + '/ok.txt', OUTSIDE + '/moved.txt')", "denied"),
    "mkdir_outside": ("os.mkdir(OUTSIDE + '/d')", "denied"),
    "makedirs_inside": ("os.makedirs(SANDBOX + '/a/b/c', exist_ok=True)\nos.mkdir(SANDBOX + '/bin')", "ok"),
    "chmod_outside": ("os.chmod(OUTSIDE + '/readable.txt', 0o777)", "denied"),
    "rmtree_outside": ("shutil.rmtree(OUTSIDE + '/tree')", "denied"),
    "copy_out_of_sandbox": ("shutil.copyfile(SANDBOX + '/ok.txt', OUTSIDE + '/copy.txt')", "denied"),
    "socket_connect": ("socket.create_connection(('127.0.0.1', 9), timeout=1)", "denied"),
    "socket_create": ("socket.socket()", "denied"),
    "dns_lookup": ("socket.getaddrinfo('example.com', 443)", "denied"),
    "urlopen": ("urllib.request.urlopen('http://127.0.0.1:9', timeout=1)", "denied"),
    "subprocess_denied": ("subprocess.run(['true'])", "denied"),
    "subprocess_shell": ("subprocess.run('echo hi', shell=True)", "denied"),
    "subprocess_allowed": ("subprocess.run(['echo', 'hi'], stdout=subprocess.DEVNULL, check=True)", "ok"),
    "subprocess_from_sandbox": (
        "shutil.copy(shutil.which('echo'), SANDBOX + '/echo')\nos.chmod(SANDBOX + '/echo', 0o755)\n"
        "subprocess.run([SANDBOX + '/echo', 'hi'])",
        "denied",
    ),
    "subprocess_path_into_sandbox": (
        "shutil.copy(shutil.which('echo'), SANDBOX + '/echo2')\nos.rename(SANDBOX + '/echo2', SANDBOX + '/bin/echo')\n"
        "subprocess.run(['echo', 'hi'], env={'PATH': SANDBOX + '/bin'})",
        "denied",
    ),
    "subprocess_relative_to_cwd": ("subprocess.run(['./echo', 'hi'], cwd=SANDBOX)", "denied"),
    "subprocess_symlink_named_allowed": (
        "os.mkdir(SANDBOX + '/lnk')\nos.symlink('/bin/sh', SANDBOX + '/lnk/echo')\n"
        "subprocess.run([SANDBOX + '/lnk/echo', '-c', 'true'])",
        "denied",
    ),
    "os_system": ("os.system('true')", "denied"),
    "os_exec": ("os.execv('/bin/true', ['true'])", "denied"),
    "os_fork": ("os.fork()", "denied"),
    "posix_spawn": ("os.posix_spawn('/bin/true', ['true'], {})", "denied"),
    "kill_parent": ("os.kill(os.getppid(), 0)", "denied"),
    "kill_self_probe": ("os.kill(os.getpid(), 0)", "ok"),
    "dlopen_main_program": ("ctypes.CDLL(None)", "denied"),
    "dlopen_libc": ("ctypes.CDLL('libc.so.6')", "denied"),
    "dlopen_torch_lib": ("ctypes.CDLL(TORCH_LIB)", "ok"),
    "putenv": ("os.environ['LEAK'] = '1'", "denied"),
    "unsetenv": ("os.unsetenv('PATH')", "denied"),
    "settrace": ("sys.settrace(lambda *a: None)", "denied"),
    "setprofile": ("sys.setprofile(lambda *a: None)", "denied"),
    # CPython drops a new hook silently when an existing one refuses it.
    "add_audit_hook_is_dropped": (
        "seen = []\nsys.addaudithook(lambda e, a: seen.append(e))\nsys.audit('tik.probe')\nassert not seen",
        "ok",
    ),
    "gc_get_objects": ("gc.get_objects()", "denied"),
    "raise_rlimit": ("resource.setrlimit(resource.RLIMIT_CORE, (0, 0))", "denied"),
    "swap_code": ("def f(): pass\ndef g(): return 1\nf.__code__ = g.__code__", "denied"),
}

CHILD = r"""
import ctypes, gc, glob, importlib.util, json, os, pathlib, resource, shutil, socket, subprocess, sys
import urllib.request
import torch, triton
from tik_agent.sandbox.guard import install_guard

SANDBOX, OUTSIDE = os.getcwd(), sys.argv[1]
TORCH_LIB = glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10*.so"))[0]
probes = json.loads(sys.argv[2])
install_guard(pathlib.Path(SANDBOX), allow_subprocess=("echo",))

results = {}
for name, code in probes.items():
    try:
        exec(code, {**globals()})
        results[name] = "ok"
    except PermissionError as err:
        results[name] = "denied" if "sandbox:" in str(err) else f"error: {err!r}"
    except BaseException as err:
        results[name] = f"error: {err!r}"


def load(path):
    spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


try:
    legit = sys.argv[3]
    torch.manual_seed(0)
    x, w = torch.randn(9, 100), torch.randn(100)
    y = load(legit + "/rms_norm.py").rms_norm(x, w)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    logits, target = torch.randn(3, 2500), torch.tensor([0, 7, 2499])
    lp = load(legit + "/target_log_prob.py").target_log_prob(logits, target)
    a, b = torch.randn(33, 40), torch.randn(40, 20)
    c = load(legit + "/matmul.py").matmul(a, b)
    close = [torch.allclose(y, ref, atol=1e-5),
             torch.allclose(lp, torch.log_softmax(logits, -1)[torch.arange(3), target], atol=1e-5),
             torch.allclose(c, a @ b, atol=1e-4)]
    results["legit_kernels"] = "ok" if all(close) else f"error: mismatch {close}"
except BaseException as err:
    results["legit_kernels"] = f"error: {err!r}"

with open("results.json", "w") as handle:
    json.dump(results, handle)
"""


@pytest.fixture(scope="module")
def guarded_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    sandbox = tmp_path_factory.mktemp("sandbox")
    outside = tmp_path_factory.mktemp("outside")
    (outside / "readable.txt").write_text("hello")
    (outside / ".ssh").mkdir()
    (outside / ".ssh" / "id_rsa").write_text("not a real key")
    (outside / ".env").write_text("ANTHROPIC_API_KEY=not-real")
    (outside / "tree").mkdir()
    script = sandbox / "child.py"
    script.write_text(CHILD)
    env = scrubbed_environment({"TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}, workdir=sandbox)
    argv = [sys.executable, str(script), str(outside), json.dumps({k: v[0] for k, v in PROBES.items()}), str(LEGIT)]
    # The bare process sandbox: this tests the audit hook alone, not the OS layers
    # (which would hide `outside` and answer before the hook is asked).
    result = run_sandboxed(argv, sandbox, SandboxLimits(wall_seconds=120), env, isolation=PROCESS)
    assert result.returncode == 0, result.stderr
    results = json.loads((sandbox / "results.json").read_text())
    # Nothing the guard denied may have happened anyway.
    assert sorted(p.name for p in outside.iterdir()) == [".env", ".ssh", "readable.txt", "tree"]
    assert (outside / "readable.txt").read_text() == "hello"
    assert "LEAK" not in os.environ
    return results


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe(guarded_results: dict[str, str], name: str) -> None:
    assert guarded_results[name] == PROBES[name][1]


def test_legitimate_kernels_run_under_the_guard(guarded_results: dict[str, str]) -> None:
    assert guarded_results["legit_kernels"] == "ok"


def test_install_guard_rejects_a_missing_directory(tmp_path: Path) -> None:
    from tik_agent.sandbox.guard import install_guard

    with pytest.raises(ValueError, match="not a directory"):
        install_guard(tmp_path / "missing")
