"""``tik-agent optimize``: start or resume a run (the views of a run are in view_commands)."""

from __future__ import annotations

import dataclasses
import logging
import shlex
import shutil
from contextlib import contextmanager
from pathlib import Path

import typer

from tik_agent import figures
from tik_agent.backends import device as devices
from tik_agent.cli.output import EXIT_INTERRUPTED, EXIT_REJECTED, SANDBOX_HELP, check_sandbox, console, say
from tik_agent.cli.view_commands import RUNS_DIR
from tik_agent.errors import UsageError
from tik_agent.judge.seed_imports import check_seed_imports
from tik_agent.run.journal import RunSummary
from tik_agent.run.lineage import KERNEL_FILE, SEED_TAG, require_directory
from tik_agent.run.runconfig import Limits, RunConfig, format_duration, is_run_dir, new_run_id, parse_duration, utc_now
from tik_agent.spec import seeds

# The loop's own lines (an attempt finished, a parent set aside, the search exhausted): the
# live view shows them, so they are quieted while it runs.
LOOP_LOGGERS = ("tik_agent.search.optimize", "tik_agent.search.attempt", "tik_agent.search.scheduler")
_FIXED = {"agent": "--agent", "model": "--model", "base_url": "--base-url", "rng_seed": "--rng-seed", "device": "--device",
          "rounds": "--rounds", "eval_timeout_s": "--eval-timeout"}


