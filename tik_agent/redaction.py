"""Secrets never leave: redaction of key-shaped text, and the scrub of worker text.

Two users.  The agents redact prompts, replies and errors with :func:`redact`.  The
evaluator passes everything that comes back from a sandbox worker (stdout, stderr,
``result.json``, strings inside ``outputs.pt``) through :func:`scrub_worker_data`
before it can reach a verdict, the journal, a prompt or the screen: each string is
stripped of the parent's secret values, of anything shaped like a key, made plain
(:func:`tik_agent.plaintext.plain`: no control, format or bidi character but newline
and tab) and capped.  The worker cannot read those secrets under the OS isolation;
this is the second line, for a machine (or a bug) where it could.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from tik_agent.plaintext import plain

REDACTED = "[REDACTED]"
WORKER_TEXT_LIMIT = 8000
_MIN_SECRET = 8

# Names that look like credentials (also never passed to a sandboxed child).
SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|"
    r"^(ANTHROPIC|OPENAI|AWS|AZURE|GOOGLE|GCP|GCLOUD|GH|GITHUB|GITLAB|HF|HUGGING\w*|WANDB|"
    r"SSH|GPG|NPM|PYPI|TWINE|DOCKER|SLACK|STRIPE|DATABASE|REDIS|MONGO|POSTGRES|PG)_",
    re.IGNORECASE,
)
# Shapes of provider credentials: Anthropic ("sk-ant-..."), OpenAI ("sk-...",
# "sk-proj-..."), and anything sent as a bearer token.  Deliberately broad: a
# false positive costs a few characters of a prompt, a false negative leaks a key.
KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9][A-Za-z0-9_\-]{15,}"),
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]{16,}=*"),
    re.compile(r"(?i)\b((?:x-)?api[-_]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9._\-]{16,}"),
    # GitHub, AWS access key ids, Hugging Face, Slack: the shapes most often found in dotfiles.
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{30,}|"
               r"xox[abprs]-[A-Za-z0-9-]{10,})"),
)
# Values this common are settings, not secrets, even under a credential-like name.
_NOT_SECRET = frozenset({"true", "false", "none", "null", "localhost"})


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with every given secret and anything shaped like an API key replaced."""
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET:
            text = text.replace(secret, REDACTED)
    for pattern in KEY_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values worth hiding in this process's environment, longest first.

    Every value of a credential-like name, and every value anywhere shaped like a
    key; short and obviously harmless values are left out (they would redact
    ordinary words).
    """
    environ = os.environ if environ is None else environ
    found = set()
    for name, value in environ.items():
        if len(value) < _MIN_SECRET or value.lower() in _NOT_SECRET:
            continue
        if SECRET_NAME.search(name) or any(p.search(value) for p in KEY_PATTERNS):
            found.add(value)
    return sorted(found, key=len, reverse=True)


def scrub_text(text: str, secrets: Sequence[str] | None = None, limit: int = WORKER_TEXT_LIMIT) -> str:
    """Redact, make plain, then keep the last ``limit`` characters (redacting first, on the
    text as the worker wrote it, so that a secret is found whole and a cut never leaves part
    of one behind)."""
    text = plain(redact(text, secret_values() if secrets is None else secrets))
    return text if len(text) <= limit else "..." + text[-limit:]


def scrub_worker_data(value, limit: int = WORKER_TEXT_LIMIT):
    """``value`` (worker JSON, or a payload of tensors) with every string scrubbed.

    Dict keys and members of sets are strings too.  Tensors, numbers and bytes pass
    unchanged (bytes print as their repr, which escapes every control byte).
    """
    secrets = secret_values()

    def walk(v):
        if isinstance(v, str):
            return scrub_text(v, secrets, limit)
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        if isinstance(v, (set, frozenset)):  # torch.load(weights_only=True) accepts sets
            return type(v)(walk(x) for x in v)
        return v

    return walk(value)
