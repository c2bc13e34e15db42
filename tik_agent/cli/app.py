"""The typer application: its commands, logging set-up and the error -> exit code mapping.

Command modules know nothing of the app; this module imports them and registers
their functions, so imports flow one way (app -> commands -> output).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys

import typer
from rich.logging import RichHandler
from typer.core import TyperArgument, TyperCommand

from tik_agent import __version__
from tik_agent.cli import (eval_commands, export_commands, onpolicy_commands, run_commands, seed_commands,
                           view_commands)
from tik_agent.cli.output import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, err_console, say
from tik_agent.errors import CheckFailed, UsageError

PROG = "tik-agent"


class Command(TyperCommand):
    """Usage lines as click writes them: ``show [OPTIONS] RUN ID``, ``[SEED]`` when optional
    (typer's own are ``{run} {ID}``)."""

    def format_help(self, ctx, formatter) -> None:
        with _hyphenated_words_whole():
            super().format_help(ctx, formatter)

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.display_name_raw
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


# The click that formats typer's help (typer 0.2x carries a copy of its own, typer._click).
_TEXTWRAP = importlib.import_module(
    next(c.__module__ for c in TyperCommand.__mro__ if c.__name__ == "Command").rsplit(".", 1)[0] + "._textwrap")


class _WholeHyphenatedWords(_TEXTWRAP.TextWrapper):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, break_on_hyphens=False, **kwargs)


@contextlib.contextmanager
def _hyphenated_words_whole():
    """Help text wrapped between words only: click's wrapper also breaks after a hyphen, which
    cut ``'tik-agent[ray]'`` and ``--eval-timeout`` in two at some widths.  click has no
    switch for it; its wrapper class is swapped while one command's help is formatted."""
    original = _TEXTWRAP.TextWrapper
    _TEXTWRAP.TextWrapper = _WholeHyphenatedWords
    try:
        yield
    finally:
        _TEXTWRAP.TextWrapper = original


# Plain (click) help: no markup to eat "[default: ...]" or a bracket in a help text,
# and the same text on a terminal, in a pipe and at any width.
app = typer.Typer(
    name=PROG,
    help="Search for faster Triton kernels that keep a batch-invariant seed kernel's bits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for _module in (seed_commands, eval_commands, run_commands, view_commands, export_commands, onpolicy_commands):
    _module.register(app, Command)


def _version(value: bool) -> None:
    if value:
        say(f"{PROG} {__version__}")
        raise typer.Exit(EXIT_OK)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes, not the stream it was
    when the command started (a test's captured stream is closed once the test ends)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


@contextlib.contextmanager
def _logging_to_stderr():
    """The package logger shows a command's records on stderr while the command runs: the
    CLI adds its own handler and sets the logger's level (INFO; ``--verbose``: DEBUG), and
    at the end removes that handler alone and restores the level.  Other handlers and
    propagation are the library user's and are left as they are."""
    handler = RichHandler(console=err_console, show_path=False, show_time=False) if err_console.is_terminal else _StderrHandler()
    if not err_console.is_terminal:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tik_agent")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug detail."),
) -> None:
    if verbose:
        logging.getLogger("tik_agent").setLevel(logging.DEBUG)  # restored by _logging_to_stderr


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code (tests call this in-process)."""
    with _logging_to_stderr():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    try:
        app(args=argv, prog_name=PROG)  # standalone: typer reports its own usage errors (exit 2)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_OK
        if code == EXIT_INTERRUPTED and _from_ctrl_c(exc):
            # typer turns Ctrl-C into a silent exit 130; a command that knows more says so itself.
            say(f"interrupted: {PROG} {_command(sys.argv[1:] if argv is None else argv)}", err=True)
        return code
    except UsageError as exc:
        say(("error:", "red"), f" {exc}", err=True)
        return EXIT_USAGE
    except CheckFailed as exc:
        say(("failed:", "red"), f" {exc}", err=True)
        return EXIT_REJECTED
    except OSError as exc:
        # A full disk, a permission, a path that vanished: the user's environment, not a bug.
        logging.getLogger("tik_agent").debug("OS error", exc_info=True)
        say(("error:", "red"), f" {_os_error(exc)}", err=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        say(f"interrupted: {PROG} {_command(sys.argv[1:] if argv is None else argv)}", err=True)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _from_ctrl_c(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ if exc.__cause__ is not None else None if exc.__suppress_context__ else exc.__context__
    return False


def _command(argv: list[str]) -> str:
    return next((a for a in argv if not a.startswith("-")), "")


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
