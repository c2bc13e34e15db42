"""What the two chat backends share: prompt in, reply parsed, usage priced.

A backend (``anthropic_agent``, ``openai_agent``) implements one method,
:meth:`ChatAgent._complete`, that sends the system and user messages and returns
a :class:`Completion` with the text and the provider's own token counts.  It
translates its SDK's exceptions with :func:`translate_sdk_error`:

* rate limits (429), server errors (5xx), time-outs and connection failures are
  retried by the SDK itself (``max_retries``, exponential backoff that honours
  ``Retry-After``); when the SDK gives up they become :class:`AgentUnavailable`
  (``transient=True``) so the loop pauses and reports instead of spinning;
* a rejected key, forbidden access or unknown model become ``AgentUnavailable``
  with ``transient=False``: retrying cannot help;
* a request the provider refuses on its merits (400, 413, 422: e.g. a prompt too
  long for the model) and a response body that cannot be read become a failed
  :class:`Proposal` with an error, recorded like a reply without code.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from types import ModuleType

from tik_agent.agents.base import AgentContext, AgentUnavailable, Proposal, Usage, redact
from tik_agent.agents.pricing import PriceTable
from tik_agent.agents.prompts import PromptRenderer
from tik_agent.agents.replies import parse_reply

log = logging.getLogger(__name__)

# Finish reasons that mean "the model ran out of output tokens".
_TRUNCATED = {"max_tokens", "length", "model_context_window_exceeded"}


@dataclass(frozen=True)
class Completion:
    """One reply: its text, the provider's token counts (None if not reported), why it stopped."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    stop_reason: str | None = None


class MalformedResponse(Exception):
    """The provider answered 2xx with a body we cannot read as a reply."""


class RequestRejected(Exception):
    """The provider refused this particular request (4xx other than auth and rate limits)."""


def translate_sdk_error(err: Exception, sdk: ModuleType, provider: str, model: str) -> Exception:
    """Map an exception from the anthropic or openai SDK (same class names) to ours."""
    if isinstance(err, (json.JSONDecodeError, sdk.APIResponseValidationError)):
        return MalformedResponse(f"{provider} returned a body that is not a valid response: {err}")
    if isinstance(err, sdk.APIStatusError):
        status = err.status_code
        detail = _short(str(err))
        if status in (401, 403):
            return AgentUnavailable(
                f"{provider} refused the credentials (HTTP {status}): check the API key", transient=False
            )
        if status == 404:
            return AgentUnavailable(
                f"{provider} answered HTTP 404 for model {model!r}: unknown model or wrong base URL ({detail})",
                transient=False,
            )
        if status in (408, 409, 429) or status >= 500:
            return AgentUnavailable(f"{provider} kept failing after the SDK's retries: HTTP {status}: {detail}")
        return RequestRejected(f"{provider} rejected the request (HTTP {status}): {detail}")
    if isinstance(err, sdk.APIConnectionError):  # APITimeoutError included
        return AgentUnavailable(
            f"{provider} could not be reached after the SDK's retries: {type(err).__name__}: {err}"
        )
    return err


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " [...]"


class ChatAgent:
    """Shared ``propose`` for chat-completion style providers.  Thread-safe if ``_complete`` is."""

    name = "chat"

    def __init__(self, *, model: str, prompts: PromptRenderer, prices: PriceTable) -> None:
        self.model: str = model
        self._prompts = prompts
        self._prices = prices

    def _complete(self, system: str, user: str) -> Completion:
        raise NotImplementedError

    def propose(self, context: AgentContext) -> Proposal:
        rendered = self._prompts.render(context)
        transcript = rendered.transcript()
        log.debug(
            "%s: attempt %d from %s with %s", self.name, context.attempt_index, context.parent_id, rendered.template
        )
        try:
            completion = self._complete(rendered.system, rendered.user)
        except RequestRejected as err:  # refused requests are not billed
            log.warning("%s: failed proposal: %s", self.name, err)
            return Proposal(None, "", Usage(), transcript, "", error=str(err))
        except MalformedResponse as err:  # the call may have been billed: usage unknown
            log.warning("%s: failed proposal: %s", self.name, err)
            return Proposal(None, "", Usage(priced=False), transcript, "", error=str(err))

        usage = self._usage(completion)
        parsed = parse_reply(completion.text, context.entry)
        error = parsed.error
        if error is not None and completion.stop_reason in _TRUNCATED:
            error += " (the reply was cut off at the output token limit)"
        if error is not None:
            log.info("%s: reply without usable code: %s", self.name, error)
        return Proposal(parsed.source, parsed.rationale, usage, transcript, redact(completion.text), error)

    def _usage(self, completion: Completion) -> Usage:
        if completion.input_tokens is None or completion.output_tokens is None:
            # Never estimate: unknown counts are zero tokens at an unknown cost.
            log.warning("%s: the provider reported no token usage for model %s", self.name, self.model)
            return Usage(0, 0, None, priced=False)
        cost = self._prices.cost(self.model, completion.input_tokens, completion.output_tokens)
        return Usage(completion.input_tokens, completion.output_tokens, cost)
