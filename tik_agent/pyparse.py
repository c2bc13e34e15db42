"""``ast.parse`` that is safe to call from several threads at once.

CPython 3.11 can fail concurrent parses with ``SystemError: AST constructor
recursion depth mismatch`` (seen in this project's test suite: two agent
threads parsing replies at once).  The optimize loop parses proposals,
replies and candidates from worker threads, so every parse goes through one lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)
