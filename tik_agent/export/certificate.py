"""The parity certificate an exported wheel carries (``certificate.json``).

It says what was checked, where, and with what result: the seed's and the
kernel's sha256, every parity case with its outcome (and the fields that
regenerate its inputs, so that the wheel's ``verify()`` can repeat it without
tik-agent), the device and versions, the speedups measured, and where the
kernel came from: ``provenance`` is ``run`` (with the run and commit) or
``seed`` (the seed itself, certified by its own audit: ``run`` is null and
``audit`` names the seed-audit cache key).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from tik_agent import __version__
from tik_agent.spec.domain_text import describe
from tik_agent.spec.cases import Case
from tik_agent.spec.grid import evaluation_cases
from tik_agent.export.source import ExportSource

log = logging.getLogger(__name__)

CERTIFICATE_SCHEMA = 1
CERTIFICATE_KIND = "tik-agent parity certificate"
AGENT_TRAILERS = {"Agent": "agent", "Model": "model", "Tokens-Input": "tokens_input", "Tokens-Output": "tokens_output"}


def certified_cases(source: ExportSource) -> list[dict]:
    """The evaluated cases, each with the fields that regenerate its inputs and its outcome."""
    # The run evaluated the grid of its device.
    device = source.evaluation.get("environment", {}).get("device", "cpu")
    grid = {c.id: c for c in evaluation_cases(source.spec, device)}
    out = []
    for result in source.evaluation["cases"]:
        case = grid.get(result["case"])
        if case is None and isinstance(result.get("params"), dict):  # drawn for that evaluation
            case = Case.from_dict(result["params"])
        if case is None:
            # A case this version of tik-agent cannot rebuild: certified, but verify() cannot repeat it.
            log.warning("case %s is not in the spec's evaluation grid; verify() will not repeat it", result["case"])
            continue
        out.append({"id": case.id, **case.to_dict(), "outcome": "passed" if result["passed"] else "failed",
                    "checks": list(result.get("checks", []))})
    return out


def _check_counts(cases: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in cases:
        for check in c["checks"]:
            counts[check] = counts.get(check, 0) + 1
    return counts


def build_certificate(source: ExportSource, distribution: dict, created_at: datetime | None = None) -> dict:
    """The certificate of ``source``.  Its ``created_at`` is, unless given, the exported
    commit's time rather than the export's: the certificate is a function of the
    commit, and two exports of one commit (same name and version) are the same bytes."""
    if created_at is None and source.committed_at is not None:
        created_at = datetime.fromtimestamp(source.committed_at, timezone.utc)
    ev = source.evaluation
    spec = source.spec
    device = ev.get("environment", {}).get("device", "cpu")
    cases = certified_cases(source)
    recorded = ev["cases"]
    agent = {key: source.trailers[t] for t, key in AGENT_TRAILERS.items() if t in source.trailers}
    return {
        "schema": CERTIFICATE_SCHEMA,
        "kind": CERTIFICATE_KIND,
        "created_at": (created_at or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        "tik_agent_version": __version__,
        "distribution": distribution,
        "seed": {"name": spec.name, "description": spec.description, "entry": spec.entry,
                 "signature": spec.signature_text(), "file": "_seed_kernel.py", "sha256": source.seed_sha256},
        "kernel": {"file": "kernel.py", "sha256": source.kernel_sha256, "attempt_id": source.attempt_id,
                   "parent_commit": source.parent_commit},
        "provenance": source.provenance,
        "run": None if source.provenance == "seed" else {
            "run_id": source.run_id, "commit": source.commit, "root_commit": source.root_commit,
            "ancestry": list(source.ancestry)},
        "audit": {"key": source.audit_key} if source.provenance == "seed" else None,
        # The exporting machine's interpreter path says nothing about the kernel.
        "environment": {k: v for k, v in ev.get("environment", {}).items() if k != "executable"},
        "parity": {"outcome": ev["outcome"], "cases_passed": sum(1 for c in recorded if c.get("passed")),
                   "cases_total": len(recorded), "repeatable_cases": len(cases), "checks": _check_counts(cases)},
        "speedups": {"vs_seed": ev.get("speedup"), "vs_parent": ev.get("speedup_vs_parent"),
                     "noise": ev.get("noise"), "timer": ev.get("timer"), "cells": list(ev.get("timing", []))},
        "agent": agent,
        "domain": {**spec.domain.to_dict(), "text": describe(spec.domain, spec.inputs, spec.layout, device),
                   "judged_up_to": _judged_up_to(spec, device)},
        "cases": cases,
    }


def _judged_up_to(spec, device: str) -> dict:
    """The largest size of each dimension that an evaluation on ``device`` judges, where it is
    below the range's end (a CPU evaluation cannot afford the largest: the spec's ``cpu``)."""
    return {name: span.judged_high(device) for name, span in spec.domain.dims.items()
            if not span.values and span.judged_high(device) < span.high}


def dumps(certificate: dict) -> str:
    return json.dumps(certificate, indent=2) + "\n"
