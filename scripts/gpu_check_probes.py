"""The GPU check's bit probes (``scripts/gpu_check_steps.py probes``): for each seed, each
tunable value against the seed's own value, on the device the check runs on.

Rows layout: the same bits as the seed's value at the largest probe batch, each batch of
:data:`PROBE_M` alone equal to the first rows of the largest, and an odd-stride row view
equal to the contiguous rows.  Sequences layout (attention): the same bits on a full
launch of up to :data:`SEQUENCES_MAX` sequences, and every launch an invariance case makes
(each sequence alone, in other company, decoded token by token, chunked) agreeing on each
token and cache slot it shares (:func:`tik_agent.judge.sequence_checks.judge_probes`).
Its inputs are contiguous caches only (the domain refuses views), so it has no odd-stride
check: :func:`tik_agent.spec.tunables.probe_checks` names the checks of each layout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from tik_agent.backends.compile_rehearsal import EXTRA_PROBES, PROBE_M, SEQUENCES_MAX, sequence_probe_inputs
from tik_agent.backends.replay_runs import cache_variants

PROBE_M_SMALL = (1, 7)  # the rehearsal: every code path, on the interpreter's budget
INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _device() -> str:
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def _summary(out: Path, text: str) -> None:
    with (out / "summary.md").open("a") as f:
        f.write(text.rstrip() + "\n\n")


def cmd_probes(args) -> int:
    """For every tunable value: the same bits as the seed's own value, each M alone equal to the
    first M rows of the largest batch, and an odd-stride row view equal to the contiguous rows."""
    import tempfile

    import torch

    from tik_agent.spec.schema import load_spec

    device = _device()
    ms = PROBE_M_SMALL if args.small else PROBE_M
    # On a node the probes compile into their part of the warm cache itself (TRITON_CACHE_DIR):
    # the variants they add are those the warm step's keys missed on this node's real driver.
    cache = os.environ.get("TRITON_CACHE_DIR") if device == "cuda" else None
    cached_before = cache_variants(Path(cache)) if cache and Path(cache).is_dir() else None
    # Outside OUT: a probe step killed by its limit must leave no folder among the results.
    work = Path(tempfile.mkdtemp(prefix="probe-src-"))
    report = {"device": device, "M": list(ms), "seeds": {}}
    lines = ["## bit probes", f"M in {list(ms)} and an odd-stride row view; each value against the seed's own "
             f"value at the largest M. Columns: same bits as default / batch invariant / odd stride equal. "
             f"The sequences layout (attention): a full launch of up to {SEQUENCES_MAX} sequences and every launch "
             f"its invariance cases make; '-': no odd-stride check (it takes whole caches only).", ""]
    for seed_dir in sorted(Path(args.dir).iterdir()):
        spec = load_spec(seed_dir)
        cell = max(spec.workload_for(device), key=lambda c: c.m)
        dims = dict(cell.dims)
        dtypes = ["float32"] if args.small else list(dict.fromkeys(["float32", cell.dtype]))
        source = spec.source.read_text()
        base = _entry(spec.source, spec)
        sequences = spec.layout == "sequences"
        prepare, probe = (_sequence_inputs, _probe_sequences) if sequences else (_row_inputs, _probe_rows)
        seed_report = {"dims": dims, "dtypes": dtypes, "tunables": {}}
        if sequences:
            seed_report["sequences"] = min(max(ms), SEQUENCES_MAX)
        probed = {**spec.tunables, **EXTRA_PROBES.get(spec.name, {})}
        report["seeds"][spec.name] = seed_report
        # Once a dtype: every value runs on them, against the seed's own value.
        inputs = {dtype: prepare(spec, dims, dtype, ms, device) for dtype in (dtypes if probed else ())}
        expect = {dtype: probe(spec, base, given, ms)[0] for dtype, given in inputs.items()}
        for name, values in probed.items():
            for value in (values[:2] if args.small else values):
                fn = _entry(_variant(source, name, value, work / f"{spec.name}_{name}_{value}.py"), spec)
                entry = {}
                for dtype, given in inputs.items():
                    full, checks = probe(spec, fn, given, ms)
                    entry[dtype] = {"same_bits_as_default": _same(full, expect[dtype]), **checks}
                seed_report["tunables"].setdefault(name, {})[str(value)] = entry
                # Rewritten as each value finishes, whole (every dtype): a step that runs out of
                # time keeps what it probed, and no value reads as safe on half its dtypes.
                _write_atomic(Path(args.out) / "probes.json", json.dumps(report, indent=2))
        _write_atomic(Path(args.out) / "probes.json", json.dumps(report, indent=2))
        for name, values in seed_report["tunables"].items():
            row = ", ".join(f"{v}: " + " ".join("".join({True: "y", False: "n"}.get(r.get(k), "-") for k in
                            ("same_bits_as_default", "batch_invariant", "odd_stride_equal")) for r in per.values())
                            for v, per in values.items())
            lines.append(f"- {spec.name} {name} ({'/'.join(dtypes)}): {row}")
        if device == "cuda":
            torch.cuda.empty_cache()
    shutil.rmtree(work, ignore_errors=True)
    if cached_before is not None:
        added = cache_variants(Path(cache)) - cached_before
        report["warm_cache"] = {"variants_before": cached_before, "added": added}
        lines.append(f"\nThe warm Triton cache held {cached_before} variants; the probes compiled {added} more "
                     f"(variants the warm step did not replay, or keys that did not match this node's driver).")
    _write_atomic(Path(args.out) / "probes.json", json.dumps(report, indent=2))
    _summary(Path(args.out), "\n".join(lines))
    return 0


def _row_inputs(spec, dims: dict, dtype: str, ms, device: str) -> list:
    from tik_agent.spec.cases import Case, make_inputs

    return make_inputs(spec, Case(max(ms), dims, dtype, "normal", 0), device)


def _probe_rows(spec, fn, inputs: list, ms) -> tuple[object, dict]:
    full = fn(*inputs, **spec.kwargs)
    alone = all(_same(_batched_part(spec, fn(*[_rows(t, spec, i, m) for i, t in enumerate(inputs)], **spec.kwargs)),
                      tuple(t[:m] for t in _batched_part(spec, full))) for m in ms)
    odd = [(_odd_stride(t) if _batched_2d(spec, i, t) else t) for i, t in enumerate(inputs)]
    return full, {"batch_invariant": alone, "odd_stride_equal": _same(fn(*odd, **spec.kwargs), full)}


def _sequence_inputs(spec, dims: dict, dtype: str, ms, device: str) -> tuple:
    """The case, then the inputs of its full launch and of each launch its invariance cases make
    (the compile-only replay of this step builds the same ones)."""
    return sequence_probe_inputs(spec, dims, dtype, device)


def _probe_sequences(spec, fn, inputs: tuple, ms) -> tuple[object, dict]:
    from types import SimpleNamespace

    from tik_agent.judge.bitcheck import CaseFailure
    from tik_agent.judge.sequence_checks import judge_probes

    case, full_inputs, launches = inputs
    full = fn(*full_inputs, **spec.kwargs)
    probes = {label: fn(*args, **spec.kwargs) for label, args in launches.items()}
    try:
        judge_probes(spec, case, SimpleNamespace(full=full, probes=probes))
    except CaseFailure:
        return full, {"batch_invariant": False}
    return full, {"batch_invariant": True}


def _write_atomic(path: Path, text: str) -> None:
    """Written beside, then renamed over: a kill mid-write leaves the previous whole file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)

