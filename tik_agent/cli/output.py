"""What every command shares: the consoles and the exit codes."""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True)

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


SANDBOX_HELP = "auto: the strongest isolation this machine gives; strict: refuse to run (exit 2) unless it is full."


def check_sandbox(mode: str):
    """Resolve ``--sandbox MODE`` (UsageError for strict on a weaker machine); one line
    on stderr when the isolation is not full.  Returns the isolation report."""
    from tik_agent.sandbox.isolation import require

    report = require(mode)
    if report.notice():
        err_console.print(report.notice(), highlight=False, markup=False, soft_wrap=True)
    return report
