"""The Anthropic backend: one non-streaming Messages API call per proposal.

The client is created once and shared by all threads (the SDK client is
thread-safe).  Retries on 429, 5xx and time-outs are the SDK's own
(``max_retries``, exponential backoff honouring ``Retry-After``); the key and
the base URL come from the factory, which reads ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL``.  The key lives only inside the SDK client.  The start-up
check looks the model up (``GET /v1/models/{model}``: free, needs the key, 404 for
an unknown model; aliases are accepted).
"""

from __future__ import annotations

import json
import logging
from types import ModuleType

import anthropic

from tik_agent.agents.chat import ChatAgent, Completion, MalformedResponse, translate_sdk_error
from tik_agent.agents.pricing import PriceTable
from tik_agent.agents.prompts import PromptRenderer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_BASE_URL = "https://api.anthropic.com"
# Room for an explanation and a complete kernel file; below the SDK's limit for
# non-streaming requests, so no streaming is needed.
DEFAULT_MAX_OUTPUT_TOKENS = 16_000


class AnthropicAgent(ChatAgent):
    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        prompts: PromptRenderer,
        prices: PriceTable,
        max_retries: int = 4,
        timeout_s: float = 300.0,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    ) -> None:
        super().__init__(model=model, prompts=prompts, prices=prices, base_url=base_url)
        self._max_output_tokens = max_output_tokens
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout_s
        )

    def _sdk(self) -> ModuleType:
        return anthropic

    def _probe(self, timeout_s: float) -> None:
        self._client.with_options(max_retries=0, timeout=timeout_s).models.retrieve(self.model)

    def _complete(self, system: str, user: str) -> Completion:
        try:
            message = self._client.messages.create(
                model=self.model,
                max_tokens=self._max_output_tokens,
                system=system,
                messages=[{"role": "user", "content": user}],
            )
        except (anthropic.APIError, json.JSONDecodeError) as err:
            raise translate_sdk_error(err, anthropic, "anthropic", self.model) from err

        content = getattr(message, "content", None)
        if not isinstance(content, list):
            raise MalformedResponse("anthropic returned a message without a content list")
        texts = [getattr(block, "text", None) for block in content if getattr(block, "type", None) == "text"]
        text = "".join(t for t in texts if isinstance(t, str))
        usage = getattr(message, "usage", None)
        input_tokens = getattr(usage, "input_tokens", None)
        output_tokens = getattr(usage, "output_tokens", None)
        if isinstance(input_tokens, int) and isinstance(output_tokens, int):
            # Cache reads and writes are input tokens too (reported separately when
            # prompt caching is on); they are priced here at the plain input rate.
            cached = [getattr(usage, k, None) for k in ("cache_creation_input_tokens", "cache_read_input_tokens")]
            input_tokens += sum(c for c in cached if isinstance(c, int))
        else:
            input_tokens = output_tokens = None
        return Completion(text, input_tokens, output_tokens, getattr(message, "stop_reason", None))
