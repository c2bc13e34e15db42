"""Text a candidate can influence, made inert before anyone reads it.

What a sandboxed worker hands back (its error messages, exception text,
stdout and stderr tails, names, dict keys), what the static rules quote from a
candidate's source and what an agent says about its own attempt all reach a
terminal, a log, an agent's next prompt or a JSON file.  :func:`plain` keeps
every printable character, newline and tab, and writes every other character
out as a visible escape (``\\x1b``, ``\\u202e``): the text still says
everything it said, and none of it acts.

What is escaped, by Unicode general category:

* ``Cc``, the control characters: C0 (NUL to US, ESC among them, so every
  terminal escape sequence, CSI, OSC, DCS, loses its introducer and prints as
  text), DEL, and C1 (U+0080 to U+009F, where U+009B is an 8-bit CSI that some
  terminals obey).  Newline and tab are kept; CR is not (it rewrites a line);
* ``Cf``, the format characters: bidirectional overrides and isolates
  (U+202A to U+202E, U+2066 to U+2069, the marks U+200E, U+200F, U+061C), which
  reorder what a reader sees against what the bytes say ("Trojan Source");
  zero-width characters, the BOM and the soft hyphen, which hide text; and the
  tag characters U+E0000 to U+E007F, which carry invisible ASCII into a model's
  prompt;
* ``Zl`` and ``Zp``, the line and paragraph separators (line breaks to some
  readers, not to others);
* ``Cs``, lone surrogates (from a JSON ``"\\ud800"``), which no UTF-8 writer
  accepts: a journal line that holds one cannot be written.

Whole categories rather than a list of known sequences: a new terminal
sequence or format character needs no new entry, and nothing parses terminal
grammar (whose unterminated strings would decide what is hidden).  Escaping
rather than deleting: the reader sees that something was there.  The result
holds none of these characters, so :func:`plain` of it is itself.

This module imports nothing of the project.
"""

from __future__ import annotations

import re
import unicodedata

# Categories whose characters act on the reader instead of being read.
INERT_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
KEPT = frozenset("\n\t")
# Candidates for escaping: everything but printable ASCII, newline and tab (a fast path
# for the common case; each match is then judged by its category).
_SUSPECT = re.compile(r"[^\n\t\x20-\x7e]")


def _escape(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _judge(match: re.Match) -> str:
    ch = match.group()
    return _escape(ch) if unicodedata.category(ch) in INERT_CATEGORIES else ch


def plain(text: str) -> str:
    """``text`` with every character that is not printable, a newline or a tab written as an escape."""
    return _SUSPECT.sub(_judge, text)


def acting(text: str) -> list[str]:
    """The characters of ``text`` that :func:`plain` would escape, in order (empty when none)."""
    return [ch for ch in text if ch not in KEPT and unicodedata.category(ch) in INERT_CATEGORIES]
