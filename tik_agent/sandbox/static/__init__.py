"""Static AST rules over an untrusted candidate kernel file.

A candidate is a small Python module: imports of torch and triton, module-level
constants, one or more ``@triton.jit`` kernels and a launcher that allocates outputs
and launches a kernel.  Anything beyond that has no business in a kernel file, so the
rules are allowlists: of modules and APIs, of builtins, of the attributes host code
may read from a value (by the value's inferred type), of the DSL members kernel code
may read, and of what may be bound to a name (never a module or namespace).

These rules are one wall of several (the worker runs under OS isolation, an audit
hook and a torch dispatch mode that catches host compute at run time), so they aim to
be strict and readable rather than clever.  Every rule states its reason in a
``Rationale:`` comment next to it.

The package: :mod:`.policy` (the tables), :mod:`.context` (aliases, kernels, scopes),
:mod:`.infer` (what each host value can be), the rule groups :mod:`.rules_api`,
:mod:`.rules_state` and :mod:`.rules_host`, and :func:`check_source` here.

Usage::

    violations = check_source(path.read_text(), filename=str(path))
    if violations: ...  # reject the candidate; each Violation names rule and line
"""

from __future__ import annotations

import logging

from tik_agent import pyparse
from tik_agent.plaintext import plain
from tik_agent.sandbox.static import rules_api, rules_flow, rules_host, rules_state  # noqa: F401  (they register the rules)
from tik_agent.sandbox.static.context import build_context
from tik_agent.sandbox.static.infer import infer
from tik_agent.sandbox.static.registry import RULES, Rule, Violation

logger = logging.getLogger(__name__)

__all__ = ["RULES", "Rule", "Violation", "check_source"]


def check_source(source: str, filename: str = "candidate.py",
                 entry: str | tuple[str, ...] | None = None) -> list[Violation]:
    """Run every rule over ``source``; an empty list means the candidate passed.

    ``entry`` names the launcher the harness calls (the spec's entry), or the
    launchers (the forward's and the backward's): their parameters are the only
    ones typed as "whatever the caller passes"; without it every module-level
    function is treated so, which is stricter.

    A file that does not parse yields exactly one violation with rule ``syntax``.
    Violations are sorted by line, then rule name, without duplicates.  Their messages
    quote the candidate (a format field, a default, a target) and are made plain
    (:func:`tik_agent.plaintext.plain`): they reach verdicts, prompts and terminals.
    """
    return [Violation(v.rule, v.line, plain(v.message)) for v in _violations(source, filename, entry)]


def _violations(source: str, filename: str, entry: str | tuple[str, ...] | None) -> list[Violation]:
    try:
        tree = pyparse.parse(source, filename=filename)
    except SyntaxError as err:
        return [Violation("syntax", err.lineno or 0, f"{filename}: {err.msg}")]
    except ValueError as err:  # e.g. null bytes in the source
        return [Violation("syntax", 0, f"{filename}: {err}")]
    except (RecursionError, MemoryError):  # how the parser reports nesting too deep
        return [Violation("syntax", 0, f"{filename}: nesting too deep to analyse")]
    try:
        ctx = build_context(tree, entry)
        infer(ctx)
        found = {violation for rule in RULES.values() for violation in rule.check(ctx)}
    except RecursionError:
        return [Violation("syntax", 0, f"{filename}: nesting too deep to analyse")]
    violations = sorted(found, key=lambda v: (v.line, v.rule, v.message))
    if violations:
        logger.debug("%s: %d static violation(s)", filename, len(violations))
    return violations
