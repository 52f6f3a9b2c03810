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
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["poisson_binomial_tail", "markov_threshold", "markov_pvalue", "independent_threshold",
           "smoothed_size"]


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
