"""The typer application: its commands, logging set-up and the error -> exit code mapping.

Command modules know nothing of the app; this module imports them and registers
their functions, so imports flow one way (app -> commands -> output).
"""

from __future__ import annotations

import logging
import sys

import typer
from rich.logging import RichHandler

from tik_agent import __version__
from tik_agent.cli import eval_commands, export_commands, onpolicy_commands, run_commands, seed_commands
from tik_agent.cli.output import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, console, err_console
from tik_agent.errors import CheckFailed, UsageError

app = typer.Typer(
    name="tik-agent",
    help="Search for faster Triton kernels that keep a batch-invariant seed kernel's bits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _module in (seed_commands, eval_commands, run_commands, export_commands, onpolicy_commands):
    _module.register(app)


def _version(value: bool) -> None:
    if value:
        console.print(f"tik-agent {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug detail."),
) -> None:
    handler = RichHandler(console=err_console, show_path=False, show_time=False) if err_console.is_terminal else logging.StreamHandler(sys.stderr)
    if not err_console.is_terminal:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tik_agent")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code (tests call this in-process)."""
    try:
        app(args=argv)  # standalone: typer reports its own usage errors (exit 2)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except UsageError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except CheckFailed as exc:
        err_console.print(f"[red]failed:[/red] {exc}", highlight=False, soft_wrap=True)
        return EXIT_REJECTED
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return EXIT_INTERRUPTED
    return EXIT_OK


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
