"""What every command shares: the consoles and the exit codes."""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True)

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
