"""The gates a file's verdict must pass: the rule's size and power at its shape, read on exact binomial bounds.

A calibration cell estimates a rate from k of n simulated replicates. The gates read one-sided Clopper-Pearson
bounds at GATE_CONFIDENCE, never the point estimate (a point estimate of power compared with 0.9 passes about
20% of the time at a true power of 0.88):

- size: the rate of "not brownian" on Brownian motion, upper bound at most SIZE_GOAL[1];
- power (only to certify "brownian"): at every alternative the rate of a verdict other than "brownian" has a
  lower bound above POWER_GOAL, i.e. the equivalence test's own size is below 1 - POWER_GOAL with that confidence.
"""
from __future__ import annotations

__all__ = ["SIZE_GOAL", "POWER_GOAL", "GATE_CONFIDENCE", "cp_bounds", "size_decided", "power_decided"]

SIZE_GOAL = (0.0, 0.08)  # rate of "not brownian" on Brownian motion
POWER_GOAL = 0.9  # rate of a verdict other than "brownian" at each margin edge and on i.i.d. points
#: one-sided confidence of the Clopper-Pearson bounds the gates read
GATE_CONFIDENCE = 0.95


def cp_bounds(k: int, n: int, *, confidence: float = GATE_CONFIDENCE) -> tuple[float, float]:
    """One-sided Clopper-Pearson (lower, upper) bounds of a proportion k/n, each at `confidence`
    (scipy.stats.binomtest, two-sided level 2 confidence - 1)."""
    from scipy.stats import binomtest
    if n <= 0:
        return 0.0, 1.0
    ci = binomtest(int(k), int(n)).proportion_ci(2 * confidence - 1, method="exact")
    return float(ci.low), float(ci.high)


def power_decided(not_certified: int, n: int, *, goal: float = POWER_GOAL) -> bool:
    """True when the bounds of a power estimated as not_certified / n both lie on one side of `goal`."""
    lo, hi = cp_bounds(not_certified, n)
    return bool(lo > goal or hi < goal)


def size_decided(not_brownian: int, n: int, *, goal: float = SIZE_GOAL[1]) -> bool:
    """True when the bounds of a size estimated as not_brownian / n both lie on one side of `goal`."""
    lo, hi = cp_bounds(not_brownian, n)
    return bool(hi < goal or lo > goal)
