"""Which tunables keep bits on which device, and what bit probes found.

A spec's ``[tunables]`` entry is either a list of values (bit-safe on every
device: it only maps programs to data, like ``GROUP_M``, or pipelines loads,
like ``num_stages``) or an inline table naming where it is known to be safe::

    NUM_WARPS = { values = [1, 2, 4, 8, 16], safe_on = ["cpu"] }

On a GPU, ``num_warps``, the vector width of loads and block shapes decide the
thread layout and with it the tree of a ``tl.sum`` (and the MMA instruction of a
``tl.dot``); the interpreter ignores all of that.  Elsewhere than ``safe_on`` a
value is *unproven*: agents may try it, the evaluator's parity check decides,
and a bit probe on that device (``scripts/gpu-check.sh`` writes ``probes.json``)
turns it into safe or drops it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from tik_agent.errors import SpecError, UsageError

DEVICES = ("cpu", "cuda")
PROBE_CHECKS = ("same_bits_as_default", "batch_invariant", "odd_stride_equal")


def probe_checks(layout: str) -> tuple[str, ...]:
    """The checks a probe of ``layout`` makes: the sequences layout takes contiguous caches
    only (its domain refuses views), so it has no odd-stride check."""
    return PROBE_CHECKS[:2] if layout == "sequences" else PROBE_CHECKS


def parse_entry(path: Path, where: str, value: Any) -> tuple[list, tuple[str, ...] | None]:
    """(values, safe_on) of one ``[tunables]`` entry; safe_on None means every device."""
    if isinstance(value, list):
        return value, None
    if not isinstance(value, dict):
        raise SpecError(f"{path}: {where}: expected a list of values or {{ values = [...], safe_on = [...] }} "
                        f"(got {value!r})")
    unknown = set(value) - {"values", "safe_on"}
    if unknown:
        raise SpecError(f"{path}: {where}: unknown key {sorted(unknown)[0]!r} (expected values, safe_on)")
    safe_on = value.get("safe_on", [])
    if not isinstance(safe_on, list) or any(d not in DEVICES for d in safe_on):
        raise SpecError(f"{path}: {where}.safe_on: expected a list of devices from {list(DEVICES)} (got {safe_on!r})")
    return value.get("values"), tuple(safe_on)


def load_probes(path: Path, device: str) -> dict:
    """A probes.json from the GPU check, refused when it was probed on another device kind."""
    try:
        probes = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8 text
        raise UsageError(f"{path}: not a readable probes file: {exc}") from None
    if not isinstance(probes, dict) or "seeds" not in probes:
        raise UsageError(f"{path}: not a probes file (no 'seeds' table)")
    if probes.get("device") != device:
        raise UsageError(f"{path}: probed on {probes.get('device')!r}, not on {device!r}: bits hold per device")
    return probes


def _probed_safe(record: Mapping, checks: tuple[str, ...] = PROBE_CHECKS) -> bool:
    """Every dtype probed passed each of ``checks`` (the default's bits, batch invariance and,
    in the rows layout, odd-stride equality)."""
    return bool(record) and all(all(r.get(k) is True for k in checks) for r in record.values())


def split_for_device(spec, device: str, probes: Mapping | None = None) -> tuple[dict, dict]:
    """(safe, unproven): the values known to keep bits on ``device``, and the others still worth
    trying there.  A value that a probe on this device saw change bits is in neither."""
    safe_on = getattr(spec, "tunables_safe_on", {})
    probed = ((probes or {}).get("seeds", {}).get(spec.name, {}) or {}).get("tunables", {})
    safe, unproven = {}, {}
    for name, values in spec.tunables.items():
        declared = safe_on.get(name)
        if declared is None or device in declared:
            safe[name] = tuple(values)
            continue
        results = probed.get(name, {})
        for v in values:
            record = results.get(str(v))
            if record is None:
                unproven.setdefault(name, []).append(v)
            elif _probed_safe(record, probe_checks(getattr(spec, "layout", "rows"))):
                safe.setdefault(name, []).append(v)
    return ({k: tuple(v) for k, v in safe.items()}, {k: tuple(v) for k, v in unproven.items()})
