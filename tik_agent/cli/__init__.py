"""The ``tik-agent`` command line: typer commands, rich rendering, exit codes.

Exit codes: 0 success, 1 a rejected candidate or failed check, 2 bad usage or
input, 130 interrupted.  Library errors carry their meaning in their type
(:mod:`tik_agent.errors`); this package maps them and renders results.
"""

from tik_agent.cli.app import app, main, run

__all__ = ["app", "main", "run"]
