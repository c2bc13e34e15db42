"""Build the agent a run asks for, and say in one line which one and why.

``--agent auto`` (the default) picks ``anthropic`` when ``ANTHROPIC_API_KEY`` is
set, else ``openai`` when ``OPENAI_API_KEY`` is set, else ``offline``.
``--model`` overrides the backend's default model; ``--base-url`` overrides
``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL`` for the chosen backend.  An
``openai`` agent pointed at a base URL works without a key (local servers).

The SDK modules are imported only when their backend is built, so the offline
agent never imports them.  :func:`check_agent` is the start-up check a run makes
before it creates anything.  Keys go straight into the SDK client: they never
appear in the explanation, in logs or in prompts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from tik_agent.agents.base import Agent
from tik_agent.agents.chat import CHECK_TIMEOUT_S, ChatAgent, display_url
from tik_agent.agents.offline import OfflineAgent
from tik_agent.agents.pricing import PriceTable
from tik_agent.agents.prompts import PromptRenderer
from tik_agent.errors import UsageError

log = logging.getLogger(__name__)

KINDS = ("auto", "anthropic", "openai", "offline")
# Local OpenAI-compatible servers ignore the key, but the SDK insists on one.
_NO_KEY = "no-key"


def make_agent(
    kind: str = "auto",
    *,
    model: str | None = None,
    base_url: str | None = None,
    prompts_dir: Path | None = None,
    seed: int = 0,
    max_retries: int = 4,
    timeout_s: float = 300.0,
    prices_path: Path | None = None,
    max_output_tokens: int | None = None,
    environ: Mapping[str, str] = os.environ,
) -> tuple[Agent, str]:
    """The agent and a one-line explanation of the choice.

    ``seed`` salts the offline agent's choices (together with the context's
    ``rng_seed``).  ``max_retries`` and ``timeout_s`` go to the SDK client, whose
    retry loop backs off on rate limits, server errors and time-outs.
    """
    if kind not in KINDS:
        raise UsageError(f"unknown agent {kind!r}; known agents: {', '.join(KINDS)}")
    if max_retries < 0:
        raise UsageError(f"--max-retries: {max_retries} is negative")
    if timeout_s <= 0:
        raise UsageError(f"--timeout: {timeout_s} is not positive")

    anthropic_key = environ.get("ANTHROPIC_API_KEY", "").strip()
    openai_key = environ.get("OPENAI_API_KEY", "").strip()
    if kind == "auto":
        if anthropic_key:
            kind, why = "anthropic", "auto: ANTHROPIC_API_KEY is set"
        elif openai_key:
            kind, why = "openai", "auto: OPENAI_API_KEY is set, ANTHROPIC_API_KEY is not"
        else:
            kind, why = "offline", "auto: neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set"
    else:
        why = f"--agent {kind}"

    if kind == "anthropic" and not anthropic_key:
        raise UsageError("--agent anthropic needs ANTHROPIC_API_KEY in the environment")
    if kind == "offline":
        if model is not None:
            why += f"; --model {model} ignored (the offline agent uses no model)"
        agent: Agent = OfflineAgent(seed=seed)
        return agent, f"agent: offline (tunables and parity-safe rewrites, no network) [{why}]"

    prompts = PromptRenderer(prompts_dir)
    prices = PriceTable.load(prices_path)
    common = dict(prompts=prompts, prices=prices, max_retries=max_retries, timeout_s=timeout_s)
    if max_output_tokens is not None:
        common["max_output_tokens"] = max_output_tokens

    if kind == "anthropic":
        _require_sdk("anthropic")
        from tik_agent.agents import anthropic_agent

        url = base_url or environ.get("ANTHROPIC_BASE_URL") or anthropic_agent.DEFAULT_BASE_URL
        chosen = model or anthropic_agent.DEFAULT_MODEL
        agent = anthropic_agent.AnthropicAgent(api_key=anthropic_key, model=chosen, base_url=url, **common)
    else:
        _require_sdk("openai")
        from tik_agent.agents import openai_agent

        url = base_url or environ.get("OPENAI_BASE_URL") or openai_agent.DEFAULT_BASE_URL
        if not openai_key and url == openai_agent.DEFAULT_BASE_URL:
            raise UsageError("--agent openai needs OPENAI_API_KEY, or --base-url for a local server")
        chosen = model or openai_agent.DEFAULT_MODEL
        agent = openai_agent.OpenAIAgent(api_key=openai_key or _NO_KEY, model=chosen, base_url=url, **common)

    if prices.price_of(chosen) is None:
        why += f"; no price for {chosen} in {prices.source}, cost unknown"
    return agent, f"agent: {kind}, model {chosen} at {display_url(url)} [{why}]"


def check_agent(agent: Agent, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """The start-up check of an LLM agent: one cheap request, before anything of the run exists.

    Raises :class:`~tik_agent.agents.chat.EndpointError` (a usage error: exit 2) when the
    server cannot be reached, refuses the key or does not know the model; returns a note
    to log when it answered with a transient fault.  The offline agent needs no check.
    """
    return agent.check(timeout_s) if isinstance(agent, ChatAgent) else None


def _require_sdk(name: str) -> None:
    """A one-line usage error instead of an ImportError deep in the agent module: the SDKs
    are dependencies, but an install with --no-deps (a node's wheel folder) can lack one."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        raise UsageError(f"--agent {name} needs the {name} package, a dependency of tik-agent that is not "
                         f"installed here: pip install {name} (or use --agent offline)")
