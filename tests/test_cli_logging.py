"""The CLI's logging is the command's alone: it adds its own handler to the package logger
for the command and removes only that one at the end, leaving what a library user set
(handlers, propagation, level) as it was (issue 24)."""

from __future__ import annotations

import contextlib
import io
import logging

import pytest

from tik_agent.cli import run as cli
from tik_agent.spec import seeds


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def package_logger():
    """The ``tik_agent`` logger with a handler of the test's own, its state put back after."""
    logger = logging.getLogger("tik_agent")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    mine = _Records()
    logger.addHandler(mine)
    yield logger, mine
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


def _quietly(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(argv)
    return code, err.getvalue()


@pytest.mark.parametrize("argv", [["seeds"], ["-v", "seeds"], ["--version"]])
def test_the_cli_leaves_the_package_loggers_handlers_propagation_and_level(package_logger, argv):
    logger, mine = package_logger
    logger.setLevel(logging.WARNING)
    before = (list(logger.handlers), logger.propagate, logger.level)
    code, _ = _quietly(argv)
    assert code == 0
    assert (list(logger.handlers), logger.propagate, logger.level) == before
    logging.getLogger("tik_agent.test_cli_logging").warning("after the command")
    assert [r.getMessage() for r in mine.records][-1:] == ["after the command"]


def test_a_record_logged_during_a_command_reaches_stderr_and_the_users_handler(package_logger, monkeypatch):
    logger, mine = package_logger
    bundled = seeds.bundled

    def logging_bundled():
        logging.getLogger("tik_agent.spec.seeds").info("listing the bundled seeds")
        logging.getLogger("tik_agent.spec.seeds").debug("in detail")
        return bundled()

    monkeypatch.setattr(seeds, "bundled", logging_bundled)
    code, err = _quietly(["seeds"])
    assert code == 0 and "listing the bundled seeds" in err and "in detail" not in err, err
    assert [r.getMessage() for r in mine.records] == ["listing the bundled seeds"]
    code, err = _quietly(["--verbose", "seeds"])
    assert code == 0 and "in detail" in err, err
