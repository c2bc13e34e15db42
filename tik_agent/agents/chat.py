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

Before a run creates anything, :meth:`ChatAgent.check` makes one cheap request
(a model lookup: no tokens) with a short time-out and no retries, so that an
unreachable server, a refused key or an unknown model is one line in seconds
(:class:`EndpointError`, exit 2) rather than a seed audit and ten minutes of
backoff.  A rate limit or a server error at that moment is no reason to refuse:
the run's own retries deal with those.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from types import ModuleType
from urllib.parse import urlsplit, urlunsplit

from tik_agent.agents.base import AgentContext, AgentUnavailable, Proposal, Usage, redact
from tik_agent.agents.pricing import PriceTable
from tik_agent.agents.prompts import PromptRenderer
from tik_agent.agents.replies import parse_reply
from tik_agent.errors import UsageError

log = logging.getLogger(__name__)

# Finish reasons that mean "the model ran out of output tokens".
_TRUNCATED = {"max_tokens", "length", "model_context_window_exceeded"}
# The start-up check's limit for connecting and for the answer (seconds); it never retries.
CHECK_TIMEOUT_S = 10.0


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


class EndpointError(UsageError):
    """The start-up check found that the provider cannot serve the run: unreachable, the key
    refused, the model unknown.  Bad input, so exit 2."""


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


def check_failure(err: Exception, sdk: ModuleType, model: str, timeout_s: float) -> EndpointError | None:
    """What an exception of the start-up check means: an :class:`EndpointError`, or None when
    the server answered with a fault that the run's retries deal with (429, 5xx, other 4xx).

    The server's own text is left out of a refused key's message: some providers echo
    part of the key there."""
    if isinstance(err, sdk.APIStatusError):
        status = err.status_code
        if status in (401, 403):
            return EndpointError(f"the server refused the credentials (HTTP {status}): check the API key")
        if status == 404:
            return EndpointError(f"HTTP 404 for model {model!r}: unknown model or wrong base URL "
                                 f"({_short(redact(str(err)), 200)})")
        return None
    if isinstance(err, sdk.APITimeoutError):
        return EndpointError(f"no answer within {timeout_s:g} s")
    if isinstance(err, sdk.APIConnectionError):
        return EndpointError(f"could not be reached ({_short(redact(str(err.__cause__ or err)), 200)})")
    return None


def display_url(url: str) -> str:
    """``url`` without any user:password part, for messages and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " [...]"


class ChatAgent:
    """Shared ``propose`` for chat-completion style providers.  Thread-safe if ``_complete`` is."""

    name = "chat"

    def __init__(self, *, model: str, prompts: PromptRenderer, prices: PriceTable, base_url: str = "") -> None:
        self.model: str = model
        self._prompts = prompts
        self._prices = prices
        self.where = display_url(base_url)

    def _complete(self, system: str, user: str) -> Completion:
        raise NotImplementedError

    def _probe(self, timeout_s: float) -> None:
        """One request that needs the server, the key and the model, and costs no tokens;
        raises :class:`EndpointError` or the SDK's own exception."""
        raise NotImplementedError

    def _sdk(self) -> ModuleType:
        raise NotImplementedError

    def check(self, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
        """The start-up check: raises :class:`EndpointError` (one line naming the agent, the
        model and the URL, never the key) when the run cannot work; returns a note when the
        server answered with a fault that the run's retries deal with, else None."""
        try:
            self._probe(timeout_s)
        except EndpointError as err:
            raise EndpointError(f"--agent {self.name}, model {self.model} at {self.where}: {err}") from None
        except Exception as err:
            sdk = self._sdk()
            if not isinstance(err, (sdk.APIError, json.JSONDecodeError)):
                raise
            failure = check_failure(err, sdk, self.model, timeout_s)
            if failure is not None:
                raise EndpointError(f"--agent {self.name}, model {self.model} at {self.where}: {failure}") from None
            status = getattr(err, "status_code", None)
            what = f"HTTP {status}" if status is not None else "an unreadable answer"
            return f"{self.name} at {self.where} gave the start-up check {what}; going on (the run retries such faults)"
        return None

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
