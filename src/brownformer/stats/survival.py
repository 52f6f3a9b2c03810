"""Censored times to a target: Kaplan-Meier medians, their ratio with a bootstrap interval, the log-rank test.

A run's time to the target is the step of its first evaluation at the target ("event"); a run that
never gets there is right-censored at its last evaluation (the budget). Every function takes
``times`` (event or censoring step per run) and ``reached`` (True for an event).

- Kaplan-Meier median (Kaplan & Meier 1958): ``min {t : S(t) <= 1/2}`` of the product-limit
  survival function (``scipy.stats.ecdf`` on ``scipy.stats.CensoredData``); ``inf`` ("not reached")
  when ``S`` stays above 1/2 within the budget. With one common censoring time at or after every
  event (administrative censoring: every run has the same budget) the estimator is the empirical
  distribution with censored times set to ``inf``, so the median is the ``ceil(n/2)``-th order
  statistic; the bootstrap uses that identity (vectorised), checked against scipy in the tests.
- Ratio of medians (proposed / baseline) with a two-sample percentile bootstrap (Efron & Tibshirani
  1993, ch. 16): seeds resampled independently within each optimizer. A median that is not reached
  makes the ratio ``inf`` (proposed) or ``0`` (baseline); both not reached leaves it undefined
  (``nan``). Undefined resamples count against both verdicts: ``inf`` for the upper bound, ``0``
  for the lower one.
- Log-rank test (Mantel 1966; ``scipy.stats.logrank``): equality of the two time-to-target laws,
  one-sided towards the proposed optimizer reaching the target sooner.

JSON: a finite number, the string ``"inf"`` for an infinite value (a median not reached within the
budget, or a ratio bounded by one) and ``null`` for an undefined one (:func:`json_number`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

__all__ = ["km_median", "km_median_resampled", "MedianRatioResult", "median_ratio", "logrank_test", "json_number"]

_HALF = 0.5 + 1e-12  # S(t) <= 1/2 with rounding slack: 4 events of 8 give S = 0.5 exactly


def json_number(x) -> float | str | None:
    """A finite float, ``"inf"``/``"-inf"`` for infinities, ``None`` for undefined (NaN)."""
    x = float(x)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _clean(times, reached) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(times, float).ravel()
    r = np.asarray(reached, bool).ravel()
    if t.shape != r.shape:
        raise ValueError(f"times ({t.size}) and reached ({r.size}) differ in length")
    if np.any(~np.isfinite(t)):
        raise ValueError("times must be finite (a run that never reaches the target is censored at its last step)")
    return t, r


def km_median(times, reached) -> float:
    """Kaplan-Meier median time to the target; ``inf`` when the survival curve stays above 1/2.

    Args:
        times: Per run, the step at the target (``reached``) or the last step evaluated (censored).
        reached: Per run, whether it reached the target.

    Returns:
        ``min {t : S(t) <= 1/2}``; ``inf`` when not reached; ``nan`` without runs.
    """
    t, r = _clean(times, reached)
    if t.size == 0:
        return math.nan
    if not r.any():
        return math.inf
    sf = sps.ecdf(sps.CensoredData(uncensored=t[r], right=t[~r])).sf
    below = np.flatnonzero(sf.probabilities <= _HALF)
    return float(sf.quantiles[below[0]]) if below.size else math.inf


def _administrative(t: np.ndarray, r: np.ndarray) -> bool:
    """Every censored run is censored at or after the last event: KM = empirical law with censored = inf."""
    return not (~r).any() or not r.any() or t[~r].min() >= t[r].max()


def km_median_resampled(times, reached, index: np.ndarray) -> np.ndarray:
    """Kaplan-Meier median of each resample ``times[index[b]]`` (``index``: (B, n) integer array)."""
    t, r = _clean(times, reached)
    if _administrative(t, r):
        keyed = np.where(r, t, np.inf)[index]  # (B, n)
        k = math.ceil(index.shape[1] / 2) - 1  # S <= 1/2 once ceil(n/2) of n runs reached the target
        return np.partition(keyed, k, axis=1)[:, k]
    return np.array([km_median(t[i], r[i]) for i in index])


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den with inf / finite = inf, finite / inf = 0, inf / inf = nan (undefined)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(num, float) / np.asarray(den, float)


@dataclass(frozen=True)
class MedianRatioResult:
    """Ratio of Kaplan-Meier medians (proposed / baseline) with its percentile bootstrap interval."""

    estimate: float
    confidence_interval: tuple[float, float]
    confidence_level: float
    medians: tuple[float, float]  # (proposed, baseline)
    n: tuple[int, int]
    method: str = "ratio of Kaplan-Meier medians, two-sample percentile bootstrap over seeds"

    def to_dict(self) -> dict:
        return {"estimate": json_number(self.estimate),
                "confidence_interval": [json_number(c) for c in self.confidence_interval],
                "confidence_level": self.confidence_level,
                "medians": [json_number(m) for m in self.medians], "n": list(self.n), "method": self.method}


def median_ratio(proposed: tuple, baseline: tuple, *, confidence_level: float, n_resamples: int,
                 rng) -> MedianRatioResult:
    """KM median of ``proposed`` over KM median of ``baseline``, each a ``(times, reached)`` pair.

    Args:
        proposed: ``(times, reached)`` of the proposed optimizer's runs (one per seed).
        baseline: ``(times, reached)`` of the baseline's runs.
        confidence_level: Two-sided level of the percentile interval.
        n_resamples: Bootstrap resamples.
        rng: Seed or ``numpy.random.Generator``.

    Returns:
        :class:`MedianRatioResult`; the interval's ends are order statistics of the resampled ratios
        (``inf`` when enough resamples have an unreached proposed median).
    """
    rng = np.random.default_rng(rng)
    (tp, rp), (tb, rb) = _clean(*proposed), _clean(*baseline)
    if tp.size == 0 or tb.size == 0:
        return MedianRatioResult(math.nan, (math.nan, math.nan), confidence_level, (math.nan, math.nan),
                                 (int(tp.size), int(tb.size)))
    mp, mb = km_median(tp, rp), km_median(tb, rb)
    boot = _ratio(km_median_resampled(tp, rp, rng.integers(0, tp.size, (n_resamples, tp.size))),
                  km_median_resampled(tb, rb, rng.integers(0, tb.size, (n_resamples, tb.size))))
    a = (1 - confidence_level) / 2
    lo = np.quantile(np.where(np.isnan(boot), 0.0, boot), a, method="inverted_cdf")
    hi = np.quantile(np.where(np.isnan(boot), np.inf, boot), 1 - a, method="inverted_cdf")
    return MedianRatioResult(float(_ratio(mp, mb)), (float(lo), float(hi)), confidence_level, (mp, mb),
                             (int(tp.size), int(tb.size)))


def logrank_test(proposed: tuple, baseline: tuple, *, alternative: str = "greater"):
    """Log-rank test of equal time-to-target laws (``scipy.stats.logrank``).

    ``alternative="greater"``: the proposed optimizer's rate of reaching the target is higher (it gets
    there sooner); scipy's statistic is ``sum(O - E) / sqrt(sum V)`` for the proposed group (positive
    when it reaches the target more often than expected under the null).

    Returns:
        scipy's result (``statistic``, ``pvalue``), or ``None`` when either group is empty or no run
        of either reaches the target (no event: the test is undefined).
    """
    (tp, rp), (tb, rb) = _clean(*proposed), _clean(*baseline)
    if tp.size == 0 or tb.size == 0 or not (rp.any() or rb.any()):
        return None
    x = sps.CensoredData(uncensored=tp[rp], right=tp[~rp])
    y = sps.CensoredData(uncensored=tb[rb], right=tb[~rb])
    with np.errstate(invalid="ignore", divide="ignore"):  # zero variance (one event time for all): NaN, reported as such
        return sps.logrank(x, y, alternative=alternative)
