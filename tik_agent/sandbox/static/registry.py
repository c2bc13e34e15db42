"""The rule registry: what a rule is, what it reports, and where rules are listed."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tik_agent.sandbox.static.context import Context


@dataclass(frozen=True)
class Violation:
    """One broken rule: its name, the 1-based source line and a human message."""

    rule: str
    line: int
    message: str


Check = Callable[["Context"], Iterator[Violation]]


@dataclass(frozen=True)
class Rule:
    """A named check; its rationale lives in the comment next to its definition."""

    name: str
    summary: str
    check: Check


RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Check], Check]:
    """Register a check under ``name``; its docstring's first line is the summary."""

    def register(check: Check) -> Check:
        summary = (check.__doc__ or "").strip().splitlines()[0]
        RULES[name] = Rule(name, summary, check)
        return check

    return register


def v(rule_name: str, node: ast.AST, message: str) -> Violation:
    return Violation(rule_name, getattr(node, "lineno", 0), message)
