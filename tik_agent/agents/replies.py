"""Pull a candidate kernel file out of a model's reply.

A reply is usable when it carries one complete Python file that parses, has at
least one ``@triton.jit`` function and defines the entry function at module
level.  The file may come in a fenced code block (the last usable block wins:
models tend to show fragments first and the final file last) or be the whole
reply.  Everything outside the chosen block is the rationale, made plain text
(:func:`tik_agent.plaintext.plain`): it reaches the journal, the live view and the
next prompt, and the model that wrote it is the one the judge does not trust.

Nothing here raises on bad replies: :func:`parse_reply` returns a
:class:`ParsedReply` whose ``source`` is None and whose ``error`` says why, so
the loop records a failed proposal instead of crashing.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from tik_agent import pyparse
from tik_agent.plaintext import plain

# An opening fence (``` or ~~~, three or more), an optional info string, the
# body, and the matching closing fence at the start of a line.  An unterminated
# last block (a reply cut off at the token limit) runs to the end of the text.
_FENCE = re.compile(
    r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)"
    r"(?:^[ \t]{0,3}(?P=fence)[`~]*[ \t]*$|\Z)",
    re.DOTALL | re.MULTILINE,
)
_PYTHON_TAGS = {"", "python", "py", "python3", "python3.11"}
MAX_RATIONALE_CHARS = 4000


@dataclass(frozen=True)
class ParsedReply:
    """The usable source (or None), the rationale, and why no source was found."""

    source: str | None
    rationale: str
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.source is None) == (self.error is None):
            raise ValueError("ParsedReply: exactly one of source and error must be set")


def parse_reply(reply: str, entry: str) -> ParsedReply:
    """Find the candidate file for ``entry`` in ``reply``."""
    if not reply or not reply.strip():
        return ParsedReply(None, "", "empty reply")

    problems: list[str] = []
    blocks = [m for m in _FENCE.finditer(reply) if _is_python_tag(m.group("info"))]
    for match in reversed(blocks):
        body = _dedent_fenced(match.group("body"), match.group("indent"))
        problem = check_candidate(body, entry)
        if problem is None:
            rationale = reply[: match.start()] + reply[match.end() :]
            return ParsedReply(_normalise(body), _clean_rationale(rationale))
        problems.append(problem)

    if not blocks:
        problem = check_candidate(reply, entry)
        if problem is None:
            module = pyparse.parse(reply)
            return ParsedReply(_normalise(reply), _clean_rationale(ast.get_docstring(module) or ""))
        return ParsedReply(None, _clean_rationale(reply), f"no fenced python code block ({problem})")

    # Report the problem of the last block: it is the one the model meant as its answer.
    return ParsedReply(
        None,
        _clean_rationale(reply),
        f"{len(blocks)} python code block(s), none usable; last: {problems[0]}",
    )


def check_candidate(source: str, entry: str) -> str | None:
    """None when ``source`` is a complete candidate file, else what is wrong with it."""
    try:
        module = pyparse.parse(source)
    except SyntaxError as err:
        return f"syntax error at line {err.lineno}: {err.msg}"
    functions = [n for n in module.body if isinstance(n, ast.FunctionDef)]
    if not any(is_jit_decorator(d) for f in functions for d in f.decorator_list):
        return "no @triton.jit function"
    if not any(f.name == entry for f in functions):
        return f"no module-level function named {entry!r}"
    return None


def is_jit_decorator(decorator: ast.expr) -> bool:
    """``@triton.jit``, ``@triton.jit(...)`` or ``@jit`` (imported from triton)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "jit"
    return isinstance(target, ast.Name) and target.id == "jit"


def _is_python_tag(info: str) -> bool:
    words = info.strip().split()
    return (words[0].lower() if words else "") in _PYTHON_TAGS


def _dedent_fenced(body: str, indent: str) -> str:
    """Remove the fence's own indentation (at most three spaces) from each body line."""
    if not indent:
        return body
    width = len(indent)
    lines = body.splitlines(True)
    return "".join(line[min(width, len(line) - len(line.lstrip(" \t"))) :] for line in lines)


def _normalise(source: str) -> str:
    return source.strip("\n") + "\n"


def _clean_rationale(text: str) -> str:
    text = re.sub(r"\n{3,}", "\n\n", plain(text)).strip()
    if len(text) > MAX_RATIONALE_CHARS:
        text = text[:MAX_RATIONALE_CHARS].rstrip() + " [...]"
    return text
