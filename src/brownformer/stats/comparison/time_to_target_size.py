"""Error rates of claim 4's verdict rule, simulated at the shape of the real comparison.

The rule (stats/comparison/time_to_target.py) calls the proposed optimizer faster ("supported") when the AFT
log-rank test at the margin (stats/comparison/survival.py: the proposed steps scaled by ``1 / margin`` against the
baseline's) rejects "ratio >= margin" one-sidedly at level ``(1 - confidence_level) / 2``, and not
faster ("not supported") when it rejects "ratio <= margin". Its size is the probability of
"supported" when the true ratio sits on the margin, the least favourable point of the null
"ratio >= margin"; the rate of "not supported" there is the other error rate. Both gate the verdict
(:data:`MAX_SIZE`).

Model of the times (log-normal scale family): the baseline's log steps are normal with the mean
and spread of the observed runs (log of the KM median; spread from the reached runs' interquartile
range, ``IQR / 1.349``, floored at :data:`MIN_LOG_SD`); the proposed optimizer's times are
``ratio`` times the baseline's. Each simulated run is then put through the same measurement as a
real one: rounded up to the next evaluation (``eval_every``), censored at the budget; the same
seeds per optimizer, the same test (stats/comparison/survival.py). Only the steps part of the rule is
simulated: the seconds condition of "supported" is a second condition (intersection-union), so it
can only lower the size.

Calibrated critical values (:func:`calibrated_critical`). With 8 seeds a side, runs read on a 5-step grid and some
censored, the log-rank statistic at the margin is not N(0, 1): at the default run's shapes the nominal one-sided
2.5% test said "not supported" 5.5-7.5% of the time on the margin, so the size gate left those models
inconclusive. The rule therefore takes its critical values from the statistic's own distribution at the
comparison's shape: the ``(1 - confidence_level) / 2`` and ``(1 + confidence_level) / 2`` quantiles of the
statistic simulated with the true ratio on the margin (a parametric-bootstrap calibration of the test), never
less extreme than the normal ones. The error rates that gate the verdict are then simulated afresh, from an
independent stream, at those critical values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scipy import stats as sps

from brownformer.stats.comparison.survival import km_median, scaled_logrank

__all__ = ["MIN_LOG_SD", "MAX_SIZE", "ComparisonShape", "RuleErrorRates", "calibrated_critical", "log_time_law",
           "nominal_critical", "rule_error_rates", "step_verdict"]

#: largest simulated error rate at the margin a decisive verdict may carry (claims 1-3 gate alike)
MAX_SIZE = 0.05

#: smallest log-scale spread simulated: seeds never agree to better than ~5% (one evaluation in 100 steps)
MIN_LOG_SD = 0.05
#: spread assumed when fewer than 3 runs reached the target (no IQR): about the vit AdamW seeds' spread
DEFAULT_LOG_SD = 0.15


def log_time_law(times, reached) -> tuple[float, float]:
    """``(mu, sigma)`` of the log-normal law simulated for a group of runs (module docstring)."""
    t, r = np.asarray(times, float), np.asarray(reached, bool)
    median = km_median(t, r)
    if not np.isfinite(median):  # median not reached: put it just past the budget
        median = 1.25 * float(t.max())
    logs = np.log(t[r])
    sd = (np.subtract(*np.percentile(logs, [75, 25])) / 1.349) if logs.size >= 3 else DEFAULT_LOG_SD
    return float(math.log(median)), float(max(sd, MIN_LOG_SD))


@dataclass(frozen=True)
class ComparisonShape:
    """The shape of one comparison that the simulations reproduce (module docstring).

    Attributes:
        n_proposed: Seeds of the proposed optimizer.
        n_baseline: Seeds of the baseline.
        mu: Mean of the baseline's log steps to the target.
        sigma: Standard deviation of the baseline's log steps.
        budget: Training steps (censoring point).
        eval_every: Evaluation spacing in steps (times are rounded up to it).
        margin: The rule's margin (the upper end of stats.margins.time_to_target_steps_ratio).
        confidence_level: Two-sided level, as in the rule (each one-sided test at half its complement).
        replicates: Simulated comparisons per true ratio (claim 4 uses stats.calibration_replicates).
    """

    n_proposed: int
    n_baseline: int
    mu: float
    sigma: float
    budget: float
    eval_every: float
    margin: float
    confidence_level: float
    replicates: int


@dataclass(frozen=True)
class RuleErrorRates:
    """Rates of each verdict of the steps rule at a true ratio, with the shape simulated."""

    n: tuple[int, int]
    budget: float
    eval_every: float
    mu: float
    sigma: float
    margin: float
    replicates: int
    rates: dict  # true ratio -> {"supported", "not supported", "inconclusive"}
    critical: tuple[float, float] = (math.nan, math.nan)  # (faster, slower) critical values of the statistic

    @property
    def size(self) -> float:
        """P(supported) with the true ratio on the margin."""
        return self.rates[self.margin]["supported"]

    @property
    def size_not_supported(self) -> float:
        """P(not supported) with the true ratio on the margin (the error of the other decisive verdict)."""
        return self.rates[self.margin]["not supported"]

    def to_dict(self) -> dict:
        return {"n": list(self.n), "budget": self.budget, "eval_every": self.eval_every, "log_mu": self.mu,
                "log_sigma": self.sigma, "margin": self.margin, "replicates": self.replicates, "size": self.size,
                "size_not_supported": self.size_not_supported, "max_size": MAX_SIZE, "critical": list(self.critical),
                "rates": {f"{k:g}": v for k, v in self.rates.items()}}


def _simulate(rng, n: int, mu: float, sigma: float, budget: float, every: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.ceil(np.exp(rng.normal(mu, sigma, n)) / every) * every
    reached = t <= budget
    return np.where(reached, t, budget), reached


def nominal_critical(confidence_level: float) -> tuple[float, float]:
    """``(faster, slower)`` critical values of the normal approximation: each one-sided test at half the
    complement of ``confidence_level``."""
    z = float(sps.norm.ppf(0.5 + confidence_level / 2))
    return z, -z


def step_verdict(proposed: tuple, baseline: tuple, *, margin: float, confidence_level: float,
                 grid: float, critical: tuple[float, float] | None = None) -> str:
    """The steps rule's verdict from the AFT log-rank statistic at the margin (module docstring): "supported"
    above ``critical[0]``, "not supported" below ``critical[1]`` (default: the normal critical values)."""
    z = scaled_logrank(proposed, baseline, margin, grid=grid)
    faster, slower = critical or nominal_critical(confidence_level)
    return "supported" if z > faster else "not supported" if z < slower else "inconclusive"


def calibrated_critical(shape: ComparisonShape, *, rng) -> tuple[float, float]:
    """``(faster, slower)`` critical values of the statistic at ``shape`` (module docstring): its simulated
    quantiles with the true ratio on the margin, each at least as extreme as the normal one; ``rng`` a seed or
    ``numpy.random.Generator``."""
    rng = np.random.default_rng(rng)
    sh = shape
    z = np.array([scaled_logrank(_simulate(rng, sh.n_proposed, sh.mu + math.log(sh.margin), sh.sigma, sh.budget,
                                           sh.eval_every),
                                 _simulate(rng, sh.n_baseline, sh.mu, sh.sigma, sh.budget, sh.eval_every), sh.margin,
                                 grid=sh.eval_every)
                  for _ in range(sh.replicates)])
    tail = (1 - sh.confidence_level) / 2
    # "higher"/"lower": an order statistic, never interpolated towards the centre; a verdict needs the observed
    # statistic strictly beyond it, so ties at a lumpy quantile do not count (the grid makes the statistic discrete)
    faster = max(nominal_critical(sh.confidence_level)[0], float(np.quantile(z, 1 - tail, method="higher")))
    slower = min(nominal_critical(sh.confidence_level)[1], float(np.quantile(z, tail, method="lower")))
    return faster, slower


def rule_error_rates(shape: ComparisonShape, *, rng, ratios=(0.5, 1.0),
                     critical: tuple[float, float] | None = None) -> RuleErrorRates:
    """Verdict rates of the steps rule at true ratios ``shape.margin`` and ``ratios`` (module docstring), at the
    critical values ``critical`` (default: the normal ones).

    Args:
        shape: The comparison simulated (seeds, the baseline's log-normal law, budget, grid, margin, level,
            replicates per true ratio).
        rng: Seed or ``numpy.random.Generator``.
        ratios: Further true ratios to simulate (e.g. power at 0.5, "not supported" rate at 1.0).
        critical: ``(faster, slower)`` critical values (calibrated_critical); None: the normal ones.
    """
    sh = shape
    rng = np.random.default_rng(rng)
    rates = {}
    for ratio in (sh.margin, *ratios):
        counts = {"supported": 0, "not supported": 0, "inconclusive": 0}
        for _ in range(sh.replicates):
            prop = _simulate(rng, sh.n_proposed, sh.mu + math.log(ratio), sh.sigma, sh.budget, sh.eval_every)
            base = _simulate(rng, sh.n_baseline, sh.mu, sh.sigma, sh.budget, sh.eval_every)
            counts[step_verdict(prop, base, margin=sh.margin, confidence_level=sh.confidence_level,
                                grid=sh.eval_every, critical=critical)] += 1
        rates[float(ratio)] = {k: v / sh.replicates for k, v in counts.items()}
    return RuleErrorRates((sh.n_proposed, sh.n_baseline), float(sh.budget), float(sh.eval_every), sh.mu, sh.sigma,
                          float(sh.margin), sh.replicates, rates,
                          tuple(critical or nominal_critical(sh.confidence_level)))
