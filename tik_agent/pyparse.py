"""``ast.parse`` that is safe to call from several threads at once.

CPython 3.11 can fail concurrent parses with ``SystemError: AST constructor
recursion depth mismatch`` (seen in this project's test suite: two agent
threads parsing replies at once).  The optimize loop parses proposals,
replies and candidates from worker threads, so every parse goes through one lock.
"""

from __future__ import annotations

import ast
import hashlib
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)


def source_key(source: str) -> str:
    """A hash of what a source *is*: its AST, so that comments, blank lines and layout do
    not make a kernel new.  A source that does not parse is keyed by its stripped text."""
    try:
        text = ast.dump(parse(source))
    except (SyntaxError, ValueError):
        text = source.strip()
    return hashlib.sha256(text.encode()).hexdigest()
