"""The run's pool of evaluation slots: ``local`` (this machine) or ``ray`` (a cluster's actors).

Ray is an optional dependency: :mod:`tik_agent.search.ray_executor` (which imports it
at its top) is imported only when ``ray`` is asked for.
"""

from __future__ import annotations

import os
from typing import Mapping

from tik_agent.errors import UsageError
from tik_agent.run.rundir import WARM_CACHE
from tik_agent.search.executor import LocalExecutor
from tik_agent.search.slots import Executor

EXECUTORS = ("local", "ray")
RAY_MISSING = "--executor ray: Ray is not installed here; pip install 'tik-agent[ray]'"


def open_executor(kind: str, session, *, workers: int, ray_address: str | None = None,
                  environ: Mapping[str, str] = os.environ) -> Executor:
    """The executor of a run: ``local`` (this machine's slots) or ``ray`` (a cluster's actors)."""
    if kind not in EXECUTORS:
        raise UsageError(f"--executor: unknown executor {kind!r}; expected one of {list(EXECUTORS)}")
    config = session.run.config
    if kind == "local":
        warm = session.run.path / WARM_CACHE
        return LocalExecutor(config.device, workers, warm_cache=warm if warm.is_dir() else None)
    require_ray()
    from tik_agent.search.ray_executor import RayExecutor

    return RayExecutor.for_session(session, workers, address=ray_address or environ.get("RAY_ADDRESS") or None)


def require_ray() -> None:
    """Refuse ``--executor ray`` in one line when Ray is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError(RAY_MISSING) from None
