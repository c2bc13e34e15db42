"""What every command shares: the consoles, how text reaches them, and the exit codes.

Rich markup is off on both consoles: error messages, rule tags (``[missing-jit]``),
signatures (``log_softmax(logits)[target]``) and paths are user or program text,
and square brackets in them must print as typed.  Styles come from
:class:`rich.text.Text` parts instead (:func:`line`).

A terminal gets tables sized to it, lines wrapped between words and source that
wraps; a file or a pipe gets plain, complete text: lines are never wrapped,
cropped or padded to a width nobody reads.
"""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path

from rich.console import Console, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from tik_agent.errors import UsageError
from tik_agent.plaintext import plain

console = Console(markup=False)
err_console = Console(stderr=True, markup=False)

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# Wide enough that no table of ours is squeezed; tables take their natural width.
PIPE_WIDTH = 4000


def line(*parts: str | tuple[str, str]) -> Text:
    """One line from plain strings and ``(text, style)`` pairs; nothing in it is markup."""
    return Text.assemble(*parts)


def say(*parts: str | tuple[str, str], err: bool = False) -> None:
    """Print one line: whole in a file or a pipe; on a terminal wrapped between words, so that
    a number is never cut in two."""
    target = err_console if err else console
    target.print(line(*parts), soft_wrap=not target.is_terminal, highlight=False)


def emit(renderable: RenderableType, target: Console | None = None) -> None:
    """A table or a tree: fitted to a terminal; in a file or a pipe at its natural width, a
    table's title on a line of its own (never wrapped to the table's width), no line padded."""
    target = target or console
    if target.is_terminal:
        target.print(renderable)
        return
    buffer = io.StringIO()
    plain = Console(file=buffer, width=PIPE_WIDTH, markup=False, highlight=False, color_system=None)
    if isinstance(renderable, Table) and renderable.title is not None:
        title, renderable = str(renderable.title), copy.copy(renderable)
        renderable.title = None
        buffer.write(title + "\n")
    plain.print(renderable)
    target.file.write("".join(ln.rstrip() + "\n" for ln in buffer.getvalue().splitlines()))
    target.file.flush()


def source(text: str, lexer: str = "python", line_numbers: bool = True) -> None:
    """Source code, never cropped: highlighted and wrapped on a terminal, verbatim in a pipe, but
    for characters that act on a reader (an agent wrote it: a raw ESC or a bidi override in a
    string literal), which print as escapes (:func:`tik_agent.plaintext.plain`; ``show --source``
    gives the file's bytes)."""
    text = plain(text)
    if console.is_terminal:
        console.print(Syntax(text, lexer, line_numbers=line_numbers, word_wrap=True))
    else:
        console.file.write(text if text.endswith("\n") else text + "\n")
        console.file.flush()


def output_dir(path: Path, flag: str) -> Path:
    """``path`` as a directory this process can write into, created if needed; else one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{flag} {path}: exists and is not a directory") from None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create it: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: not writable")
    return path

SANDBOX_HELP = "auto: the strongest isolation this machine gives; strict: refuse to run (exit 2) unless it is full."


def check_sandbox(mode: str):
    """Resolve ``--sandbox MODE`` (UsageError for strict on a weaker machine); one line
    on stderr when the isolation is not full.  Returns the isolation report."""
    from tik_agent.sandbox.isolation import require

    report = require(mode)
    if report.notice():
        say(report.notice(), err=True)
    return report
