"""The exported package's name and its source tree, rendered from ``template/``.

The generated package imports torch, triton and the standard library only
(and numpy where Triton's interpreter already needs it; it declares all three): it is
installed where tik-agent is not, next to a trainer or an inference server.
:func:`check_imports` enforces that on every rendered file and on the kernels
it carries before anything is built.
"""

from __future__ import annotations

import ast
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from tik_agent import figures, pyparse
from tik_agent.errors import UsageError
from tik_agent.export import certificate as certificates
from tik_agent.export.backward import backward_context
from tik_agent.export.dropin import dropin_context
from tik_agent.export.source import ExportSource

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
TEMPLATE_SUFFIX = ".tmpl"
# Rendered at the project root; every other template becomes a module of the package.
PROJECT_FILES = ("pyproject.toml", "README.md")
KERNEL_FILE, SEED_FILE, CERTIFICATE_FILE, SPEC_FILE = "kernel.py", "_seed_kernel.py", "certificate.json", "spec.toml"
# tik-agent's own modules that the package carries verbatim (they import torch and the
# standard library only): one copy of the layout classes and the regimes, so that the
# wheel draws and classifies exactly as the evaluator did.
VERBATIM = {"_views.py": Path(__file__).resolve().parents[1] / "spec" / "views.py",
            "_regimes.py": Path(__file__).resolve().parents[1] / "spec" / "regimes.py"}
# torch.library.custom_op needs torch 2.4; the kernels are written for Triton 3.
MINIMUM = {"torch": (2, 4), "triton": (3, 0)}
# numpy is declared: on a machine without CUDA the kernel runs only through Triton's
# interpreter, which is numpy code (and so is the ordered dot in _backend); a wheel
# that imports there but cannot run a kernel would be worse than one more small
# dependency, which GPU machines nearly always have already.
NUMPY_REQUIREMENT = "numpy>=1.21"
ALLOWED_IMPORTS = frozenset({"torch", "triton"}) | frozenset(sys.stdlib_module_names)
# numpy is no dependency of torch or triton, but Triton's interpreter runs on
# it: the module that patches the interpreter may use it, nothing else.  The
# serving-engine plugins import their engine, which is never a dependency:
# only the engine calls them, from its own plugin entry point.
NUMPY_MODULE = "_backend.py"
MODULE_IMPORTS = {NUMPY_MODULE: {"numpy"}, "_vllm.py": {"vllm"}, "_sglang.py": {"sglang"}}
# PEP 508 distribution names.
_NAME_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# Import names the package must not shadow.
_RESERVED = frozenset({"torch", "triton", "numpy", "tik_agent"})
_PY_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}
# Environment fields the README shows ("?" where the run did not record one).
ENV_FIELDS = ("device", "device_name", "torch", "triton", "python")


@dataclass(frozen=True)
class Distribution:
    name: str         # canonical distribution name, e.g. "tik-kernel-rmsnorm"
    version: str      # normalised PEP 440 version
    import_name: str  # the package, e.g. "tik_kernel_rmsnorm"; also the torch.library namespace

    @property
    def namespace(self) -> str:
        return self.import_name


def distribution(seed_name: str, commit: str | None, name: str | None = None, version: str | None = None,
                 label: str | None = None) -> Distribution:
    """Validate (or default) the distribution name and version; errors are usage errors.  The
    default version is ``0.1.0+<label>``, by default ``g`` and the commit's first ten digits."""
    given = name if name is not None else f"tik-kernel-{seed_name}"
    if not _NAME_RE.match(given):
        raise UsageError(f"--name: {given!r} is not a valid distribution name (letters, digits, '-', '_' and '.', "
                         "starting and ending with a letter or digit)")
    canonical = canonicalize_name(given)
    import_name = canonical.replace("-", "_")
    if not import_name.isidentifier() or keyword.iskeyword(import_name):
        raise UsageError(f"--name: {given!r} gives the import name {import_name!r}, which is not a Python "
                         "identifier; start the name with a letter")
    if import_name in _RESERVED or import_name in sys.stdlib_module_names:
        raise UsageError(f"--name: the import name {import_name!r} would shadow an existing module; choose another name")
    # "g": a sha of digits only would lose its leading zeros in the normalised version.
    text = version if version is not None else f"0.1.0+{label or 'g' + str(commit)[:10]}"
    try:
        normalised = str(Version(text))
    except InvalidVersion:
        raise UsageError(f"--version: {text!r} is not a valid PEP 440 version (e.g. 1.0.0 or 0.1.0+abc123)") from None
    return Distribution(canonical, normalised, import_name)


