"""Choosing an agent, the records agents exchange, and the price table."""

import enum
import logging

import pytest

from tik_agent.agents.base import Agent, AgentContext, AttemptFeedback, Proposal, Usage, redact
from tik_agent.agents.factory import KINDS, display_url, make_agent
from tik_agent.agents.pricing import BUNDLED_PRICES, PriceTable
from tik_agent.errors import UsageError

ANTHROPIC_KEY = "sk-ant-api03-FACTORYKEY0123456789abcdef"
OPENAI_KEY = "sk-proj-FACTORYKEY0123456789abcdef"


@pytest.mark.parametrize(
    "environ, kind, reason",
    [
        ({"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY}, "anthropic", "ANTHROPIC_API_KEY is set"),
        ({"OPENAI_API_KEY": OPENAI_KEY}, "openai", "OPENAI_API_KEY is set"),
        ({"ANTHROPIC_API_KEY": "  ", "OPENAI_API_KEY": OPENAI_KEY}, "openai", "OPENAI_API_KEY is set"),
        ({}, "offline", "neither"),
        ({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, "offline", "neither"),
    ],
)
def test_auto_picks_by_available_keys_and_says_why(environ, kind, reason, caplog):
    caplog.set_level(logging.DEBUG)
    agent, why = make_agent("auto", environ=environ)
    assert isinstance(agent, Agent)
    assert agent.name == kind
    assert why.startswith(f"agent: {kind}") and reason in why
    for secret in (ANTHROPIC_KEY, OPENAI_KEY):
        assert secret not in why and secret not in caplog.text


def test_default_and_explicit_models():
    agent, why = make_agent("anthropic", environ={"ANTHROPIC_API_KEY": ANTHROPIC_KEY})
    assert agent.model and agent.model in why and "cost unknown" not in why
    agent, why = make_agent("openai", model="gpt-4.1-mini", environ={"OPENAI_API_KEY": OPENAI_KEY})
    assert agent.model == "gpt-4.1-mini" and "api.openai.com" in why
    agent, why = make_agent("offline", model="gpt-4.1", environ={})
    assert agent.model is None and "--model gpt-4.1 ignored" in why


def test_usage_errors():
    with pytest.raises(UsageError, match="known agents: auto, anthropic, openai, offline"):
        make_agent("gemini", environ={})
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        make_agent("anthropic", environ={"OPENAI_API_KEY": OPENAI_KEY})
    with pytest.raises(UsageError, match="OPENAI_API_KEY, or --base-url"):
        make_agent("openai", environ={})
    with pytest.raises(UsageError, match="--timeout"):
        make_agent("offline", timeout_s=0, environ={})
    assert KINDS[0] == "auto"


def test_display_url_hides_credentials():
    assert display_url("http://user:secret@localhost:8000/v1") == "http://localhost:8000/v1"
    assert display_url("https://api.openai.com/v1") == "https://api.openai.com/v1"
    agent, why = make_agent("openai", base_url="http://u:pw-secret@127.0.0.1:9/v1", environ={})
    assert "pw-secret" not in why


# ----------------------------------------------------------------------------- records


def test_usage_addition_defines_cost_clearly():
    assert Usage(10, 5, 0.5) + Usage(1, 2, 0.25) == Usage(11, 7, 0.75)
    assert (Usage(10, 5, None) + Usage(0, 0, None)).cost_usd is None
    mixed = Usage(10, 5, 0.5) + Usage(3, 4, None)
    assert mixed.cost_usd == 0.5 and not mixed.priced  # a lower bound, and marked as such
    assert (Usage() + Usage()).priced
    assert sum([Usage(1, 1, 0.1), Usage(2, 2, 0.2)], Usage(0, 0, 0.0)).total_tokens == 6


@pytest.mark.parametrize("kwargs", [{"input_tokens": -1}, {"output_tokens": 1.5}, {"cost_usd": -0.1}, {"cost_usd": float("nan")}])
def test_usage_validation(kwargs):
    with pytest.raises(ValueError, match="Usage"):
        Usage(**kwargs)


def test_proposal_redacts_and_validates():
    proposal = Proposal(
        source="x = 1\n",
        rationale=f"uses {OPENAI_KEY}",
        usage=Usage(),
        prompt=f"Authorization: Bearer {ANTHROPIC_KEY}",
        reply=f"x-api-key: {ANTHROPIC_KEY}",
    )
    for text in (proposal.rationale, proposal.prompt, proposal.reply):
        assert "FACTORYKEY" not in text and "[REDACTED]" in text
    with pytest.raises(ValueError, match="error"):
        Proposal(None, "", Usage(), "", "")
    with pytest.raises(ValueError, match="empty source"):
        Proposal("  \n", "", Usage(), "", "")


def test_redact_leaves_code_alone():
    code = "mask = offs < N  # sk- is not a key\nrisk-free = 1\n"
    assert redact(code) == code
    assert redact("token=abc12345xyz", secrets=["abc12345xyz"]) == "token=[REDACTED]"


class Outcome(str, enum.Enum):
    PARITY_FAILED = "parity_failed"


def test_attempt_feedback_accepts_enum_outcomes_and_rejects_unknown_ones():
    assert AttemptFeedback("a1", "seed", Outcome.PARITY_FAILED).outcome == "parity_failed"
    with pytest.raises(ValueError, match="outcome"):
        AttemptFeedback("a1", "seed", "great")
    with pytest.raises(ValueError, match="speedup"):
        AttemptFeedback("a1", "seed", "accepted", speedup=0.0)


def _context(**overrides):
    fields = dict(
        spec_text="", entry="f", seed_name="s", tunables={"A": [1, 2]}, seed_source="x = 1\n",
        parent_id="seed", parent_source="x = 1\n", parent_speedup=None, timing_table=[], recent=[],
        device="cpu (triton interpreter)", rng_seed=0, attempt_index=0,
    )  # fmt: skip
    fields.update(overrides)
    return AgentContext(**fields)


@pytest.mark.parametrize(
    "overrides, field",
    [({"entry": "not an identifier"}, "entry"), ({"parent_source": " "}, "parent_source"),
     ({"attempt_index": -1}, "attempt_index"), ({"tunables": {"A": []}}, "tunables"), ({"tunables": {"A": "12"}}, "tunables")],
)  # fmt: skip
def test_agent_context_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        _context(**overrides)


def test_agent_context_helpers():
    recent = [AttemptFeedback("a1", "seed", "slower"), AttemptFeedback("a2", "other", "accepted"), AttemptFeedback("a3", "seed", "timeout")]
    context = _context(recent=recent)
    assert context.last_from_parent().attempt_id == "a3"
    assert context.is_interpreter and not _context(device="cuda (NVIDIA H200)").is_interpreter
    assert isinstance(context.recent, tuple) and context.tunables == {"A": (1, 2)}


# ----------------------------------------------------------------------------- prices


def test_bundled_price_table():
    table = PriceTable.load()
    assert table.source == str(BUNDLED_PRICES)
    assert table.cost("gpt-4.1", 1_000_000, 1_000_000) == pytest.approx(10.0)
    assert table.cost("gpt-4.1-2025-04-14", 1_000_000, 0) == pytest.approx(2.0)  # dated snapshot
    assert table.cost("claude-sonnet-4-5-20250929", 0, 1_000_000) == pytest.approx(15.0)
    assert table.cost("some-local-model", 100, 100) is None
    assert table.cost(None, 100, 100) is None


def test_user_price_table_replaces_the_bundled_one(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text('[models."local"]\ninput = 0.5\noutput = 1.0\n')
    table = PriceTable.load(path)
    assert table.cost("local", 2_000_000, 1_000_000) == pytest.approx(2.0)
    assert table.cost("gpt-4.1", 1, 1) is None


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('[models."m"]\ninput = 1.0\n', "models.'m'"),
        ('[models."m"]\ninput = -1.0\noutput = 1.0\n', "non-negative"),
        ('[models."m"]\ninput = "cheap"\noutput = 1.0\n', "models.'m'"),
        ("models = 3\n", "expected a table"),
        ("[models\n", "price table"),
    ],
)
def test_bad_price_table_names_file_and_field(tmp_path, text, fragment):
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=str(path)) as info:
        PriceTable.load(path)
    assert fragment in str(info.value)


def test_missing_price_table(tmp_path):
    with pytest.raises(UsageError, match="file not found"):
        PriceTable.load(tmp_path / "nope.toml")
