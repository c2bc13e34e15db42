"""What a run remembers outside git: attempts, the journal, the summary.

* ``attempts/<id>/``: one directory per attempt, files written once and then
  made read-only (candidate, parent, diff, prompt, reply, evaluator reports,
  the final record).  An attempt interrupted by a crash is redone under the
  same id; its partial directory is moved aside to ``<id>.interrupted-<n>``,
  never deleted.
* ``journal.jsonl``: append-only events, each line fsync'd before the loop
  goes on: ``session``, ``started``, ``proposed`` (token usage), ``finished``
  (the :class:`AttemptRecord`), ``stopped``.  A power cut can only tear the
  last line; it is dropped on the next open.
* ``summary.json``: rewritten atomically (temporary file, fsync, rename).

:class:`ResumeState` replays the journal: which attempts finished (the
iteration count), which started and never finished (to redo), the tokens spent
and the time already used.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from tik_agent.atomicfile import atomic_write_json, fsync_dir
from tik_agent.errors import UsageError
from tik_agent.outcomes import ATTEMPT_OUTCOMES, Outcome

SCHEMA = 1
JOURNAL_FILE = "journal.jsonl"
SUMMARY_FILE = "summary.json"
ATTEMPTS_DIR = "attempts"


# --------------------------------------------------------------------------- files


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: not found") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: unreadable: {exc}") from None


# --------------------------------------------------------------------------- records


@dataclass
class AttemptRecord:
    """One finished attempt, as the journal and ``attempts/<id>/record.json`` hold it."""

    attempt_id: str
    index: int
    parent_commit: str
    parent_id: str                  # attempt id of the parent kernel, or "seed"
    outcome: Outcome                # one of ATTEMPT_OUTCOMES
    reason: str | None = None
    speedup: float | None = None    # vs the seed (the confirming run's when accepted)
    speedup_vs_parent: float | None = None
    noise: float | None = None      # the deciding verdict's: the spread of both speedups
    commit: str | None = None       # the lineage commit, when accepted
    cases_passed: int = 0
    cases_total: int = 0
    rationale: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    agent: str = ""
    model: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    propose_s: float = 0.0
    eval_s: float = 0.0
    restored: bool = False          # rebuilt from its commit after a crash
    retimes: int = 0                # re-times taken because a verdict was too noisy to rank
    noisy: bool = False             # still too noisy after them: the outcome was decided under noise

    def to_dict(self) -> dict:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return {"schema": SCHEMA, **d}

    @classmethod
    def from_dict(cls, d: Mapping) -> "AttemptRecord":
        if d.get("schema") != SCHEMA:
            raise ValueError(f"attempt record schema {d.get('schema')!r} is not {SCHEMA}")
        fields = {k: v for k, v in d.items() if k != "schema"}
        fields["outcome"] = Outcome(fields["outcome"])
        if fields["outcome"] not in ATTEMPT_OUTCOMES:
            raise ValueError(f"{fields['outcome'].value!r} is a verdict, not an attempt's outcome")
        return cls(**fields)


@dataclass
class RunSummary:
    """``summary.json``: the run at a glance, rewritten after every attempt."""

    run_id: str
    seed: str
    agent: str
    model: str | None
    iterations: int
    iterations_limit: int
    accepted: int
    best_speedup: float
    best_commit: str | None
    best_attempt: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    elapsed_s: float
    stop_reason: str | None
    outcomes: dict[str, int]
    environment: dict
    updated: str = ""
    executor: str = "local"          # where this session evaluated: local slots or a Ray cluster
    # This session's slots per node: {"node", "slots", "evaluations", "busy_s", "lost",
    # "evaluations_per_min"}; empty in summaries written before it was recorded.
    nodes: list[dict] = field(default_factory=list)
    best_noise: float | None = None  # the spread of best_speedup (None: the seed, or not recorded)
    # Timing too noisy to rank candidates: the margin (the promotion floor) and one entry per
    # attempt re-timed for it, {"attempt_id", "retimes", "noise", "outcome", "resolved"}.
    noise_margin: float | None = None
    too_noisy: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokens"] = {"input": d.pop("input_tokens"), "output": d.pop("output_tokens")}
        return {"schema": SCHEMA, **d}

    @classmethod
    def from_dict(cls, d: Mapping) -> "RunSummary":
        if d.get("schema") != SCHEMA:
            raise ValueError(f"summary schema {d.get('schema')!r} is not {SCHEMA}")
        fields = {k: v for k, v in d.items() if k not in ("schema", "tokens")}
        return cls(input_tokens=d["tokens"]["input"], output_tokens=d["tokens"]["output"], **fields)

    def save(self, run_dir: Path) -> None:
        atomic_write_json(Path(run_dir) / SUMMARY_FILE, self.to_dict())

    @classmethod
    def load(cls, run_dir: Path) -> "RunSummary | None":
        path = Path(run_dir) / SUMMARY_FILE
        if not path.is_file():
            return None
        data = read_json(path)
        try:
            return cls.from_dict(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{path}: not a run summary ({type(exc).__name__}: {exc}); "
                             f"a resume rewrites it") from None


# --------------------------------------------------------------------------- journal


# Fault injection for the resume tests: "before:finished:2" SIGKILLs this process
# just before the second ``finished`` event is written (after that attempt's
# kernel was committed, before the journal knows it); "after:started:1" just
# after the first ``started``; "before:finished/accepted:1" just before the
# first ``finished`` event of an accepted attempt.  Unset in normal use.
CRASH_ENV = "TIK_AGENT_TEST_CRASH"


class Journal:
    """Append-only JSON lines, each fsync'd; thread-safe through the caller's lock."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / JOURNAL_FILE
        self._crash = _crash_point(os.environ.get(CRASH_ENV, ""))
        self._seen: dict[str, int] = {}

    def repair(self) -> None:
        """Drop a torn last line (a crash in the middle of a write)."""
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())

    def _maybe_crash(self, when: str, names: tuple[str, ...]) -> None:
        if self._crash is not None and any(self._crash == (when, n, self._seen[n]) for n in names):
            os.kill(os.getpid(), signal.SIGKILL)

    def append(self, event: str, **fields: Any) -> None:
        outcome = fields.get("record", {}).get("outcome") if isinstance(fields.get("record"), dict) else None
        names = (event,) if outcome is None else (event, f"{event}/{outcome}")
        for name in names:
            self._seen[name] = self._seen.get(name, 0) + 1
        self._maybe_crash("before", names)
        line = json.dumps({"schema": SCHEMA, "event": event, **fields}, sort_keys=True) + "\n"
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.path.parent)
        self._maybe_crash("after", names)

    def events(self) -> list[dict]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text().split("\n")
        out = []
        for number, line in enumerate(lines[:-1], 1):  # the part after the last newline is torn or empty
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{self.path}:{number}: corrupt journal line: {exc}") from None
            if not isinstance(event, dict) or not isinstance(event.get("event"), str):
                raise UsageError(f"{self.path}:{number}: corrupt journal line: not an event object")
            out.append(event)
        return out