def _signature(source: ExportSource) -> dict[str, str]:
    """Parameter lists for the op and the README, from the spec's inputs and kwargs."""
    spec = source.spec
    tensors = [i.name for i in spec.inputs]
    typed = [f"{n}: torch.Tensor" for n in tensors]
    typed += [f"{k}: {_PY_TYPES[type(v)]} = {v!r}" for k, v in spec.kwargs.items()]
    plain = tensors + [f"{k}={v!r}" for k, v in spec.kwargs.items()]
    call = tensors + [f"{k}={k}" for k in spec.kwargs]
    outputs = [o.name for o in spec.outputs]
    returns = "torch.Tensor" if len(outputs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(outputs))}]"
    kwargs_dict = "{" + ", ".join(f"{k!r}: {k}" for k in spec.kwargs) + "}"
    return {"typed_params": ", ".join(typed), "signature": ", ".join(plain), "call_args": ", ".join(call),
            "tensor_args": ", ".join(tensors), "returns": returns, "kwargs_dict": kwargs_dict,
            "results": "out" if len(outputs) == 1 else ", ".join(outputs)}


def _cells(timing: list[dict]) -> list[dict]:
    rows = []
    for c in timing:
        seed_ms, kernel_ms = c["seed"]["median_ms"], c["candidate"]["median_ms"]
        rows.append({"name": c["name"], "shape": c["shape"], "weight": f"{c['weight']:g}",
                     "seed_ms": f"{seed_ms:.4g}", "kernel_ms": f"{kernel_ms:.4g}",
                     "speedup": figures.speedup(seed_ms / kernel_ms, c.get("noise"), 2)})
    return rows


def requirements(environment: dict) -> tuple[str, ...]:
    """Ranges that accept the torch and triton a user already has, so that pip never swaps
    them: from the minimum the package needs to below the next major version of the
    certified one.  The exact certified versions are in the certificate's environment,
    and the package warns at import and in verify() when the running ones differ."""
    out = []
    for name, (major, minor) in MINIMUM.items():
        certified = Version(str(environment.get(name) or f"{major}.{minor}")).release
        out.append(f"{name}>={major}.{minor},<{max(certified[0], major) + 1}")
    return (*out, NUMPY_REQUIREMENT)


def template_context(source: ExportSource, dist: Distribution, certificate: dict) -> dict:
    speedup, noise = certificate["speedups"]["vs_seed"], certificate["speedups"].get("noise")
    parity = certificate["parity"]
    return {
        **_signature(source),
        **backward_context(source.spec),
        **dropin_context(source.spec),
        "dist_name": dist.name, "version": dist.version, "import_name": dist.import_name,
        "namespace": dist.namespace, "requirements": requirements(certificate["environment"]),
        "entry": source.spec.entry, "seed_name": source.spec.name, "layout": source.spec.layout,
        "seed_description": source.spec.description or "(no description)",
        "description": source.spec.description or f"The {source.spec.name} kernel.",
        "summary": f"Batch-invariant Triton kernel {source.spec.entry} ({source.spec.name}), "
                   f"bit-identical to its seed, exported by tik-agent",
        "provenance": source.provenance, "audit_key": source.audit_key or "-",
        "run_id": source.run_id or "-", "commit": source.commit or "-", "attempt_id": source.attempt_id or "-",
        "parent_commit": source.parent_commit or "-",
        "seed_sha256": certificate["seed"]["sha256"], "kernel_sha256": certificate["kernel"]["sha256"],
        "cases_passed": parity["cases_passed"], "cases_total": parity["cases_total"], "outcome": parity["outcome"],
        "speedup_text": f"{figures.speedup(speedup, noise, 2)} as fast as" if speedup else "as fast as (not timed)",
        "speedup_cell": f"{figures.speedup(speedup, noise)} (workload-weighted)" if speedup else "not measured",
        "env": {k: certificate["environment"].get(k) or "?" for k in ENV_FIELDS},
        "domain_text": certificate["domain"]["text"],
        "cells": _cells(certificate["speedups"]["cells"]),
        "created_at": certificate["created_at"], "tik_agent_version": certificate["tik_agent_version"],
    }


def render_project(root: Path, source: ExportSource, dist: Distribution, certificate: dict) -> Path:
    """Write the project tree (pyproject, README, package) under ``root``; return the package dir."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    context = template_context(source, dist, certificate)
    package = root / dist.import_name
    package.mkdir(parents=True)
    for template in sorted(TEMPLATE_DIR.glob(f"*{TEMPLATE_SUFFIX}")):
        name = template.name[: -len(TEMPLATE_SUFFIX)]
        target = root / name if name in PROJECT_FILES else package / name
        target.write_text(env.get_template(template.name).render(context))
    # Byte for byte what the run holds: the certificate's hashes are of these bytes.
    (package / KERNEL_FILE).write_bytes(source.kernel_source)
    (package / SEED_FILE).write_bytes(source.seed_source)
    (package / SPEC_FILE).write_bytes(source.spec_source)
    (package / CERTIFICATE_FILE).write_text(certificates.dumps(certificate))
    for name, source_file in VERBATIM.items():
        (package / name).write_bytes(source_file.read_bytes())
    check_imports(package)
    return package


def check_imports(package: Path) -> None:
    """Refuse a package whose modules import anything beyond torch, triton and the standard library."""
    for path in sorted(package.glob("*.py")):
        allowed = ALLOWED_IMPORTS | MODULE_IMPORTS.get(path.name, set())
        tree = pyparse.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in allowed:
                    raise UsageError(f"{path.name}:{node.lineno}: imports {name!r}; an exported package may import "
                                     "only torch, triton and the standard library")
