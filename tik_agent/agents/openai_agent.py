"""The OpenAI-compatible backend: one non-streaming chat completion per proposal.

Works with api.openai.com and with any server that speaks the chat completions
API (vLLM, llama.cpp, Ollama, LM Studio, ...) through ``base_url``.  The client
is created once and shared by all threads.  Retries on 429, 5xx and time-outs
are the SDK's own (``max_retries``, exponential backoff honouring
``Retry-After``).  The key lives only inside the SDK client.  The start-up check
lists the server's models (``GET /models``: free, needs the key; vLLM, SGLang,
Ollama and llama.cpp serve the list but not a lookup of one model) and refuses a
model the list does not name.
"""

from __future__ import annotations

import json
import logging
from types import ModuleType

import openai

from tik_agent.agents.chat import ChatAgent, Completion, EndpointError, MalformedResponse, translate_sdk_error
from tik_agent.agents.pricing import PriceTable
from tik_agent.agents.prompts import PromptRenderer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4.1"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIAgent(ChatAgent):
    name = "openai"

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
        max_output_tokens: int | None = None,
    ) -> None:
        super().__init__(model=model, prompts=prompts, prices=prices, base_url=base_url)
        # None leaves the limit to the server: local servers differ in which of
        # max_tokens / max_completion_tokens they accept.
        self._max_output_tokens = max_output_tokens
        self._client = openai.OpenAI(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout_s
        )

    def _sdk(self) -> ModuleType:
        return openai

    def _probe(self, timeout_s: float) -> None:
        listed = [m.id for m in self._client.with_options(max_retries=0, timeout=timeout_s).models.list()]
        if listed and self.model not in listed:
            shown = ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")
            raise EndpointError(f"the server lists no model {self.model!r} (it lists {shown}): give one with --model")

    def _complete(self, system: str, user: str) -> Completion:
        extra = {} if self._max_output_tokens is None else {"max_completion_tokens": self._max_output_tokens}
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                **extra,
            )
        except (openai.APIError, json.JSONDecodeError) as err:
            raise translate_sdk_error(err, openai, "openai", self.model) from err

        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise MalformedResponse("openai returned a completion without choices")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise MalformedResponse("openai returned a choice without a message")
        text = getattr(message, "content", None)
        if text is None:
            text = ""  # a refusal or a tool call: no code, recorded as a failed proposal
        if not isinstance(text, str):
            raise MalformedResponse("openai returned a message whose content is not text")
        usage = getattr(response, "usage", None)
        input_tokens = getattr(usage, "prompt_tokens", None)
        output_tokens = getattr(usage, "completion_tokens", None)
        if not (isinstance(input_tokens, int) and isinstance(output_tokens, int)):
            input_tokens = output_tokens = None
        return Completion(text, input_tokens, output_tokens, getattr(choices[0], "finish_reason", None))
