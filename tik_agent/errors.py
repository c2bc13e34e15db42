"""Exceptions that the CLI maps to exit codes.

``UsageError`` (and its subclasses) mean the user gave bad input: exit 2.
``CheckFailed`` means a kernel or candidate was rejected: exit 1.
"""


class TikError(Exception):
    """Base class of every error tik-agent raises on purpose."""


class UsageError(TikError):
    """Bad usage or input (exit code 2)."""


class SpecError(UsageError):
    """A seed's spec.toml or kernel.py is malformed; the message names file and field."""


class CheckFailed(TikError):
    """A check ran and failed (exit code 1)."""
