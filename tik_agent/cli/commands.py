"""Imports every command module so that each registers itself on the app."""

from tik_agent.cli import seed_commands  # noqa: F401
from tik_agent.cli import eval_commands  # noqa: F401
from tik_agent.cli import export_commands  # noqa: F401
from tik_agent.cli import run_commands  # noqa: F401
