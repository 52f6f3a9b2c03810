"""Heavy-ball momentum applied to a process seen at captures: the alternatives and fitted nulls of a momentum shape.

A training file's null is Brownian motion through its optimizer's momentum (simulate.heavy_ball_brownian); the
margin-edge alternatives and the fitted null are built at the capture level, and pass through the same filter here,
so that the rule's size and power are quoted at the data's physics (issue 30).
"""
from __future__ import annotations

import numpy as np

__all__ = ["momentum_filtered", "momentum_kurtosis_share", "WARMUP_MOMENTUM_TIMES"]

#: a heavy-ball buffer is warmed up over at most this many momentum times before the first capture
WARMUP_MOMENTUM_TIMES = 20


def momentum_filtered(X: np.ndarray, *, steps, momentum: float, labels, rng) -> np.ndarray:
    """Levels X (R, T, N, d) of a process seen at training steps `steps`, passed through heavy-ball momentum.

    The optimizer filters per-step noise e_s as v_s = beta v_{s-1} + (1 - beta) e_s, x_s = x_{s-1} + v_s (Polyak
    1964), so x_s = W_s - b_s: the unfiltered walk W (partial sums of e) less a lag b_s = sum_{j<=s} beta^(s-j+1) e_j,
    with b_{s+n} = beta^n b_s + L, L = beta sum_{q<n} beta^q e_{s+n-q}. Each capture interval's increment dX_i
    (n_i steps) is taken as the sum of n_i white per-step noises of variance sigma_i^2 = E dX_i^2 / n_i (per interval
    and walker, averaged over replicates and coordinates), and L is drawn from its Gaussian law given that sum:
    mean c dX_i, c = beta (1 - beta^n)/((1 - beta) n), variance sigma^2 [beta^2 (1 - beta^2n)/(1 - beta^2) -
    beta^2 (1 - beta^n)^2/((1 - beta)^2 n)]. So the capture-level increments keep the process's law (edges stay at
    their margins at lags well past 1/(1 - beta)), and at shorter lags are smoothed exactly as white noise through
    the optimizer would be, in O(T). The lag at the first capture has min(steps[0], WARMUP_MOMENTUM_TIMES /
    (1 - beta)) steps of noise at the first interval's variance behind it (a thinned file starts with the buffer
    running): the alternatives of a momentum shape carry the same filter as its null (issue 30).
    """
    st = np.asarray(steps, np.int64)
    if st.size != X.shape[1] or np.any(np.diff(st) <= 0):
        raise ValueError("momentum filter: steps must be strictly increasing, one per capture")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    X = np.asarray(X, np.float32)
    b = float(momentum)
    if b == 0:
        return X
    inc = np.diff(X, axis=1)  # (R, T - 1, N, d)
    n = np.diff(st).astype(float)
    pooled = inc.shape[0] * inc.shape[-1] >= 32  # enough values per (interval, walker) for its own variance
    var = (np.mean(inc ** 2, axis=(0, 3), keepdims=True)[0] if pooled
           else np.mean(inc ** 2, axis=(0, 2, 3), keepdims=True)[0]) / n[:, None, None]  # (T - 1, N or 1, 1)
    sd = np.sqrt(var).astype(np.float32)
    warm = int(min(st[0], np.ceil(WARMUP_MOMENTUM_TIMES / (1 - b))))
    lag = np.zeros_like(X)  # (R, T, N, d)
    z = rng.standard_normal(X.shape, dtype=np.float32)
    lag[:, 0] = z[:, 0] * sd[0] * np.float32(b * np.sqrt((1 - b ** (2 * warm)) / (1 - b * b)))
    for i in range(inc.shape[1]):
        m = n[i]
        c = b * (1 - b ** m) / ((1 - b) * m)
        v = b * b * (1 - b ** (2 * m)) / (1 - b * b) - b * b * (1 - b ** m) ** 2 / ((1 - b) ** 2 * m)
        lag[:, i + 1] = (np.float32(b ** m) * lag[:, i] + np.float32(c) * inc[:, i]
                         + z[:, i + 1] * sd[i] * np.float32(np.sqrt(max(v, 0.0))))
    return X - lag


def momentum_kurtosis_share(steps, times, momentum: float) -> float:
    """The share of an increment's excess kurtosis left after `momentum_filtered`, averaged over the intervals.

    The filtered displacement of interval i is D_i = sum_j a_ij dX_j + g_i (g Gaussian: the per-step noise inside
    the intervals), so for independent dX_j of equal excess kappa, excess(D_i) = kappa sum_j a_ij^4 v_j^2 /
    Var(D_i)^2, v_j the variance of dX_j (proportional to its share of the clock). The coefficients come from the
    filter's own recursion run on unit inputs. A kurtosis edge at a momentum shape is drawn with the margin edge
    divided by this share, so that the battery, which pools the intervals' standardised increments, sees the edge.
    """
    st, t = np.asarray(steps, np.int64), np.asarray(times, float)
    b = float(momentum)
    if b == 0:
        return 1.0
    n, v = np.diff(st).astype(float), np.diff(t) / (t[-1] - t[0])
    I = v.size
    sig2 = v / n  # per-step variance of each interval's noise
    warm = int(min(st[0], np.ceil(WARMUP_MOMENTUM_TIMES / (1 - b))))
    lag_a, lag_g = np.zeros(I), b * b * (1 - b ** (2 * warm)) / (1 - b * b) * sig2[0]  # lag = lag_a . dX + N(0, g)
    share = []
    for i in range(I):
        m = n[i]
        c = b * (1 - b ** m) / ((1 - b) * m)
        gv = sig2[i] * (b * b * (1 - b ** (2 * m)) / (1 - b * b) - b * b * (1 - b ** m) ** 2 / ((1 - b) ** 2 * m))
        new_a = b ** m * lag_a
        new_a[i] += c
        new_g = b ** (2 * m) * lag_g + max(gv, 0.0)
        a = lag_a - new_a  # D_i = dX_i - lag_i + lag_{i-1}
        a[i] += 1.0
        var = float(np.sum(a * a * v) + lag_g + new_g - 2 * b ** m * lag_g)  # the old lag's Gaussian part partly cancels
        share.append(float(np.sum(a ** 4 * v ** 2)) / var ** 2)
        lag_a, lag_g = new_a, new_g
    return float(np.mean(share))
