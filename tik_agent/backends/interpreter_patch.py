"""What every replacement of a piece of Triton's interpreter shares: the mark it carries, and
the check that the piece is the one it was written against (another Triton's may do more,
and is then left as it is)."""

from __future__ import annotations

MARK = "_tik_builtin_names"


def written_against(fn, *expected: tuple[frozenset, tuple | None]) -> bool:
    """``fn`` is not ours and its code has one of the ``expected`` (names, constants); None
    as the constants checks the names alone."""
    code = getattr(fn, "__code__", None)
    if code is None or getattr(fn, MARK, False):
        return False
    names = frozenset(code.co_names)
    consts = tuple(c for c in code.co_consts if not hasattr(c, "co_code"))
    return any(names == want and want_consts in (None, consts) for want, want_consts in expected)
