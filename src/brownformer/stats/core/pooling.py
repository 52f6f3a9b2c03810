"""Count rules that pool file verdicts into a run verdict and run verdicts into a claim, with a size one can state.

A rejection count over units (files of a run, runs of a claim) is a test of the global null "every unit is
Brownian". With a calibrated false-rejection rate s_i per unit (the rule's size at the unit's shape):

- files of one run share a training path, so nothing is assumed about their dependence: by Markov's inequality
  P(N >= k) <= E[N]/k = sum_i s_i / k for the number N of false "not brownian" files. The run rule rejects when
  N >= k_run, the smallest k with sum_i s_i / k <= alpha (`markov_threshold`); its p-value is
  min(1, sum_i s_i / n_observed) (valid for any dependence).
- runs are independent training seeds, so the count M of false run rejections is Poisson-binomial with the
  runs' sizes a_r: P(M >= m) is exact (`poisson_binomial_tail`, a convolution). The claim rule rejects when
  M >= m_claim, the smallest m with that tail <= alpha; its p-value is the tail at the observed count.

"Supported" stays an intersection-union statement (every unit certified Brownian; Berger 1982): its size is
the largest of the units' equivalence sizes, bounded by 1 - the power gate, with no multiplicity correction.

Seeds as the unit (`seed_pool`): every claim's headline interval is over independent training runs of one
configuration, with what is nested in a seed averaged into one estimate per seed; fewer than MIN_SEEDS seeds do
not decide. Claims 1 and 2 call it per configuration; claim 3's pooling entry point calls the same function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy import stats as sps

__all__ = ["poisson_binomial_tail", "markov_threshold", "markov_pvalue", "independent_threshold",
           "smoothed_size", "seed_pool", "seed_interval_power", "SeedPoolResult", "MIN_SEEDS", "NESTING"]


def smoothed_size(k_not_brownian: float, n: int) -> float:
    """(k + 1)/(n + 2): a calibrated size of 0 in n replicates is not known to be 0 (Laplace's rule)."""
    return (float(k_not_brownian) + 1.0) / (int(n) + 2.0)


def poisson_binomial_tail(p, k: int) -> float:
    """P(sum_i B_i >= k) for independent B_i ~ Bernoulli(p_i), exact by convolution of the pmfs."""
    p = np.clip(np.asarray(p, float).ravel(), 0.0, 1.0)
    if k <= 0:
        return 1.0
    if k > p.size:
        return 0.0
    pmf = np.zeros(p.size + 1)
    pmf[0] = 1.0
    for q in p:
        pmf[1:] = pmf[1:] * (1 - q) + pmf[:-1] * q
        pmf[0] *= 1 - q
    return float(min(1.0, pmf[k:].sum()))


def markov_threshold(sizes, alpha: float) -> tuple[int | None, float]:
    """(k, size bound): the smallest count k with sum(sizes)/k <= alpha, and that bound; (None, 1.0) when even
    every unit rejecting would not reach it (k > number of units)."""
    s = np.asarray(sizes, float)
    total = float(np.sum(s))
    k = max(1, math.ceil(total / alpha - 1e-12))
    if k > s.size:
        return None, 1.0
    return k, total / k


def markov_pvalue(sizes, n_rejected: int) -> float | None:
    """min(1, sum(sizes) / n_rejected): a p-value of the count under any dependence (None when nothing rejected)."""
    if n_rejected <= 0:
        return None
    return float(min(1.0, np.sum(np.asarray(sizes, float)) / n_rejected))


def independent_threshold(sizes, alpha: float) -> tuple[int | None, float]:
    """(m, size): the smallest count m whose Poisson-binomial tail is <= alpha, and that tail; (None, 1.0) if none."""
    s = np.asarray(sizes, float)
    for m in range(1, s.size + 1):
        tail = poisson_binomial_tail(s, m)
        if tail <= alpha:
            return m, tail
    return None, 1.0


# ---------- seeds as the unit of inference (issue 32) ----------

#: fewest independent training runs (seeds) of one configuration a claim's headline interval may rest on. With two
#: seeds the t-interval has one degree of freedom (t_0.975 = 12.7): its width is the margin's, not the data's, and
#: the seed-to-seed spread it divides by is one difference. With fewer seeds a claim is "inconclusive" with the
#: reason "n seeds < minimum", whatever one seed's within-run interval says (one seed is not the population).
MIN_SEEDS = 3
#: how units nested inside a seed are handled, the same sentence in every claim that pools over seeds
NESTING = ("inputs, tokens, captures (and replicas) are averaged inside each seed into one estimate per seed; the "
           "interval is the Student t-interval over the per-seed estimates (df = seeds - 1)")


@dataclass(frozen=True)
class SeedPoolResult:
    """A mean over independent training runs (seeds) with its t-interval; undecidable below MIN_SEEDS seeds."""
    estimate: float
    confidence_interval: tuple[float, float]
    confidence_level: float
    n_seeds: int
    standard_error: float
    df: int
    per_seed: dict
    min_seeds: int
    method: str = "Student t-interval over per-seed estimates"
    nesting: str = NESTING

    @property
    def decidable(self) -> bool:
        """Enough seeds for the interval to decide (MIN_SEEDS)."""
        return self.n_seeds >= self.min_seeds

    @property
    def why_undecidable(self) -> str | None:
        return None if self.decidable else f"n seeds {self.n_seeds} < minimum {self.min_seeds}"

    def to_dict(self) -> dict:
        def clean(x):
            return float(x) if x is not None and math.isfinite(float(x)) else None
        return {"estimate": clean(self.estimate), "confidence_interval": [clean(c) for c in self.confidence_interval],
                "confidence_level": self.confidence_level, "n_seeds": self.n_seeds,
                "standard_error": clean(self.standard_error), "df": self.df,
                "per_seed": {str(k): clean(v) for k, v in self.per_seed.items()}, "min_seeds": self.min_seeds,
                "decidable": self.decidable, "why_undecidable": self.why_undecidable, "method": self.method,
                "nesting": self.nesting}


def seed_pool(per_seed: Mapping, *, confidence_level: float, min_seeds: int = MIN_SEEDS,
              nesting: str = NESTING) -> SeedPoolResult:
    """Mean of per-seed estimates with the t-interval over seeds: xbar +- t_{(1 + cl)/2, S - 1} s / sqrt(S).

    Seeds are independent training runs (initialisation and data order), so their estimates are i.i.d. draws of
    the configuration's value; everything inside a seed (inputs, tokens, captures, replicas) is one estimate.
    Below `min_seeds` seeds the interval is still computed where defined (S >= 2) but `decidable` is False: the
    claims call it inconclusive. Non-finite seed estimates are dropped (and not counted).

    Args:
        per_seed: seed label -> that seed's estimate.
        confidence_level: two-sided level of the interval.
        min_seeds: the fewest seeds that may decide (MIN_SEEDS).
        nesting: how units inside a seed were handled (recorded in claims.json).

    Returns:
        SeedPoolResult; a zero spread gives a point interval, one seed a NaN interval.
    """
    vals = {k: float(v) for k, v in per_seed.items() if v is not None and math.isfinite(float(v))}
    S = len(vals)
    nan = math.nan
    if S == 0:
        return SeedPoolResult(nan, (nan, nan), confidence_level, 0, nan, 0, {}, min_seeds, nesting=nesting)
    x = np.asarray(list(vals.values()), float)
    mean = float(x.mean())
    if S == 1:
        return SeedPoolResult(mean, (nan, nan), confidence_level, 1, nan, 0, vals, min_seeds, nesting=nesting)
    se = float(x.std(ddof=1) / math.sqrt(S))
    half = float(sps.t.ppf(0.5 + confidence_level / 2, S - 1)) * se
    return SeedPoolResult(mean, (mean - half, mean + half), confidence_level, S, se, S - 1, vals, min_seeds,
                          nesting=nesting)


def seed_interval_power(n_seeds: int, sd: float, true_value: float, margin, *, confidence_level: float,
                        min_seeds: int = MIN_SEEDS) -> float:
    """P(the seed-level t-interval lies inside `margin`) when each seed's estimate is N(true_value, sd^2).

    For an upper edge h the interval's top xbar + t s/sqrt(S) <= h iff (h - xbar) sqrt(S)/s >= t, and
    (h - xbar) sqrt(S)/s is noncentral t with S - 1 df and noncentrality (h - true_value) sqrt(S)/sd; a lower
    edge is the mirror image. With both edges finite the two events are nearly disjoint failures, so the power is
    1 - P(fail low) - P(fail high) (a lower bound). 0 below `min_seeds` (the rule does not decide).
    """
    if n_seeds < max(min_seeds, 2) or not (sd > 0 and math.isfinite(sd)):
        return 0.0 if n_seeds < max(min_seeds, 2) else float(margin[0] <= true_value <= margin[1])
    df, t = n_seeds - 1, float(sps.t.ppf(0.5 + confidence_level / 2, n_seeds - 1))
    fail = 0.0
    for edge, sign in ((margin[1], 1.0), (margin[0], -1.0)):
        if math.isfinite(edge):
            # noncentralities past +-1e4 are clipped: the cdf there is 0 or 1 to double precision (nct returns NaN)
            delta = float(np.clip(sign * (edge - true_value) * math.sqrt(n_seeds) / sd, -1e4, 1e4))
            fail += float(sps.nct.cdf(t, df, delta))
    return max(0.0, 1.0 - fail)