def _bits(t):
    import torch

    return t.contiguous().view(getattr(torch, INT_VIEW[t.element_size()])) if t.is_floating_point() else t

def _same(a, b) -> bool:
    """Raw-bit equality of one output, or of every output of a tuple (a training step's grads too)."""
    import torch

    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))

def _variant(source: str, name: str, value, where: Path) -> Path:
    pattern = re.compile(rf"^{name}\s*=\s*.+$", re.M)
    if not pattern.search(source):
        raise SystemExit(f"probe: {name} is not a module-level constant of the kernel")
    where.write_text(pattern.sub(f"{name} = {value!r}", source, count=1))
    return where

def _entry(path: Path, spec):
    """The kernel file's judged call: the entry, or with a backward entry the training step
    (forward then backward, on the inputs followed by the upstream gradients)."""
    from tik_agent.sandbox.harness import load_entry

    return load_entry(path, spec, f"probe_{path.stem}")

def _batched_part(spec, out):
    """The per-row outputs (what batch invariance is about; a dweight is judged by its bits alone)."""
    from tik_agent.spec.backward import is_batched

    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(t for o, t in zip(spec.checked_outputs, outs) if is_batched(o))

def _odd_stride(t):
    """The same values in a row view whose row stride is odd (one padding column)."""
    import torch

    padded = torch.empty(t.shape[0], t.shape[1] + 1, dtype=t.dtype, device=t.device)
    padded[:, : t.shape[1]] = t
    return padded[:, : t.shape[1]]

def _rows(t, spec, i, m):
    return t[:m].contiguous() if spec.checked_inputs[i].batched else t

def _batched_2d(spec, i, t) -> bool:
    return spec.checked_inputs[i].batched and t.dim() == 2 and t.is_floating_point()