def _crash_point(text: str) -> tuple[str, str, int] | None:
    when, _, rest = text.partition(":")
    event, _, count = rest.partition(":")
    return (when, event, int(count)) if when in ("before", "after") and event and count.isdigit() else None


@dataclass
class ResumeState:
    """What the journal says about a run, replayed in order."""

    finished: dict[str, AttemptRecord] = field(default_factory=dict)   # in finishing order
    unfinished: list[str] = field(default_factory=list)                # started, never finished
    indices: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    elapsed_s: float = 0.0
    sessions: int = 0

    @classmethod
    def replay(cls, events: Iterable[Mapping]) -> "ResumeState":
        state = cls()
        for number, e in enumerate(events, 1):
            try:
                state._apply(e)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise UsageError(f"{JOURNAL_FILE}: event {number} ({e.get('event')!r}) is malformed: "
                                 f"{type(exc).__name__}: {exc}") from None
        state._close_session()
        state.unfinished = [a for a in state._started if a not in state.finished]
        return state

    # Running time is the sum of the sessions' spans: from a ``session`` event to its
    # ``stopped`` (or, for a killed session, its last event).  Whatever is written between
    # sessions (a resume restoring a record) does not stretch a span over the idle gap.
    _started: dict[str, None] = field(default_factory=dict, repr=False)
    _session: list[float] = field(default_factory=list, repr=False)   # [start, last event] of the open one

    def _close_session(self) -> None:
        if self._session:
            start, last = self._session
            self.elapsed_s += max(0.0, last - start)
            self._session = []

    def _apply(self, e: Mapping) -> None:
        kind, t = e.get("event"), float(e.get("t", 0.0))
        if kind == "session":
            self._close_session()
            self.sessions += 1
            self._session = [t, t]
        elif self._session:
            self._session[1] = max(self._session[1], t)
        if kind == "started":
            self.indices[e["attempt_id"]] = int(e["index"])
            self._started[e["attempt_id"]] = None
        elif kind == "proposed":
            self.input_tokens += int(e.get("input_tokens", 0))
            self.output_tokens += int(e.get("output_tokens", 0))
            if e.get("cost_usd") is not None:
                self.cost_usd = (self.cost_usd or 0.0) + float(e["cost_usd"])
        elif kind == "finished":
            record = AttemptRecord.from_dict(e["record"])
            self.indices.setdefault(record.attempt_id, record.index)
            self.finished.setdefault(record.attempt_id, record)
        elif kind == "stopped":
            self._close_session()

    @property
    def next_index(self) -> int:
        return max(self.indices.values(), default=0) + 1


# --------------------------------------------------------------------------- attempts


def attempt_id(index: int) -> str:
    return f"a{index:04d}"


class AttemptStore:
    """``attempts/<id>/``: write-once, read-only files per attempt."""

    def __init__(self, run_dir: Path):
        self.root = Path(run_dir) / ATTEMPTS_DIR

    def dir(self, attempt: str) -> Path:
        return self.root / attempt

    def write(self, attempt: str, name: str, text: str) -> Path:
        """Create ``attempts/<id>/<name>`` once; a second write of the same file is a bug."""
        d = self.dir(attempt)
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        with open(path, "x") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        return path

    def write_json(self, attempt: str, name: str, data: Any) -> Path:
        return self.write(attempt, name, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def read(self, attempt: str, name: str) -> str | None:
        path = self.dir(attempt) / name
        return path.read_text() if path.is_file() else None

    def set_aside(self, attempt: str) -> Path | None:
        """Move a partial directory out of the way of a redo; returns where it went."""
        d = self.dir(attempt)
        if not d.exists():
            return None
        n = 1
        while (target := self.root / f"{attempt}.interrupted-{n}").exists():
            n += 1
        os.rename(d, target)
        fsync_dir(self.root)
        return target

    def interrupted(self, attempt: str) -> list[Path]:
        return sorted(self.root.glob(f"{attempt}.interrupted-*"))


def finished_records(run_dir: Path) -> list[AttemptRecord]:
    """Every finished attempt of a run, in finishing order (for reports and views)."""
    return list(ResumeState.replay(Journal(run_dir).events()).finished.values())
