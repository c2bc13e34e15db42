"""``python -m tik_agent``: the same command line as ``tik-agent``."""

from tik_agent.cli import main

main()
