"""The start-up check of an LLM agent: a bad endpoint is one line and exit 2 in seconds.

Against the scripted loopback server of test_agents_http (real SDK clients, no
network): a dead port, a refused key and an unknown model are refused before the
run directory exists; a healthy server passes (the control), and a rate limit or
a server error at that moment is not a reason to refuse.
"""

from __future__ import annotations

import logging
import socket
import time

import pytest
from optimize_helpers import tiny_seed
from test_agents_http import ANTHROPIC_KEY, MODEL, NO_CODE_REPLY, OPENAI_KEY, AnthropicAPI, LoopbackServer, OpenAIAPI, Reply

from tik_agent.agents.chat import EndpointError
from tik_agent.agents.factory import check_agent
from tik_agent.agents.offline import OfflineAgent
from tik_agent.cli import run as cli

ENV = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY}


@pytest.fixture
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


@pytest.fixture(params=[AnthropicAPI, OpenAIAPI], ids=["anthropic", "openai"])
def api(request):
    return request.param


def dead_url(api) -> str:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}" + ("/v1" if api is OpenAIAPI else "")


def url_of(api, server) -> str:
    return server.url + ("/v1" if api is OpenAIAPI else "")


# ----------------------------------------------------------------------------- the check itself


def test_a_healthy_server_passes_with_one_free_request_and_the_key_only_in_its_header(server, api, caplog):
    caplog.set_level(logging.DEBUG)
    server.push(api.models_ok())
    assert check_agent(api.make(server.url)) is None
    [request] = server.requests
    assert request.path == api.models_path and request.body == {}   # a lookup: no prompt, no tokens
    assert api.key in (request.headers.get("x-api-key"), request.headers.get("authorization", "")[7:])
    assert api.key not in caplog.text


@pytest.mark.parametrize("status, words", [(401, "refused the credentials (HTTP 401)"),
                                           (403, "refused the credentials (HTTP 403)"),
                                           (404, "HTTP 404 for model 'test-model': unknown model")])
def test_a_refused_key_or_an_unknown_model_is_refused_at_once(server, api, status, words):
    body = f'{{"error": {{"message": "scripted {status}, key {api.key}", "type": "x"}}}}'.encode()
    server.push(Reply(status, body))
    with pytest.raises(EndpointError) as info:
        check_agent(api.make(server.url, max_retries=4))
    message = str(info.value)
    assert words in message and f"--agent {api.name}, model {MODEL} at {url_of(api, server)}" in message
    assert "\n" not in message and api.key not in message
    assert len(server.requests) == 1   # never retried


def test_an_openai_server_that_does_not_list_the_model_is_refused(server):
    server.push(OpenAIAPI.models_ok("served-a", "served-b"))
    with pytest.raises(EndpointError, match="lists no model 'test-model' .it lists served-a, served-b."):
        check_agent(OpenAIAPI.make(server.url))


@pytest.mark.parametrize("status", [429, 503])
def test_a_transient_fault_at_the_check_is_a_note_not_a_refusal(server, api, status):
    server.push(Reply(status, b'{"error": {"message": "busy", "type": "x"}}'))
    note = check_agent(api.make(server.url, max_retries=4))
    assert f"HTTP {status}" in note and "retries" in note
    assert len(server.requests) == 1   # the check never waits out a backoff: the run's retries do


def test_a_dead_port_is_refused_within_seconds(api):
    t0 = time.monotonic()
    with pytest.raises(EndpointError, match="could not be reached"):
        check_agent(api.make(dead_url(api).removesuffix("/v1"), max_retries=4, timeout_s=300))
    assert time.monotonic() - t0 < 20


def test_a_silent_server_is_refused_after_the_short_time_out(server, api):
    slow = api.models_ok()
    slow.delay_s = 2.0
    server.push(slow)
    t0 = time.monotonic()
    with pytest.raises(EndpointError, match="no answer within 0.3 s"):
        check_agent(api.make(server.url, timeout_s=300), timeout_s=0.3)
    assert time.monotonic() - t0 < 2.0


def test_the_offline_agent_needs_no_check():
    assert check_agent(OfflineAgent()) is None


# ----------------------------------------------------------------------------- optimize


def optimize_against(url: str, api, tmp_path, monkeypatch, *more: str) -> tuple[int, float]:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    t0 = time.monotonic()
    code = cli(["optimize", *more, "--agent", api.name, "--model", MODEL, "--base-url", url,
                "--run-dir", str(tmp_path / "runs" / "r")])
    return code, t0


@pytest.mark.parametrize("fault", ["dead port", "401", "404"])
def test_optimize_refuses_a_bad_endpoint_in_one_line_before_the_audit(server, api, fault, tmp_path, monkeypatch,
                                                                       capsys):
    url = dead_url(api) if fault == "dead port" else url_of(api, server)
    if fault != "dead port":
        server.push(Reply(int(fault), b'{"error": {"message": "scripted", "type": "x"}}'))
    code, t0 = optimize_against(url, api, tmp_path, monkeypatch, "rmsnorm")
    elapsed = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert code == 2 and elapsed < 20, (code, elapsed, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: --agent "), err
    assert OPENAI_KEY not in err and ANTHROPIC_KEY not in err
    assert not (tmp_path / "runs").exists()   # no run directory left behind


@pytest.mark.slow
def test_optimize_against_a_healthy_server_passes_the_check_and_runs(server, tmp_path, monkeypatch, capsys):
    """The control: the same command against a server that answers runs the seed's audit and an attempt
    (one API: the wiring is shared, and each backend's check passes a healthy server above)."""
    api = OpenAIAPI
    seed = tiny_seed(tmp_path)
    server.push(api.models_ok(), api.ok(NO_CODE_REPLY))
    code, _ = optimize_against(url_of(api, server), api, tmp_path, monkeypatch, str(seed), "--iterations", "1")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [r.path for r in server.requests] == [api.models_path, api.path]
    assert (tmp_path / "runs" / "r" / "summary.json").is_file()
    assert "stopped (iterations) after 1 of 1 attempts" in out
