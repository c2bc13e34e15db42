"""The real anthropic and openai SDK clients against a scripted loopback server.

The server (http.server on 127.0.0.1, port 0, in a thread) speaks the two APIs in
the mode the backends use: non-streaming ``POST /v1/messages`` and
``POST /v1/chat/completions``, and the start-up check's ``GET /v1/models/{model}``
(anthropic) and ``GET /v1/models`` (openai).  Each test scripts its responses, including 429s,
500s, time-outs, replies without code and malformed bodies.  No network.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tik_agent.agents.anthropic_agent import AnthropicAgent
from tik_agent.agents.base import AgentContext, AgentUnavailable, AttemptFeedback
from tik_agent.agents.factory import make_agent
from tik_agent.agents.openai_agent import OpenAIAgent
from tik_agent.agents.pricing import ModelPrice, PriceTable
from tik_agent.agents.prompts import PromptRenderer

ANTHROPIC_KEY = "sk-ant-api03-TESTKEY0123456789abcdefghijklmnop"
OPENAI_KEY = "sk-proj-TESTKEY0123456789abcdefghijklmnop"
MODEL = "test-model"
PRICES = PriceTable({MODEL: ModelPrice(input=3.0, output=15.0)})

KERNEL = '''import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 2


@triton.jit
def _double_kernel(x_ptr, y_ptr, M, N, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offs = rows[:, None] * N + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def double(x):
    M, N = x.shape
    y = torch.empty_like(x)
    _double_kernel[(triton.cdiv(M, ROWS_PER_PROGRAM),)](x, y, M, N, ROWS=ROWS_PER_PROGRAM, BLOCK=triton.next_power_of_2(N))
    return y
'''
SEED = KERNEL.replace("ROWS_PER_PROGRAM = 2", "ROWS_PER_PROGRAM = 1")
GOOD_REPLY = f"Two rows per program halve the launches; each row's math is unchanged.\n\n```python\n{KERNEL}```\n"
NO_CODE_REPLY = "I would try processing more rows per program, but I am not sure it keeps the bits."


# ----------------------------------------------------------------------------- server


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict


class LoopbackServer:
    """Answers POSTs with scripted replies, in order, and records every request."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # the start-up check's model lookup
                self._answer({})

            def do_POST(self) -> None:
                self._answer(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))

            def _answer(self, body: dict) -> None:
                with server._lock:
                    server.requests.append(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    reply = server.script.popleft() if server.script else Reply(599, b'{"error": "script exhausted"}')
                time.sleep(reply.delay_s)
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


# Error replies carry retry-after-ms so the SDKs' own backoff takes milliseconds.
FAST_RETRY = {"retry-after-ms": "1"}


class AnthropicAPI:
    name = "anthropic"
    path = "/v1/messages"
    models_path = f"/v1/models/{MODEL}"
    key = ANTHROPIC_KEY

    @staticmethod
    def models_ok() -> Reply:
        body = {"type": "model", "id": MODEL, "display_name": "Test", "created_at": "2026-01-01T00:00:00Z"}
        return Reply(200, json.dumps(body).encode())

    @staticmethod
    def make(url: str, **kw) -> AnthropicAgent:
        return AnthropicAgent(api_key=ANTHROPIC_KEY, model=MODEL, base_url=url, prompts=PromptRenderer(), prices=PRICES, **kw)

    @staticmethod
    def ok(text: str, input_tokens: int = 1200, output_tokens: int = 340, stop: str = "end_turn") -> Reply:
        body = {
            "id": "msg_01", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": text}], "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }  # fmt: skip
        return Reply(200, json.dumps(body).encode())

    @staticmethod
    def error(status: int, kind: str) -> Reply:
        body = {"type": "error", "error": {"type": kind, "message": f"scripted {status}"}}
        return Reply(status, json.dumps(body).encode(), dict(FAST_RETRY))

    @staticmethod
    def prompt_of(request: Request) -> tuple[str, str]:
        return request.body["system"], request.body["messages"][0]["content"]


class OpenAIAPI:
    name = "openai"
    path = "/v1/chat/completions"
    models_path = "/v1/models"
    key = OPENAI_KEY

    @staticmethod
    def models_ok(*ids: str) -> Reply:
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "test"} for i in ids or (MODEL,)]
        return Reply(200, json.dumps({"object": "list", "data": data}).encode())

    @staticmethod
    def make(url: str, **kw) -> OpenAIAgent:
        return OpenAIAgent(api_key=OPENAI_KEY, model=MODEL, base_url=url + "/v1", prompts=PromptRenderer(), prices=PRICES, **kw)

    @staticmethod
    def ok(text: str, input_tokens: int = 1200, output_tokens: int = 340, stop: str = "stop") -> Reply:
        body = {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": stop}],
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": input_tokens + output_tokens},
        }  # fmt: skip
        return Reply(200, json.dumps(body).encode())

    @staticmethod
    def error(status: int, kind: str) -> Reply:
        body = {"error": {"message": f"scripted {status}", "type": kind, "code": None}}
        return Reply(status, json.dumps(body).encode(), dict(FAST_RETRY))

    @staticmethod
    def prompt_of(request: Request) -> tuple[str, str]:
        messages = request.body["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        return messages[0]["content"], messages[1]["content"]


@pytest.fixture(params=[AnthropicAPI, OpenAIAPI], ids=["anthropic", "openai"])
def api(request):
    return request.param


def context(attempt_index: int = 0, recent=()) -> AgentContext:
    return AgentContext(
        spec_text="[tunables]\nROWS_PER_PROGRAM = [1, 2, 4]\n",
        entry="double",
        seed_name="double",
        tunables={"ROWS_PER_PROGRAM": [1, 2, 4]},
        seed_source=SEED,
        parent_id="seed",
        parent_source=SEED,
        parent_speedup=None,
        timing_table=[{"name": "small", "shape": "(3, 17)", "seed_ms": 1.5, "parent_ms": 1.5}],
        recent=list(recent),
        device="cpu (triton interpreter)",
        rng_seed=0,
        attempt_index=attempt_index,
    )


def key_sent(request: Request, key: str) -> bool:
    return request.headers.get("x-api-key") == key or request.headers.get("authorization") == f"Bearer {key}"


# ----------------------------------------------------------------------------- tests


def test_good_reply_gives_source_rationale_and_reported_usage(server, api, caplog):
    caplog.set_level(logging.DEBUG)
    server.push(api.ok(GOOD_REPLY, input_tokens=1234, output_tokens=567))
    proposal = api.make(server.url, max_retries=0).propose(context())

    assert proposal.source == KERNEL and proposal.error is None
    assert "Two rows per program" in proposal.rationale
    assert (proposal.usage.input_tokens, proposal.usage.output_tokens) == (1234, 567)
    assert proposal.usage.cost_usd == pytest.approx((1234 * 3.0 + 567 * 15.0) / 1e6)
    assert proposal.reply == GOOD_REPLY

    [request] = server.requests
    assert request.path == api.path
    assert request.body["model"] == MODEL and not request.body.get("stream")
    system, user = api.prompt_of(request)
    assert "bit for bit" in system and "ROWS_PER_PROGRAM = 1" in user
    assert system in proposal.prompt and user in proposal.prompt

    # The key travels in the request header and nowhere else.
    assert key_sent(request, api.key)
    assert api.key not in json.dumps(request.body)
    assert api.key not in proposal.prompt + proposal.reply + proposal.rationale
    assert api.key not in caplog.text
    assert api.key[10:30] not in caplog.text


def test_rate_limit_is_retried_by_the_sdk(server, api):
    server.push(api.error(429, "rate_limit_error"), api.ok(GOOD_REPLY))
    proposal = api.make(server.url, max_retries=2).propose(context())
    assert proposal.source == KERNEL
    assert len(server.requests) == 2
    assert server.requests[1].headers.get("x-stainless-retry-count") == "1"


def test_server_errors_until_the_sdk_gives_up_raise_agent_unavailable(server, api):
    server.push(*[api.error(500, "api_error") for _ in range(3)])
    with pytest.raises(AgentUnavailable, match="HTTP 500") as info:
        api.make(server.url, max_retries=2).propose(context())
    assert info.value.transient
    assert len(server.requests) == 3
    assert api.key not in str(info.value)


def test_time_out_is_retried(server, api):
    slow = api.ok(GOOD_REPLY)
    slow.delay_s = 1.0
    server.push(slow, api.ok(GOOD_REPLY))
    proposal = api.make(server.url, max_retries=1, timeout_s=0.25).propose(context())
    assert proposal.source == KERNEL
    assert len(server.requests) == 2


def test_time_outs_until_the_sdk_gives_up_raise_agent_unavailable(server, api):
    slow = api.ok(GOOD_REPLY)
    slow.delay_s = 0.6
    server.push(slow)
    with pytest.raises(AgentUnavailable, match="could not be reached") as info:
        api.make(server.url, max_retries=0, timeout_s=0.2).propose(context())
    assert info.value.transient


def test_rejected_key_is_not_retried_and_not_transient(server, api):
    server.push(api.error(401, "authentication_error"))
    with pytest.raises(AgentUnavailable, match="credentials") as info:
        api.make(server.url, max_retries=3).propose(context())
    assert not info.value.transient
    assert len(server.requests) == 1


def test_bad_request_is_a_failed_proposal(server, api):
    server.push(api.error(400, "invalid_request_error"))
    proposal = api.make(server.url, max_retries=3).propose(context())
    assert proposal.source is None and "HTTP 400" in proposal.error
    assert len(server.requests) == 1


def test_reply_without_code_is_a_failed_proposal_with_usage(server, api):
    server.push(api.ok(NO_CODE_REPLY, input_tokens=900, output_tokens=25))
    proposal = api.make(server.url, max_retries=0).propose(context())
    assert proposal.source is None
    assert "no fenced python code block" in proposal.error
    assert proposal.rationale == NO_CODE_REPLY and proposal.reply == NO_CODE_REPLY
    assert (proposal.usage.input_tokens, proposal.usage.output_tokens) == (900, 25)


def test_truncated_reply_says_so(server, api):
    cut = GOOD_REPLY[: len(GOOD_REPLY) // 2]
    server.push(api.ok(cut, stop="max_tokens" if api is AnthropicAPI else "length"))
    proposal = api.make(server.url, max_retries=0).propose(context())
    assert proposal.source is None and "cut off" in proposal.error


@pytest.mark.parametrize("body", [b"{not json", b'{"unexpected": true}', b"[1, 2, 3]"], ids=["invalid", "wrong-shape", "array"])
def test_malformed_body_is_a_failed_proposal(server, api, body):
    server.push(Reply(200, body))
    proposal = api.make(server.url, max_retries=2).propose(context())
    assert proposal.source is None
    assert api.name in proposal.error
    assert proposal.usage.cost_usd is None and proposal.usage.total_tokens == 0
    assert not proposal.usage.priced
    assert len(server.requests) == 1


def test_unknown_model_price_gives_null_cost(server, api):
    server.push(api.ok(GOOD_REPLY, input_tokens=10, output_tokens=20))
    agent = api.make(server.url, max_retries=0)
    agent.model = "model-without-price"
    proposal = agent.propose(context())
    assert proposal.usage.input_tokens == 10 and proposal.usage.cost_usd is None
    assert not proposal.usage.priced


def test_missing_usage_is_not_estimated(server):
    body = json.loads(OpenAIAPI.ok(GOOD_REPLY).body)
    del body["usage"]
    server.push(Reply(200, json.dumps(body).encode()))
    proposal = OpenAIAPI.make(server.url, max_retries=0).propose(context())
    assert proposal.source == KERNEL
    assert proposal.usage.total_tokens == 0 and proposal.usage.cost_usd is None


def test_repair_prompt_reaches_the_model(server, api):
    failed = AttemptFeedback("a1", "seed", "compile_error", compile_error="CompilationError: unique-marker-42")
    server.push(api.ok(GOOD_REPLY))
    api.make(server.url, max_retries=0).propose(context(recent=[failed]))
    _, user = api.prompt_of(server.requests[0])
    assert "repair a compile error" in user and "unique-marker-42" in user


def test_concurrent_proposals_share_one_client(server, api):
    server.push(*[api.ok(GOOD_REPLY) for _ in range(6)])
    agent = api.make(server.url, max_retries=0)
    with ThreadPoolExecutor(max_workers=6) as pool:
        proposals = list(pool.map(agent.propose, [context(i) for i in range(6)]))
    assert all(p.source == KERNEL for p in proposals)
    assert len(server.requests) == 6


def test_factory_honours_base_url_from_the_environment(server, caplog):
    caplog.set_level(logging.DEBUG)
    server.push(AnthropicAPI.ok(GOOD_REPLY), OpenAIAPI.ok(GOOD_REPLY))
    env = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "ANTHROPIC_BASE_URL": server.url}
    agent, why = make_agent("auto", environ=env, max_retries=0)
    assert agent.name == "anthropic" and ANTHROPIC_KEY not in why
    assert agent.propose(context()).source == KERNEL

    env = {"OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    agent, why = make_agent("auto", base_url=server.url + "/v1", environ=env, max_retries=0)  # --base-url wins
    assert agent.name == "openai" and server.url in why
    assert agent.propose(context()).source == KERNEL
    assert [r.path for r in server.requests] == [AnthropicAPI.path, OpenAIAPI.path]
    assert ANTHROPIC_KEY not in caplog.text and OPENAI_KEY not in caplog.text


def test_local_openai_compatible_server_needs_no_key(server):
    server.push(OpenAIAPI.ok(GOOD_REPLY))
    agent, why = make_agent("openai", base_url=server.url + "/v1", model="local-model", environ={}, max_retries=0)
    assert "local-model" in why and "cost unknown" in why
    proposal = agent.propose(context())
    assert proposal.source == KERNEL and proposal.usage.cost_usd is None
    assert server.requests[0].body["model"] == "local-model"
