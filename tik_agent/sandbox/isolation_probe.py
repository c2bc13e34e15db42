"""The program a mechanism's probe starts: what a worker does first, not a bare interpreter.

A mechanism whose worker cannot run an evaluation must fail its probe, so that the
next one is chosen with its one-line notice instead of every evaluation crashing.
The probe therefore starts the interpreter the way a worker starts (``-I``, the
package root put first on ``sys.path``) and

* imports the worker's module, as a worker does first (a package installed in a
  folder the worker's user cannot read fails here: a 0700 ``mktemp`` folder under
  unshare with setpriv, where nobody has no mount view of its own);
* finds torch and triton and reads their first files, which catches the same for
  them without importing them (seconds of every process that evaluates);
* where ``/dev/nvidia*`` exist, imports both, starts CUDA and makes one tiny Triton
  launch, compiling into the probe's own cache, and checks what it wrote.
"""

from __future__ import annotations

import json
import sys

SOURCE = '''
import importlib.util
import json
import os
import sys

cfg = json.loads(sys.argv[1])
if cfg["not_root"] and os.geteuid() == 0:
    sys.exit(3)
sys.path.insert(0, cfg["root"])
import tik_agent.sandbox.worker  # noqa: E402,F401  (what a worker imports first)

for name in ("torch", "triton"):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        sys.exit(f"{name} is not importable")
    with open(spec.origin, "rb") as f:
        f.read(1)
    os.listdir(os.path.dirname(spec.origin))

if cfg["cuda"]:
    import torch
    import triton
    import triton.language as tl

    torch.cuda.init()

    @triton.jit
    def one(x_ptr):
        tl.store(x_ptr, 1.0)

    x = torch.zeros(1, device="cuda")
    one[(1,)](x)
    torch.cuda.synchronize()
    if x.item() != 1.0:
        sys.exit("a Triton launch in the probe did not write its output")
'''


def argv(root: str, not_root: bool, cuda: bool) -> list[str]:
    """The probe's command line, run in a folder holding :data:`SOURCE` as ``probe.py``."""
    return [sys.executable, "-I", "probe.py", json.dumps({"root": root, "not_root": not_root, "cuda": cuda})]