def optimize(
    seed: str = typer.Argument(None, metavar="SEED",
                               help="A bundled seed name or a seed directory (omit with --resume)."),
    agent: str = typer.Option(None, metavar="AGENT", help="anthropic, openai, offline or auto.  [default: auto]"),
    model: str = typer.Option(None, metavar="MODEL", help="The model of an LLM agent."),
    base_url: str = typer.Option(None, metavar="URL", help="The API base URL of an LLM agent (e.g. a local server)."),
    iterations: int = typer.Option(None, metavar="N", help="Attempts for the whole run, across resumes.  [default: 20]"),
    time_budget: str = typer.Option(None, metavar="DURATION",
                                    help="Start no attempt after this much running time (all sessions), e.g. 8h, 90m; "
                                    "attempts already running finish first."),
    max_tokens: int = typer.Option(None, metavar="T", help="Stop once the agent has used this many tokens."),
    max_cost: float = typer.Option(None, metavar="USD", help="Stop once the agent has cost this many USD."),
    patience: int = typer.Option(None, metavar="K", help="Stop after this many attempts without a new best."),
    workers: int = typer.Option(None, metavar="W", help="Candidates evaluated in parallel (with --executor ray: "
                                "Ray actors, one per slot).  [default: 1]"),
    executor: str = typer.Option("local", metavar="KIND", help="Where evaluations run: local (this machine) or "
                                 "ray (actors on a Ray cluster; pip install 'tik-agent[ray]')."),
    ray_address: str = typer.Option(None, metavar="ADDR", help="The Ray cluster to join with --executor ray "
                                    "(else RAY_ADDRESS; else a local Ray instance for this run)."),
    run_dir: Path = typer.Option(None, metavar="DIR", help="The run directory.  [default: runs/<timestamp>-<seed>]"),
    resume: Path = typer.Option(None, metavar="DIR", help="Continue the run in this directory."),
    rng_seed: int = typer.Option(None, "--rng-seed", metavar="S", help="Seed of the search's random choices.  [default: 0]"),
    legacy_seed: int = typer.Option(None, "--seed", metavar="S", help="Deprecated: --rng-seed (in eval, --seed names "
                                    "the seed kernel)."),
    device: str = typer.Option(None, metavar="DEVICE", help="cpu (Triton interpreter), cuda or auto.  [default: auto]"),
    rounds: int = typer.Option(None, metavar="R", help="Timing rounds per evaluation.  [default: 5]"),
    eval_timeout: float = typer.Option(None, metavar="S", help="Seconds before an evaluation's worker is killed.  "
                                       "[default: per phase, 5x the seed's own time for it, at least 60 s]"),
    prompts: Path = typer.Option(None, metavar="DIR",
                                 help="A directory of prompt templates overriding the bundled ones."),
    prices: Path = typer.Option(None, metavar="FILE",
                                help="A TOML price table (USD per million tokens) replacing the bundled one."),
    sandbox: str = typer.Option(None, "--sandbox", metavar="MODE", help=SANDBOX_HELP + "  [default: auto]"),
    probes: Path = typer.Option(None, metavar="FILE", help="probes.json from scripts/gpu-check.sh on this device: "
                                "which tunable values keep bits here (the offline agent's priors)."),
    fresh_audit: bool = typer.Option(False, "--fresh-audit", help="Audit the seed again even if an earlier run of "
                                     "the same seed, spec, grid, device and versions left its audit in the cache "
                                     "($TIK_AGENT_CACHE, else $XDG_CACHE_HOME/tik-agent or ~/.cache/tik-agent); "
                                     "refresh that entry."),
    warm_cache: Path = typer.Option(None, "--warm-cache", metavar="DIR", help="A Triton cache the seed's audit "
                                    "starts from (a copy), such as the one scripts/gpu-check.sh warms for a node; "
                                    "the candidates' workers then start from the audit's."),
) -> None:
    """Search for faster kernels with the same bits; every step lands in a git lineage."""
    from tik_agent.run import rundir
    from tik_agent.search import setup
    from tik_agent.agents.factory import check_agent, make_agent
    from tik_agent.search.pool import EXECUTORS, open_executor, require_ray
    from tik_agent.search.interrupts import kill_sandboxes_on_interrupt, stop_on_signals
    from tik_agent.search.optimize import Optimizer

    rng_seed = _rng_seed(rng_seed, legacy_seed)
    _check_positive({"--iterations": iterations, "--workers": workers, "--rounds": rounds,
                     "--eval-timeout": eval_timeout, "--max-tokens": max_tokens, "--max-cost": max_cost,
                     "--patience": patience})
    if executor not in EXECUTORS:
        raise UsageError(f"--executor: unknown executor {executor!r}; expected one of {list(EXECUTORS)}")
    if ray_address is not None and executor != "ray":
        raise UsageError("--ray-address: only with --executor ray")
    if executor == "ray":
        require_ray()  # refused before anything is created
    if warm_cache is not None and not warm_cache.is_dir():
        raise UsageError(f"--warm-cache {warm_cache}: no such directory")
    given = {"agent": agent, "model": model, "base_url": base_url, "rng_seed": rng_seed, "device": device,
             "rounds": rounds, "eval_timeout_s": eval_timeout}
    limits = {"iterations": iterations, "max_tokens": max_tokens, "max_cost_usd": max_cost, "patience": patience,
              "time_s": parse_duration(time_budget) if time_budget is not None else None}
    if resume is not None:
        if run_dir is not None:
            raise UsageError("--run-dir and --resume: give one (--resume names the run directory)")
        path, config = resume, _resumed_config(resume, seed, given, limits, workers)
        if prompts is not None or prices is not None:
            config = dataclasses.replace(config, prompts_dir=_existing(prompts, "--prompts") or config.prompts_dir,
                                         prices_path=_existing(prices, "--prices") or config.prices_path)
        the_agent, explanation = make_agent(config.agent, model=config.model, base_url=config.base_url,
                                            seed=config.rng_seed, **_agent_files(config.prompts_dir, config.prices_path))
    else:
        if seed is None:
            raise UsageError("SEED: give a seed name or directory (see `tik-agent seeds`), or --resume DIR")
        spec = seeds.resolve(seed)
        check_seed_imports(spec.source)
        path = run_dir if run_dir is not None else RUNS_DIR / new_run_id(spec.name)
        rundir.check_new_run_dir(path)
        files = {"prompts_dir": _existing(prompts, "--prompts"), "prices_path": _existing(prices, "--prices")}
        the_agent, explanation = make_agent(agent or "auto", model=model, base_url=base_url, seed=rng_seed or 0,
                                            **_agent_files(**files))
        config = dataclasses.replace(_new_config(path, spec, the_agent, given, limits, workers), **files)
    mode = sandbox or config.sandbox.get("mode") or "auto"
    config = dataclasses.replace(config, sandbox={"mode": mode, **check_sandbox(mode).to_dict()})
    if config.device == "cuda" and executor == "local":  # one evaluation per GPU: refuse more workers than GPUs
        import os

        from tik_agent.search.executor import assign_gpus, torch_device_count, visible_devices

        assign_gpus(config.workers, visible_devices(os.environ, torch_device_count))
    if probes is not None:
        from tik_agent.spec.tunables import load_probes

        load_probes(_existing(probes, "--probes"), config.device)  # refused before anything is created
    # Last of the checks before anything is created: the one that needs the network.
    note = check_agent(the_agent)
    say("run directory: ", (str(path), "bold"))
    logging.getLogger("tik_agent").info("%s", explanation)
    if note is not None:
        logging.getLogger("tik_agent").warning("%s", note)
    for flag, value in (("--prices", prices), ("--max-cost", max_cost), ("--prompts", prompts)):
        if value is not None and the_agent.name == "offline":
            logging.getLogger("tik_agent").warning("%s: the offline agent has no prompts and no token costs; "
                                                   "it is kept with the run but has no effect", flag)
    try:
        with kill_sandboxes_on_interrupt():  # the seed's outputs and audit run in sandboxes
            session = (setup.reopen(path, config, fresh_audit, warm_cache) if resume is not None
                       else setup.create(path, config, fresh_audit, warm_cache))
    except KeyboardInterrupt:
        if not is_run_dir(path):
            say("interrupted before the run was made; nothing to resume", err=True)
        else:
            say(f"interrupted while preparing the run (the seed's outputs and its audit); continue it with: "
                f"{resume_command(path)}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if probes is not None:
        shutil.copyfile(probes, session.run.path / rundir.PROBES_FILE)
    pool = None
    try:
        pool = open_executor(executor, session, workers=config.workers, ray_address=ray_address)
        optimizer = Optimizer(session, the_agent, executor=pool)
        # Every evaluation's worker phases: the loop's own lines (or the live view) say enough.
        with stop_on_signals(optimizer), _quiet("tik_agent.progress"):
            if console.is_terminal:
                from tik_agent.view.live import LiveView

                with _quiet(*LOOP_LOGGERS), LiveView(console, optimizer):  # the live table says it
                    summary = optimizer.run()
            else:
                from tik_agent.view.heartbeat import Heartbeat

                with Heartbeat(optimizer):  # no live view: say every minute what is in flight
                    summary = optimizer.run()
    except KeyboardInterrupt:  # a second Ctrl-C: no summary was written by this session's end
        say(f"interrupted; continue the run with: {resume_command(path)}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if pool is not None:
            pool.close()
        session.close()
    _print_summary(path, summary)
    if summary.stop_reason == "interrupted":
        say(f"continue the run with: {resume_command(path)}")
        raise typer.Exit(EXIT_INTERRUPTED)
    if summary.stop_reason in ("error", "agent_unavailable"):
        raise typer.Exit(EXIT_REJECTED)


def _rng_seed(rng_seed: int | None, legacy: int | None) -> int | None:
    """``--rng-seed``, or the deprecated ``--seed`` with a warning (both: they must agree)."""
    if legacy is None:
        return rng_seed
    if rng_seed is not None and rng_seed != legacy:
        raise UsageError(f"--seed {legacy} and --rng-seed {rng_seed}: give --rng-seed only")
    say(("warning:", "yellow"), " optimize --seed is deprecated: use --rng-seed (in eval, --seed is the seed kernel)",
        err=True)
    return legacy


def resume_command(path: Path) -> str:
    return f"tik-agent optimize --resume {shlex.quote(str(path))}"


@contextmanager
def _quiet(*loggers: str):
    """``loggers`` at WARNING for the block."""
    logs = [logging.getLogger(name) for name in loggers]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for log, level in zip(logs, levels):
            log.setLevel(level)


def _check_positive(values: dict) -> None:
    """Zero is refused like a negative: a budget or a count of 0 is a mistake, not "the default"."""
    for flag, value in values.items():
        if value is not None and value <= 0:
            raise UsageError(f"{flag}: must be positive (got {value:g})")


def _existing(path: Path | None, option: str) -> str | None:
    if path is None:
        return None
    if not path.exists():
        raise UsageError(f"{option}: {path} does not exist")
    return str(path.resolve())


def _agent_files(prompts_dir: str | None, prices_path: str | None) -> dict:
    return {"prompts_dir": Path(prompts_dir) if prompts_dir else None,
            "prices_path": Path(prices_path) if prices_path else None}


def _resumed_config(path: Path, seed: str | None, given: dict, limits: dict, workers: int | None) -> RunConfig:
    """The run's own settings; budgets (and workers) given again extend them, nothing else may change."""
    require_directory(path)   # worded as every view words a missing directory
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a tik-agent run (no run.json)")
    config = RunConfig.load(path)
    if seed is not None and seeds.seed_directory(seed) != Path(config.seed_source):
        raise UsageError(f"{seed}: this run optimises {config.seed_name} ({config.seed_source})")
    for key, value in given.items():
        if value is not None and value != getattr(config, key):
            raise UsageError(f"{_FIXED[key]}: this run uses {getattr(config, key)!r}; a resumed run keeps it")
    return config.extended(limits=limits, workers=workers)


def _new_config(path: Path, spec, agent, given: dict, limits: dict, workers: int | None) -> RunConfig:
    device = devices.resolve(given["device"] or "auto")
    return RunConfig(
        run_id=path.name, seed_name=spec.name, seed_source=str(spec.directory.resolve()), agent=agent.name,
        model=agent.model, base_url=given["base_url"], rng_seed=given["rng_seed"] or 0, device=device,
        rounds=given["rounds"] or 5, warmup=1, eval_timeout_s=given["eval_timeout_s"] or None,
        workers=workers or 1, limits=Limits(**{k: v for k, v in limits.items() if v is not None}),
        binding=devices.binding(devices.probe_environment(device)), created=utc_now())


def _print_summary(path: Path, s: RunSummary) -> None:
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items())) or "none"
    cost = "unknown" if s.cost_usd is None else f"${s.cost_usd:.4f}"
    best = ((figures.speedup(s.best_speedup, s.best_noise), "bold green"), f" the seed ({s.best_attempt})") \
        if s.best_attempt != SEED_TAG else ("the seed itself",)
    say(f"stopped ({s.stop_reason}) after {s.iterations} of {s.iterations_limit} attempts in "
        f"{format_duration(s.elapsed_s)}: best ", *best,
        f", {s.accepted} accepted; outcomes: {outcomes}; "
        f"tokens {s.input_tokens} in / {s.output_tokens} out, cost {cost}")
    if s.too_noisy:
        unresolved = [n["attempt_id"] for n in s.too_noisy if not n["resolved"]]
        say(("warning:", "yellow"), f" timing too noisy to rank {len(s.too_noisy)} attempt(s) (noise above the "
            f"{s.noise_margin:.0%} margin): re-timed with more rounds"
            + (f"; still too noisy, not promoted: {', '.join(unresolved)}" if unresolved else "; all resolved"))
    if s.executor != "local":
        for n in s.nodes:
            say(f"  {s.executor} node {n['node']}: {len(n['slots'])} slot(s), {n['evaluations']} evaluations, "
                f"{n['evaluations_per_min']:.2f}/min" + (f", {n['lost']} lost" if n["lost"] else ""))
    if s.stop_reason == "exhausted":
        say("the search is exhausted: the agent has nothing new to try from any kernel of the frontier")
    say("run directory: ", (str(path), "bold"), f"  (best kernel: {path / KERNEL_FILE})")


def register(app: typer.Typer, cls: type) -> None:
    app.command("optimize", cls=cls)(optimize)
