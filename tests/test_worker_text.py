"""Text a candidate can influence reaches no reader with a control character but newline and tab.

Unit tests of the seam (:func:`tik_agent.plaintext.plain`) and of each door that
uses it (the worker's, the static rules', the agent's reply, the source shown by
``show``), then one run that evaluates the corpus file
``tests/adversarial/runtime/control_chars.py`` and looks for its escapes in
everything a person or a model reads afterwards.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from pathlib import Path

import pytest
import torch

from tik_agent.agents.base import AgentContext, Proposal, Usage
from tik_agent.agents.replies import parse_reply
from tik_agent.judge import workerbox
from tik_agent.plaintext import acting, plain
from tik_agent.redaction import REDACTED, scrub_text, scrub_worker_data
from tik_agent.sandbox.process import SandboxResult
from tik_agent.sandbox.static import check_source

CORPUS = Path(__file__).parent / "adversarial" / "runtime"

# One of each class the seam escapes.
HOSTILE = {
    "ESC (CSI erase line)": "\x1b[2K",
    "CR": "\r",
    "BEL": "\x07",
    "NUL": "\x00",
    "backspace": "\x08",
    "vertical tab": "\x0b",
    "form feed": "\x0c",
    "DEL": "\x7f",
    "C1 CSI": "\x9b",
    "C1 NEL": "\x85",
    "right-to-left override": "\u202e",
    "left-to-right isolate": "\u2066",
    "pop directional isolate": "\u2069",
    "right-to-left mark": "\u200f",
    "arabic letter mark": "\u061c",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "tag letter": "\U000e0069",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "lone surrogate": "\ud800",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_class_is_escaped_visibly(name):
    ch = HOSTILE[name]
    out = plain(f"a{ch}b")
    assert acting(out) == [] and acting(f"a{ch}b") == [ch[0]], name
    assert out.startswith("a\\") and out.endswith("b") and len(out) > 3  # a visible escape, nothing dropped
    out.encode("utf-8")  # a lone surrogate would raise here


def test_escapes_spell_the_code_point():
    assert plain("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"
    assert plain("\u202e") == "\\u202e" and plain("\U000e0041") == "\\U000e0041" and plain("\x9b") == "\\x9b"


def test_newline_tab_and_printable_text_survive():
    """Negative control: what a reader needs is untouched, and plain text is its own plain form."""
    text = "line one\n\tindented: é, ß, 中文, Ω, ü, — \u00a0nbsp, emoji \U0001f600, a \\x1b already escaped\n"
    assert plain(text) == text and acting(text) == []
    hostile = "".join(HOSTILE.values())
    assert plain(plain(hostile)) == plain(hostile)  # idempotent: a second door changes nothing


def test_the_worker_door_redacts_first_then_escapes_then_caps(monkeypatch):
    secret = "sk-ant-" + "q" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    text = f"\x1b[31m{secret}\x1b[0m\nnext\tline"
    cleaned = scrub_text(text)
    assert secret not in cleaned and REDACTED in cleaned and acting(cleaned) == []
    assert cleaned.endswith("\\x1b[0m\nnext\tline")
    flood = scrub_text("\U000e0041" * 5000)  # each becomes ten characters: the cap still holds
    assert len(flood) <= 8003 and acting(flood) == []


def test_from_worker_cleans_the_process_tails_and_every_string_in_its_files():
    proc = SandboxResult(1, False, None, 0.1, stdout="\x1b[32mpassed\x1b[0m\n", stderr="\u202eerr\tx\n")
    cleaned = workerbox.from_worker(proc)
    assert cleaned.stdout == "\\x1b[32mpassed\\x1b[0m\n" and cleaned.stderr == "\\u202eerr\tx\n"
    data = {"\x1bkey": ["\x07", ("\x9b",)], "set": {"\u2066"}, "n": 3, "t": torch.zeros(1), "b": b"\x1b"}
    out = workerbox.from_worker(data)
    assert "\\x1bkey" in out and out["\\x1bkey"] == ["\\x07", ("\\x9b",)] and out["set"] == {"\\u2066"}
    assert out["n"] == 3 and out["b"] == b"\x1b" and isinstance(out["t"], torch.Tensor)
    assert scrub_worker_data({"k": "\x1b"}) == {"k": "\\x1b"}


def test_an_outputs_file_that_cannot_be_loaded_is_named_in_our_words(tmp_path):
    """A forged pickle: torch's message quotes the global it refused (here an escape sequence);
    the parent's error names the file and the error's type only."""
    box = object.__new__(workerbox.WorkerBox)
    box.dir = tmp_path
    (tmp_path / "outputs.pt").write_bytes(b"\x80\x02c\x1b[2Kevil\x1b]52;c;aGk=\x07\nname\nq\x00.")
    with pytest.raises(workerbox.UnreadableWorkerFile) as err:
        box.outputs()
    assert str(err.value) == "outputs.pt cannot be read (UnpicklingError)" and err.value.__cause__ is None
    (tmp_path / "result.json").write_text("[" * 100_000)  # past the parser's depth: no result, no crash
    assert box.result() is None


def test_static_rule_messages_that_quote_the_source_are_plain():
    """The introspection rule quotes a format field from a string constant: raw before the seam."""
    src = 'import torch\nX = "{0.\x1b]52;c;aGk=\x07\u202e}"\n'
    messages = [v.message for v in check_source(src, "c.py")]
    field = next(m for m in messages if "format field" in m)
    assert "\\x1b]52;c;aGk=\\x07\\u202e" in field and all(acting(m) == [] for m in messages)


def test_an_agents_rationale_is_plain():
    reply = "Idea:\x1b[2K\u202e faster\n\n\tkept tab\n```python\nprint(1)\n```\n"
    parsed = parse_reply(reply, "rms_norm")
    assert acting(parsed.rationale) == [] and "\\x1b[2K\\u202e faster" in parsed.rationale
    assert "\tkept tab" in parsed.rationale


def test_show_prints_an_agents_source_with_its_escapes_visible(monkeypatch):
    from rich.console import Console

    from tik_agent.cli import output

    # A console of the test's own: setting the shared console's file would leave it, once the
    # test is undone, on this test's captured stdout, closed under every later test.
    buffer = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=buffer, markup=False))
    output.source('X = "\x1b[2J"\n\tpass\n')
    assert buffer.getvalue() == 'X = "\\x1b[2J"\n\tpass\n'


# ---------------------------------------------------------------- one run, end to end


class _WholeFile:
    """Answers attempt 1 with the corpus file (through the reply parser, as the chat agents
    do, with a hostile idea around it) and every later attempt with no code."""

    name = "scripted"
    model = "script-1"

    def __init__(self, source: str):
        self.reply = f"Idea:\x1b]0;owned\x07\u202e reversed\n\n```python\n{source}```\n"

    def propose(self, context: AgentContext) -> Proposal:
        if context.attempt_index > 0:
            return Proposal(None, "", Usage(0, 0, 0.0), "prompt", "reply", error="no code in the reply")
        parsed = parse_reply(self.reply, "rms_norm")
        return Proposal(parsed.source, parsed.rationale, Usage(0, 0, 0.0), "prompt", self.reply)


def _strings(value):
    """Every string inside decoded JSON (keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _no_acting(where: str, texts) -> None:
    for text in texts:
        assert acting(text) == [], f"{where}: {acting(text)!r} in {text[:200]!r}"


@pytest.mark.slow
def test_a_candidates_escapes_reach_no_reader_raw(run, capsys, caplog):
    from tik_agent.agents.prompts import PromptRenderer
    from tik_agent.cli import run as cli
    from tik_agent.cli.eval_commands import render
    from tik_agent.judge.records import Verdict
    from tik_agent.search import setup
    from tik_agent.outcomes import Outcome
    from tik_agent.run.journal import finished_records
    from tik_agent.run.runconfig import RunConfig
    from tik_agent.search.briefing import Briefing
    from tik_agent.search.frontier import Member
    from tik_agent.search.optimize import Optimizer

    caplog.set_level(logging.DEBUG, logger="tik_agent")
    agent = _WholeFile((CORPUS / "control_chars.py").read_text())
    session = setup.reopen(run, RunConfig.load(run).extended(limits={"iterations": 2}, workers=None))
    try:
        Optimizer(session, agent).run()
        records = finished_records(run)
        record = next(r for r in records if r.attempt_id == "a0001")
        # The next proposal from the seed, as the loop briefs it (the scripted agent's second
        # context may predate the verdict: proposals run ahead of evaluations).
        briefing = Briefing(session.run.spec, session.run.config.device, "CPU (test)", session.run.config.rng_seed,
                            session.run.lineage, session.run.store, threading.Lock())
        context = briefing.context(Member(record.parent_commit, "seed", 1.0), 3, records)
    finally:
        session.close()
    # Still rejected, for its own reason, with the escapes visible and newline and tab kept.
    assert record.outcome is Outcome.RUNTIME_ERROR, record.reason
    assert record.reason.startswith("runtime error in case ") and "ValueError: bad shape" in record.reason
    assert "\\x1b[32mpassed\\x1b[0m" in record.reason and "\\x1b]52;c;" in record.reason
    assert "\\u202eevil" in record.reason and "\\ud800" in record.reason
    assert "\nsecond line\tafter a tab" in record.reason            # negative control
    assert "\\x1b]0;owned\\x07\\u202e reversed" in record.rationale  # the agent's idea came through its door

    journal = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    _no_acting("journal", (s for e in journal for s in _strings(e)))
    _no_acting("summary.json", _strings(json.loads((run / "summary.json").read_text())))
    attempt = run / "attempts" / "a0001"
    for report in sorted(attempt.glob("*.json")):
        _no_acting(report.name, _strings(json.loads(report.read_text())))

    prompt = PromptRenderer().render(context)
    assert "second line\tafter a tab" in prompt.user and "\\x1b[32mpassed" in prompt.user
    _no_acting("prompt", [prompt.system, prompt.user])

    capsys.readouterr()
    assert cli(["show", str(run), "a0001"]) == 0
    assert cli(["lineage", str(run)]) == 0
    render(Verdict.from_dict(json.loads((attempt / "report.json").read_text())), "rmsnorm")  # what eval prints
    out = capsys.readouterr()
    # Rich prints a tab as spaces; the newline survives as a line of its own.
    assert "\\x1b[32mpassed" in out.out and "\nsecond line" in out.out and "after a tab" in out.out
    _no_acting("stdout", [out.out])
    _no_acting("stderr", [out.err])
    _no_acting("logs", [caplog.text])
