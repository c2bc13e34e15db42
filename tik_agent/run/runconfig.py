"""A run's settings (``run.json``): what it optimises, how, within which budgets.

Written when a run is created and rewritten (atomically) when a resume extends
a budget.  The *binding* is the part of the measured environment a run may not
change: parity baselines and timings only hold on the device and versions that
produced them, so a resume on another environment is refused, naming the field.

What a resume may change: the budgets, ``workers`` and the ``--sandbox`` mode (the
isolation a session got is recorded again each time).  Everything else (seed,
agent, model, device, timing rounds, search seed) is the run's identity.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from tik_agent.atomicfile import atomic_write_json
from tik_agent.errors import UsageError
from tik_agent.run.journal import read_json

RUN_FILE = "run.json"
SCHEMA = 1

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"8h"``, ``"90m"``, ``"1h30m"``, ``"45s"`` or plain seconds -> seconds."""
    s = text.strip().lower().replace(" ", "")
    try:
        seconds = float(s)
    except ValueError:
        parts = _DURATION.findall(s)
        if not parts or "".join(a + b for a, b in parts) != s:
            raise UsageError(f"--time-budget: cannot read {text!r}; write e.g. 8h, 90m, 1h30m or 3600") from None
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"--time-budget: must be positive (got {text!r})")
    return seconds


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


@dataclass(frozen=True)
class Limits:
    """The budgets; ``None`` means no limit of that kind."""

    iterations: int = 20
    time_s: float | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    patience: int | None = None

    def __post_init__(self):
        if self.iterations < 1:
            raise UsageError(f"--iterations: must be at least 1 (got {self.iterations})")
        for name, flag in (("time_s", "--time-budget"), ("max_tokens", "--max-tokens"),
                           ("max_cost_usd", "--max-cost"), ("patience", "--patience")):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{flag}: must be positive (got {value})")


@dataclass(frozen=True)
class SearchSettings:
    """Parent selection and promotion knobs."""

    frontier_size: int = 4
    explore: float = 0.25        # probability of exploring a frontier member other than the best
    # A speedup over the parent must beat max(measured noise, this floor).  Five
    # rounds of the interpreter's wall clock on a shared 2-core machine swing by
    # several percent; a neutral change once passed a 2% floor twice in a row.
    noise_floor: float = 0.05
    # A verdict too noisy to rank a candidate (its noise above noise_floor, the gain between
    # the two: see search/promotion.py) is re-timed with twice the rounds, at most this many
    # times per attempt, before the candidate is set aside as decided under noise.
    noisy_retimes: int = 2

    def __post_init__(self):
        if self.frontier_size < 1:
            raise UsageError(f"frontier_size: must be at least 1 (got {self.frontier_size})")
        if not 0.0 <= self.explore <= 1.0:
            raise UsageError(f"explore: must be within [0, 1] (got {self.explore})")
        if self.noise_floor < 0:
            raise UsageError(f"noise_floor: must be >= 0 (got {self.noise_floor})")
        if self.noisy_retimes < 0:
            raise UsageError(f"noisy_retimes: must be >= 0 (got {self.noisy_retimes})")


@dataclass(frozen=True)
class RunConfig:
    run_id: str
    seed_name: str
    seed_source: str               # the seed directory the run was created from
    agent: str                     # resolved kind: offline, anthropic, openai
    model: str | None
    base_url: str | None
    rng_seed: int
    device: str
    rounds: int
    warmup: int
    eval_timeout_s: float | None   # None: per-phase limits derived from the seed's times
    workers: int
    limits: Limits
    search: SearchSettings = field(default_factory=SearchSettings)
    binding: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""
    prompts_dir: str | None = None   # a user's prompt templates (None: the bundled ones)
    prices_path: str | None = None   # a user's price table (None: the bundled one)
    # --sandbox mode and the isolation the last session got: {"mode", "level",
    # "mechanism", "layers"}; empty in runs made before it was recorded.
    sandbox: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.workers < 1:
            raise UsageError(f"--workers: must be at least 1 (got {self.workers})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["binding"] = dict(self.binding)
        d["sandbox"] = dict(self.sandbox)
        return {"schema": SCHEMA, **d}

    @classmethod
    def from_dict(cls, d: Mapping, where: str = RUN_FILE) -> "RunConfig":
        if not isinstance(d, Mapping):
            raise UsageError(f"{where}: malformed run settings: not a JSON object")
        if d.get("schema") != SCHEMA:
            raise UsageError(f"{where}: schema {d.get('schema')!r} is not {SCHEMA}")
        try:
            fields = {k: v for k, v in d.items() if k != "schema"}
            fields["limits"] = Limits(**fields["limits"])
            fields["search"] = SearchSettings(**fields.get("search", {}))
            return cls(**fields)
        except (KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{where}: malformed run settings: {type(exc).__name__}: {exc}") from None

    def save(self, run_dir: Path) -> None:
        atomic_write_json(Path(run_dir) / RUN_FILE, self.to_dict())

    @classmethod
    def load(cls, run_dir: Path) -> "RunConfig":
        path = Path(run_dir) / RUN_FILE
        return cls.from_dict(read_json(path), str(path))

    def extended(self, *, limits: Mapping[str, Any], workers: int | None) -> "RunConfig":
        """These settings with the budgets (and worker count) a resume gave again."""
        new_limits = replace(self.limits, **{k: v for k, v in limits.items() if v is not None})
        return replace(self, limits=new_limits, workers=workers or self.workers)

    def check_binding(self, current: Mapping[str, Any]) -> None:
        """Refuse an environment that differs in a bound field, naming it."""
        for key, bound in self.binding.items():
            now = current.get(key)
            if now != bound:
                raise UsageError(
                    f"this run is bound to {key}={bound!r} but this machine has {key}={now!r}: "
                    f"its parity baseline and timings do not hold here; start a new run instead")


def new_run_id(seed_name: str, now: datetime | None = None) -> str:
    now = now or datetime.now()
    return f"{now:%Y%m%d-%H%M%S}-{seed_name}"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def is_run_dir(path: Path) -> bool:
    return (Path(path) / RUN_FILE).is_file()
