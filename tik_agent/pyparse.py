"""``ast.parse`` that is safe to call from several threads at once.

CPython 3.11 can fail concurrent parses with ``SystemError: AST constructor
recursion depth mismatch`` (seen in this project's test suite: two agent
threads parsing replies at once).  The optimize loop parses proposals,
replies and candidates from worker threads, so every parse goes through one lock.
"""

from __future__ import annotations

import ast
import hashlib
import io
import threading
import tokenize

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)


def source_key(source: str) -> str:
    """A hash of what a source *says*: its tokens without comments, blank lines or
    indentation width, so that restyling does not make a kernel new.

    Tokens rather than an AST dump: converting to AST objects is the CPython 3.11 state
    that other threads (Triton's JIT parses kernels too) can corrupt, and the loop keys
    every proposal.  A source that does not tokenize is keyed by its stripped text."""
    parts = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL):
                continue
            text = "" if tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) else tok.string
            parts.append(f"{tok.type}:{text}")
    except (tokenize.TokenError, SyntaxError):
        parts = [source.strip()]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
