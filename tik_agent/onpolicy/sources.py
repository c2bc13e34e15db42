"""Where the decoder's kernels come from, and what (if anything) certifies each one.

A kind's kernel is, in this order: a ``--kernel KIND=FILE``, the kernel an
exported ``--wheel`` carries, the best kernel of a ``--run``, or the bundled
seed.  Its certification is looked up by the file's sha256, never by where it
came from:

* ``bundled``: the bytes of the bundled seed (the contract itself; its full
  grid is ``check-seed``'s);
* ``certificate``: the kernel hash in a given wheel's parity certificate;
* ``run``: the kernel of an accepted commit of a given run;
* nothing: uncertified (a file nobody evaluated, or one edited since).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError
from tik_agent.onpolicy.kernels import KINDS


@dataclass(frozen=True)
class Certification:
    """What vouches for a kernel file's bits: ``basis`` is bundled, certificate or run."""

    basis: str
    text: str     # one line a person reads, e.g. "run r1, commit 1a2b3c4d5e (a0003)"

    def to_dict(self) -> dict:
        return {"basis": self.basis, "text": self.text}


@dataclass(frozen=True)
class KernelSource:
    """One kind's kernel file, where it came from, and its certification (None: uncertified)."""

    kind: str
    path: Path
    origin: str                        # "bundled seed", "--kernel FILE", "--wheel W", "--run R"
    sha256: str
    certified_by: Certification | None

    @property
    def certified(self) -> bool:
        return self.certified_by is not None

    @property
    def bundled(self) -> bool:
        return self.certified_by is not None and self.certified_by.basis == "bundled"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "origin": self.origin, "path": str(self.path), "sha256": self.sha256,
                "certified_by": self.certified_by.to_dict() if self.certified_by else None}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def parse_kernel_option(text: str) -> tuple[str, Path]:
    kind, sep, path = text.partition("=")
    if not sep or kind not in KINDS:
        raise UsageError(f"--kernel: expected KIND=FILE with KIND one of {list(KINDS)}, got {text!r}")
    return kind, Path(path)


def resolve(kernel_options: list[str], runs: list[Path], wheels: list[Path], workdir: Path) -> dict[str, KernelSource]:
    """Every kind's kernel (see the module's order) with its certification."""
    from tik_agent.spec.seeds import BUNDLED_DIR
    from tik_agent.spec.schema import load_spec

    vouched: dict[str, Certification] = {}
    chosen: dict[str, tuple[Path, str]] = {}
    for n, r in enumerate(runs):
        kind, path, hashes = _from_run(r, workdir / f"run{n}")
        vouched.update(hashes)
        _choose(chosen, kind, path, f"--run {r}", "--run")
    for n, w in enumerate(wheels):
        kind, path, certificate = _from_wheel(w, workdir / f"wheel{n}")
        vouched.update(certificate)
        _choose(chosen, kind, path, f"--wheel {w}", "--wheel")
    explicit: dict[str, tuple[Path, str]] = {}
    for option in kernel_options:
        kind, path = parse_kernel_option(option)
        if not path.is_file():
            raise UsageError(f"--kernel {kind}={path}: no such file")
        _choose(explicit, kind, path, f"--kernel {path}", "--kernel")
    chosen.update(explicit)  # an explicit file wins; a run or a wheel of its kind may still certify it
    out = {}
    for kind in KINDS:
        spec = load_spec(BUNDLED_DIR / kind)
        seed_sha = sha256_of(spec.source)
        path, origin = chosen.get(kind, (spec.source, "bundled seed"))
        digest = sha256_of(path)
        if digest == seed_sha:
            basis = Certification("bundled", "bundled seed (the contract; check-seed runs its full grid)")
        else:
            basis = vouched.get(digest)
        out[kind] = KernelSource(kind, Path(path), origin, digest, basis)
    return out


def _choose(chosen: dict, kind: str, path: Path, origin: str, option: str) -> None:
    if kind in chosen and chosen[kind][1].startswith(option):
        raise UsageError(f"{origin}: {chosen[kind][1]} already gives the {kind} kernel; give one per kind")
    chosen[kind] = (path, origin)


def _from_run(run_dir: Path, workdir: Path) -> tuple[str, Path, dict[str, Certification]]:
    """(kind, its best kernel's file, sha256 -> certification of every accepted commit's kernel)."""
    from tik_agent.export.source import read_source
    from tik_agent.run.lineage import KERNEL_FILE, open_run

    workdir.mkdir(parents=True, exist_ok=True)
    source = read_source(run_dir, None, workdir)
    kind = _kind(source.spec.name, f"--run {run_dir}")
    path = workdir / f"run-{kind}.py"
    path.write_bytes(source.kernel_source)
    lineage = open_run(run_dir)
    hashes = {}
    for k in lineage.accepted():
        data = lineage.file_at(k.commit, KERNEL_FILE).encode()
        hashes[hashlib.sha256(data).hexdigest()] = Certification(
            "run", f"run {lineage.run_id}, commit {k.commit[:10]} ({k.attempt_id})")
    return kind, path, hashes


def _from_wheel(wheel: Path, workdir: Path) -> tuple[str, Path, dict[str, Certification]]:
    """(kind, the wheel's ``kernel.py``, its certificate's kernel hash -> certification)."""
    if not wheel.is_file():
        raise UsageError(f"--wheel {wheel}: no such file")
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            spec_name = next((n for n in names if n.count("/") == 1 and n.endswith("/spec.toml")), None)
            if spec_name is None:
                raise UsageError(f"--wheel {wheel}: not a tik-agent export (no package spec.toml)")
            package = spec_name.split("/")[0]
            seed = tomllib.loads(zf.read(spec_name).decode()).get("kernel", {}).get("name", "")
            kernel = zf.read(f"{package}/kernel.py")
            certificate = json.loads(zf.read(f"{package}/certificate.json")) \
                if f"{package}/certificate.json" in names else {}
    except (zipfile.BadZipFile, KeyError, tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--wheel {wheel}: cannot read the package: {exc}") from None
    kind = _kind(seed, f"--wheel {wheel}")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"wheel-{kind}.py"
    path.write_bytes(kernel)
    vouched = {}
    certified_sha = (certificate.get("kernel") or {}).get("sha256") if isinstance(certificate, dict) else None
    if isinstance(certified_sha, str):
        run = certificate.get("run") or {}
        origin = (f"the seed {seed} itself, by its own audit" if certificate.get("provenance") == "seed"
                  else f"run {run.get('run_id', '?')}, commit {str(run.get('commit', '?'))[:10]}")
        vouched[certified_sha] = Certification("certificate", f"certificate of {wheel.name} ({origin})")
    return kind, path, vouched


def _kind(seed: str, where: str) -> str:
    if seed not in KINDS:
        raise UsageError(f"{where}: its seed {seed!r} is none of the decoder's kernels {list(KINDS)}")
    return seed
