"""The wheels' drop-in switches for the chosen kernel files, in this process.

A model this project did not write (a transformers model) reaches the kernels
only the way a user's model does: through the exported package's drop-in,
``with pkg.enabled():``, which routes ``aten::mm``/``addmm``, ``aten::rms_norm``,
``F.scaled_dot_product_attention`` and the ``log_softmax(...).gather(...)``
idiom to the kernels.  So each chosen kernel file is rendered into the
package that ``tik-agent export`` would build around it (the same templates),
under a name of its own (``tik_onpolicy_<kind>_<sha>``, so that it never meets
an installed ``tik_kernel_*`` package's torch ops), and imported here.

These packages are a vehicle for routing and never leave a temporary
directory.  Their certificate lists the seed's evaluation cases on this
device as *not run*: it says which device and dtypes the drop-in accepts,
nothing more.  What certifies a kernel's bits is the on-policy check's own
kernel table (:mod:`.sources`, by sha256).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tik_agent.onpolicy.kernels import KINDS

ROUTING_RUN = "onpolicy-routing"
NOT_RUN = ("not evaluated: a routing package of tik-agent onpolicy; the kernel's certification is the "
           "on-policy check's kernel table")


@dataclass(frozen=True)
class DropIns:
    """One imported package per kind; ``enabled()`` switches them all on for a block."""

    packages: dict  # kind -> module

    @contextlib.contextmanager
    def enabled(self):
        with contextlib.ExitStack() as stack:
            for kind in KINDS:
                stack.enter_context(self.packages[kind].enabled())
            yield

    @property
    def namespaces(self) -> dict[str, str]:
        """kind -> the torch.library namespace of its ops (``torch.ops.<namespace>``)."""
        return {kind: module.__name__ for kind, module in self.packages.items()}


def load(files: dict[str, Path], workdir: Path) -> DropIns:
    """The drop-in package of each kind's kernel file (``files[kind]``), rendered under ``workdir``."""
    from tik_agent.onpolicy.sources import sha256_of

    packages = {}
    for kind in KINDS:
        name = f"tik_onpolicy_{kind}_{sha256_of(files[kind])[:12]}"
        packages[kind] = sys.modules.get(name) or _import(_render(kind, Path(files[kind]), name, workdir), name)
    return DropIns(packages)


def _render(kind: str, kernel: Path, name: str, workdir: Path) -> Path:
    """Render the package of ``kernel`` (a file for the bundled seed ``kind``); return its directory."""
    from tik_agent.backends import device as devices
    from tik_agent.export.builder import _distribution_record
    from tik_agent.export.certificate import build_certificate
    from tik_agent.export.project import distribution, render_project
    from tik_agent.export.source import ExportSource
    from tik_agent.spec.grid import evaluation_cases
    from tik_agent.spec.schema import load_spec
    from tik_agent.spec.seeds import BUNDLED_DIR

    seed = BUNDLED_DIR / kind
    spec = load_spec(seed)
    evaluation = {"outcome": NOT_RUN, "environment": devices.environment("cpu"),
                  "cases": [{"case": c.id, "passed": False, "checks": []} for c in evaluation_cases(spec, "cpu")]}
    source = ExportSource(run_id=ROUTING_RUN, commit="0" * 40, root_commit="0" * 40, attempt_id=None,
                          parent_commit=None, spec=spec, spec_source=(seed / "spec.toml").read_bytes(),
                          seed_source=spec.source.read_bytes(), kernel_source=kernel.read_bytes(),
                          evaluation=evaluation, trailers={}, ancestry=())
    dist = distribution(kind, source.commit, name=name.replace("_", "-"))
    certificate = build_certificate(source, _distribution_record(dist, spec.entry))
    for case in certificate["cases"]:
        case["outcome"] = "not run"
    root = workdir / name
    return render_project(root, source, dist, certificate)


def _import(package: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
