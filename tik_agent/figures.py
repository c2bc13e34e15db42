"""How a speedup is written for people: always with its spread.

A speedup is a ratio of two timed medians, and its spread is the evaluation's
noise: the workload-weighted relative interquartile range of the timings that
went into it (``Verdict.noise``).  Every view (the promotion log line, commit
titles, ``lineage``, ``show``, ``runs``, the live view, the summary line and the
report) writes speedups through this module, so that none can lose the spread.
A speedup whose noise was never recorded (a run made before it was) is written
with ``±?``.

When a kernel's parent is the seed there is one measurement, against the seed,
and so one figure: :func:`speedups` writes the figure against the parent only
when the parent is another kernel.
"""

from __future__ import annotations


def spread(noise: float | None) -> str:
    """``±4%``, ``±0.4%``, or ``±?`` when the noise is unknown."""
    if noise is None:
        return "±?"
    percent = 100.0 * noise
    return f"±{percent:.0f}%" if percent >= 1.0 or percent == 0.0 else f"±{percent:.1f}%"


def speedup(value: float, noise: float | None, digits: int = 3) -> str:
    """``2.957x ±4%``."""
    return f"{value:.{digits}f}x {spread(noise)}"


def speedups(vs_seed: float, vs_parent: float | None, noise: float | None, parent_is_seed: bool,
             parent: str = "its parent") -> str:
    """``2.957x ±4% the seed (1.210x ±4% its parent)``; one figure when the parent is the seed."""
    text = f"{speedup(vs_seed, noise)} the seed"
    if not parent_is_seed and vs_parent is not None:
        text += f" ({speedup(vs_parent, noise)} {parent})"
    return text
