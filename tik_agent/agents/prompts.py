"""Render the prompt templates in ``prompts/`` for one :class:`AgentContext`.

All prompt text lives in Jinja2 templates; this module only chooses a template
and prepares the data it sees.  The templates are:

* ``system.md.j2``: the system prompt (contract, rules, output format, device);
* ``propose.md.j2``: ask for a faster variant of the parent;
* ``repair_compile.md.j2``: the newest attempt from this parent failed to compile, or
  raised while running (the template says which: ``last.outcome``);
* ``repair_parity.md.j2``: the newest attempt from this parent changed the bits;

plus any partials they include.  A user directory, when given, is searched
first, so a user can replace one template or all of them.  Rendering is strict:
a template naming a variable that does not exist is an error, not an empty string.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jinja2

from tik_agent.agents.base import AgentContext, AttemptFeedback, redact
from tik_agent.bundled import bundled_dir
from tik_agent.errors import UsageError
from tik_agent.outcomes import Outcome

log = logging.getLogger(__name__)

SYSTEM = "system.md.j2"
PROPOSE = "propose.md.j2"
REPAIR_COMPILE = "repair_compile.md.j2"
REPAIR_PARITY = "repair_parity.md.j2"
REQUIRED = (SYSTEM, PROPOSE, REPAIR_COMPILE, REPAIR_PARITY)

# How much evaluator output reaches the model.  Compile errors keep their tail
# (the actual error sits at the bottom of a traceback); diffs keep their head.
MAX_ERROR_LINES = 40
MAX_ERROR_CHARS = 4000
MAX_DIFF_LINES = 80
MAX_RATIONALE_CHARS = 800


def bundled_prompts_dir() -> Path:
    """The ``prompts/`` directory shipped with tik-agent."""
    return bundled_dir("prompts")


@dataclass(frozen=True)
class RenderedPrompt:
    """The two messages sent to a model and the template that produced the second."""

    template: str
    system: str
    user: str

    def transcript(self) -> str:
        """Both messages as one text, for the journal."""
        return f"[system]\n{self.system}\n\n[user]\n{self.user}"


def choose_template(context: AgentContext) -> str:
    """repair_compile after a compile or runtime error from this parent, repair_parity after
    a parity failure, else propose (every other outcome)."""
    last = context.last_from_parent()
    if last is not None and last.outcome.is_error:
        return REPAIR_COMPILE
    if last is not None and last.outcome is Outcome.PARITY_FAILED:
        return REPAIR_PARITY
    return PROPOSE


class PromptRenderer:
    """Loads the templates once; :meth:`render` is safe to call from several threads."""

    def __init__(self, user_dir: Path | None = None, *, bundled_dir: Path | None = None) -> None:
        bundled = bundled_dir or bundled_prompts_dir()
        search = [bundled]
        if user_dir is not None:
            if not user_dir.is_dir():
                raise UsageError(f"prompts directory {user_dir}: not a directory")
            search.insert(0, user_dir)
        self.search_path = tuple(search)
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([str(p) for p in search]),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._templates = {name: self._load(name) for name in REQUIRED}
        if user_dir is not None:
            overridden = [n for n in REQUIRED if (user_dir / n).is_file()]
            log.info("prompts: %s from %s, the rest bundled", overridden or "none", user_dir)

    def _load(self, name: str) -> jinja2.Template:
        try:
            return self._env.get_template(name)
        except jinja2.TemplateNotFound:
            where = ", ".join(str(p) for p in self.search_path)
            raise UsageError(f"prompt template {name} not found in {where}") from None
        except jinja2.TemplateSyntaxError as err:
            raise UsageError(f"prompt template {err.filename or name}:{err.lineno}: {err.message}") from None

    def render(self, context: AgentContext) -> RenderedPrompt:
        name = choose_template(context)
        variables = template_variables(context)
        try:
            system = self._templates[SYSTEM].render(variables)
            user = self._templates[name].render(variables)
        except jinja2.TemplateNotFound as err:
            raise UsageError(f"prompt template {err.name} (included by {name}) not found") from None
        except jinja2.UndefinedError as err:
            raise UsageError(f"prompt template {name} or {SYSTEM}: {err.message}") from None
        return RenderedPrompt(name, redact(system), redact(user))


def template_variables(context: AgentContext) -> dict[str, object]:
    """The names every template may use (documented in prompts/README.md)."""
    last = context.last_from_parent()
    repairing = choose_template(context) != PROPOSE
    return {
        "spec_text": context.spec_text,
        "entry": context.entry,
        "seed_name": context.seed_name,
        "tunables": dict(context.tunables),
        "unproven": dict(context.unproven),
        "seed_source": context.seed_source,
        "parent_id": context.parent_id,
        "parent_is_seed": context.parent_source.strip() == context.seed_source.strip(),
        "parent_source": context.parent_source,
        "parent_speedup": context.parent_speedup,
        "timing_table": [_timing_row(row) for row in context.timing_table],
        "recent": [_feedback_view(f) for f in context.recent],
        "last": _feedback_view(last) if last is not None else None,
        "repair_of": last.attempt_id if repairing and last is not None else None,
        "device": context.device,
        "is_interpreter": context.is_interpreter,
        "attempt_index": context.attempt_index,
        **_spec_shape(context.spec_text),
    }


def _spec_shape(spec_text: str) -> dict[str, object]:
    """``layout``, ``outputs`` (names) and ``backward_entry`` (None without one) as the
    spec declares them; the defaults for a spec that does not parse."""
    try:
        data = tomllib.loads(spec_text)
    except tomllib.TOMLDecodeError:
        data = {}
    kernel = data.get("kernel") if isinstance(data.get("kernel"), dict) else {}
    several = data.get("outputs") if isinstance(data.get("outputs"), list) else []
    names = [o.get("name", "?") for o in several if isinstance(o, dict)]
    backward = data.get("backward") if isinstance(data.get("backward"), dict) else {}
    entry = backward.get("entry")
    return {"layout": kernel.get("layout", "rows"), "outputs": names or ["output"],
            "backward_entry": entry if isinstance(entry, str) else None}


def _timing_row(row: Mapping[str, object]) -> dict[str, object]:
    seed_ms, parent_ms = row.get("seed_ms"), row.get("parent_ms")
    ratio = None
    if isinstance(seed_ms, (int, float)) and isinstance(parent_ms, (int, float)) and parent_ms > 0:
        ratio = seed_ms / parent_ms
    return {
        "name": row.get("name", "?"),
        "shape": row.get("shape", "?"),
        "seed_ms": seed_ms,
        "parent_ms": parent_ms,
        "speedup": ratio,
    }


def _feedback_view(feedback: AttemptFeedback) -> dict[str, object]:
    rationale = feedback.rationale or ""
    if len(rationale) > MAX_RATIONALE_CHARS:
        rationale = rationale[:MAX_RATIONALE_CHARS].rstrip() + " [...]"
    return {
        "attempt_id": feedback.attempt_id,
        "parent_id": feedback.parent_id,
        "outcome": feedback.outcome.value,
        "reason": feedback.reason,
        "rationale": rationale or None,
        "speedup": feedback.speedup,
        "compile_error": _trim_error(feedback.compile_error),
        "first_mismatch": dict(feedback.first_mismatch) if feedback.first_mismatch else None,
        "source_diff": _head_lines(feedback.source_diff, MAX_DIFF_LINES) if feedback.source_diff else None,
    }


def _trim_error(text: str | None) -> str | None:
    if not text:
        return None
    text = _tail_lines(text.strip(), MAX_ERROR_LINES)
    if len(text) > MAX_ERROR_CHARS:
        text = "[...]" + text[-MAX_ERROR_CHARS:]
    return text


def _tail_lines(text: str, count: int) -> str:
    lines = text.splitlines()
    if len(lines) <= count:
        return text
    return f"[... {len(lines) - count} lines omitted]\n" + "\n".join(lines[-count:])


def _head_lines(text: str, count: int) -> str:
    lines = text.splitlines()
    if len(lines) <= count:
        return text
    return "\n".join(lines[:count]) + f"\n[... {len(lines) - count} lines omitted]"
