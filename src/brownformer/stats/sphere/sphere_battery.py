"""The Brownian battery on the sphere, batched over R replicates (docs/METHODS.md, "Formulas").

Spherical Brownian motion with generator D * Laplace-Beltrami on the unit sphere S^(k-1) of a
k-dimensional space has, for any start, E<u_0, u_t> = exp(-(k-1) D t) and, for the second Gegenbauer
harmonic, E[(k cos^2 - 1)/(k - 1)] = exp(-2 k D t). LayerNorm outputs lie in the hyperplane
sum(z) = 0, so their sphere is S^(d-2) and k = d - 1 (the intrinsic dimension); other unit vectors
have k = d. These exact laws replace power fits to chord distances, which the plateau at 2 biases
toward sub-diffusion.

Real clocks: psi(t) = -ln E<u_0, u_t>/(k-1) = D t over real elapsed time; the variance ratio and the
Hurst exponent use psi of pairs of captures per unit of their real lag.
"""
from __future__ import annotations

import warnings

import numpy as np

from brownformer.stats.core.batch_stat import BatchStat
from brownformer.stats.diffusion.battery import MIN_TIME_POINTS, default_vr_lag, hurst_lags, log_slope, undefined
from brownformer.stats.core.bootstrap import ClusterBootstrap

__all__ = ["log_map", "span_dimension", "cosine_law", "sphere_variance_ratio", "sphere_hurst", "tangent_increments",
           "random_tangent_projection", "uniform_floors"]

#: |sum(u)| below this for every unit vector: it lies in LayerNorm's hyperplane (stored captures round to ~1e-3;
#: a random unit vector has |sum(u)| ~ 1)
HYPERPLANE_TOL = 2e-3


def log_map(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Riemannian log map on the unit sphere: Log_u(v) = theta / sin(theta) (v - cos(theta) u)."""
    c = np.clip(np.sum(u * v, axis=-1, keepdims=True), -1.0, 1.0)
    theta = np.arccos(c)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(theta > 1e-8, theta / np.sin(theta), 1.0)
    return f * (v - c * u)


def span_dimension(U: np.ndarray, hyperplane: bool | None = None) -> tuple[int, bool]:
    """(k, in_hyperplane): the dimension of the space whose unit sphere the walk lives on.

    `hyperplane` True (the sidecar says the vectors are LayerNorm outputs) or None with every vector
    satisfying |sum(u)| < HYPERPLANE_TOL: k = d - 1; else k = d.
    """
    d = U.shape[-1]
    if hyperplane is None:
        hyperplane = bool(d >= 3 and np.max(np.abs(U.sum(-1))) < HYPERPLANE_TOL)
    return (d - 1 if hyperplane else d), bool(hyperplane)


#: walkers are split into up to RATE_STRATA strata of similar rate, each of at least MIN_STRATUM walkers, for the
#: ensemble laws (harmonic ratio, variance ratio): each walker is a spherical Brownian motion at its own rate, and
#: the pooled mean cosine of different rates is a mixture of exponentials (no exponential: rates spread 10x read a
#: harmonic ratio of 0.80); within a stratum the rates differ little
RATE_STRATA = 4
MIN_STRATUM = 16


def rate_strata(U: np.ndarray, times: np.ndarray, v: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(indicators (R, N, S) float, S): walkers grouped by rank of their median squared tangent step per unit time
    (proportional to D_i under the null), S = min(RATE_STRATA, N // MIN_STRATUM), at least 1; `v`: the tangent
    increments when already at hand."""
    R, T, N, _ = U.shape
    S = max(1, min(RATE_STRATA, N // MIN_STRATUM))
    if S == 1:
        return np.ones((R, N, 1)), 1
    v = tangent_increments(U, times) if v is None else v
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # the median step, not the mean: a rare jump (a reset, the harmonic-ratio edge) must not rank a walker as
        # fast, or the stratification absorbs the very departure the harmonic ratio tests (0.90 read 0.93)
        rate = np.nan_to_num(np.nanmedian(np.sum(v * v, -1), axis=1), nan=np.inf)  # (R, N)
    stratum = np.argsort(np.argsort(rate, axis=1, kind="stable"), axis=1) * S // N
    return (stratum[..., None] == np.arange(S)).astype(np.float64), S


def _mean_finite(x: np.ndarray) -> np.ndarray:
    """Mean over the last axis (strata) of the finite values; NaN where none is finite."""
    ok = np.isfinite(x)
    with np.errstate(all="ignore"):
        return np.where(ok.any(-1), np.where(ok, x, 0.0).sum(-1) / ok.sum(-1), np.nan)


def uniform_floors(k: int, N: int) -> tuple[float, float]:
    """3-sigma floors of the mean first and second harmonic of N independent uniform pairs on S^(k-1)."""
    return 3.0 / np.sqrt(k * N), 3.0 * np.sqrt(2.0 / ((k + 2) * (k - 1) * N))


def cosine_law(U: np.ndarray, times: np.ndarray, k: int, boot: ClusterBootstrap,
               strata: tuple[np.ndarray, int] | None = None) -> tuple[BatchStat, BatchStat, BatchStat, dict]:
    """Exponent, D and second-harmonic ratio from E<u_0, u_t> and E[G_2(<u_0, u_t>)].

    psi(t) = -ln(mean cos)/(k-1) = D t for Brownian motion; the exponent is the OLS slope of ln psi on
    ln t over the times above the uniform floor (needs MIN_TIME_POINTS of them). The decay rates
    r_l = -ln G_l(t)/t (least squares through the origin) have r_2/r_1 = 2k/(k-1) for Brownian
    motion; harmonic ratio = (r_2/r_1)/(2k/(k-1)) (1 under the null; clock-free: the clock cancels).

    Args:
        U: (R, T, N, d) unit vectors; times: (T,); k: span dimension (`span_dimension`).
        strata: `rate_strata`'s result when already at hand.
    """
    R, T, N, d = U.shape
    tau = times[1:] - times[0]
    cos = _cos(U[:, :1], U[:, 1:])  # (R, N, n)
    g2 = (k * cos**2 - 1.0) / (k - 1.0)
    f1, f2 = uniform_floors(k, N)
    cm, gm = cos.mean(1), g2.mean(1)  # (R, n)
    use = cm > f1
    use2 = use & (gm > f2)
    n_use = use.sum(1)
    curves = {"mean_cos": cm, "second_harmonic": gm, "n_usable_times": n_use}
    method = ("slope of ln psi(t) on ln t (real elapsed time), psi = -ln E<u_0,u_t>/(k-1), times above the uniform "
              "floor; t-test with cluster-bootstrap SE; H0 exponent = 1")
    lam = k - 1.0
    mask = use[:, None, :]
    expo = boot.estimate(cos, lambda m: log_slope(tau, -np.log(m) / lam, mask))
    few = n_use < MIN_TIME_POINTS
    expo_est = type(expo)(np.where(few, np.nan, expo.estimate), np.where(few, np.nan, expo.standard_error), expo.n_groups)
    why = "" if not few.all() else (f"{int(n_use.max())} time points above the uniform floor < {MIN_TIME_POINTS}"
                                    if T - 1 >= MIN_TIME_POINTS else f"{T} time points < {MIN_TIME_POINTS}")
    exponent = BatchStat("msd_exponent", expo_est, expo_est.pvalue(1.0), 1.0, method, why_undefined=why,
                         n_points=int(n_use.min()))
    dest = boot.estimate(cos, lambda m: np.where(mask, -np.log(np.where(mask, m, 1.0)) / lam * tau, 0).sum(-1)
                         / np.where(mask, tau**2, 0).sum(-1))
    dcoef = BatchStat("diffusion_coefficient", dest, np.full(R, np.nan), np.nan, "least squares -ln E<u_0,u_t>/(k-1) = D t")
    target = 2 * k / (k - 1)
    # per stratum of similar walker rates (`rate_strata`): a mean of exponentials of different rates is no exponential
    I, S = strata or rate_strata(U, times)  # (R, N, S)
    n = tau.size
    F = np.concatenate([(cos[:, :, None, :] * I[..., None]).reshape(R, N, S * n),
                        (g2[:, :, None, :] * I[..., None]).reshape(R, N, S * n), I], axis=2)
    size = I.sum(1)  # (R, S) walkers per stratum
    f1s, f2s = uniform_floors(k, np.maximum(size, 1))
    with np.errstate(all="ignore"):
        cms = (cos[:, :, None, :] * I[..., None]).sum(1) / size[..., None]  # (R, S, n)
        gms = (g2[:, :, None, :] * I[..., None]).sum(1) / size[..., None]
    use2 = (cms > f1s[..., None]) & (gms > f2s[..., None])  # (R, S, n)
    m2 = use2[:, None]  # (R, 1, S, n)

    def ratio(m):
        cnt = m[..., 2 * S * n:][..., None]  # (..., S, 1)
        c1 = m[..., :S * n].reshape(*m.shape[:-1], S, n) / cnt
        c2 = m[..., S * n:2 * S * n].reshape(*m.shape[:-1], S, n) / cnt
        w = np.where(m2, tau, 0.0)
        with np.errstate(all="ignore"):
            r1 = (w * -np.log(np.where(m2, c1, 1.0))).sum(-1)
            r2 = (w * -np.log(np.where(m2, c2, 1.0))).sum(-1)
            per = np.where(use2.any(-1)[:, None], r2 / r1 / target, np.nan)  # (R, B, S)
            return _mean_finite(per)

    hest = boot.estimate(F, ratio)
    harm = BatchStat("harmonic_ratio", hest, hest.pvalue(1.0), 1.0,
                     "(r_2/r_1)/(2k/(k-1)) from Gegenbauer decay rates, mean over strata of walkers of similar rate; "
                     "t-test with cluster-bootstrap SE; H0 ratio = 1",
                     why_undefined="" if use2.any() else "second harmonic below its uniform floor at every time")
    return exponent, dcoef, harm, curves


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(R, N, t) cosines of unit vectors a, b (R, t, N, d) as 1 - |a - b|^2 / 2, which keeps 1 - cos
    accurate in float32 for small steps (1 - <a, b> would lose it to rounding)."""
    diff = a - b
    # summed in the input precision (float32 keeps |a - b|^2 to ~1e-6 relative), then widened: an einsum
    # with dtype=float64 casts the whole array first (3x slower)
    return 1.0 - 0.5 * np.einsum("rtnd,rtnd->rnt", diff, diff).astype(np.float64)


def _pair_cos(U: np.ndarray, q: int) -> np.ndarray:
    """(R, N, T-q): <u_t, u_{t+q}> for every t."""
    return _cos(U[:, :-q], U[:, q:])


def sphere_variance_ratio(U: np.ndarray, times: np.ndarray, k: int, boot: ClusterBootstrap,
                          strata: tuple[np.ndarray, int] | None = None) -> BatchStat:
    """Spherical VR(q) = mean_t[psi(t, t+q)/D_q(t)] / mean_t[psi(t, t+1)/D_1(t)], psi = -ln mean cos/(k-1).

    The real-time analogue of Lo-MacKinlay's VR for the exact cosine law: 1 for spherical BM at any
    capture spacing, < 1 for mean reversion, > 1 for persistence. Computed per stratum of walkers of similar rate
    (`rate_strata`) and averaged: walkers of different rates make -ln of the pooled mean cosine concave in the lag
    (rates spread 10x read 0.87 pooled).
    """
    R, T = U.shape[:2]
    q = default_vr_lag(T - 1)
    method = f"spherical variance ratio on real time, captures q={q} apart vs adjacent; H0 VR = 1"
    if T < MIN_TIME_POINTS:
        return undefined("variance_ratio", R, 1.0, f"{T} time points < {MIN_TIME_POINTS}", method)
    dq, d1 = times[q:] - times[:-q], np.diff(times)
    I, S = strata or rate_strata(U, times)  # per stratum of similar walker rates, then the mean over strata
    cq, c1 = _pair_cos(U, q), _pair_cos(U, 1)
    N, nq, n1 = U.shape[2], cq.shape[-1], c1.shape[-1]
    F = np.concatenate([(cq[:, :, None, :] * I[..., None]).reshape(R, N, S * nq),
                        (c1[:, :, None, :] * I[..., None]).reshape(R, N, S * n1), I], axis=2)

    def vr(m):
        cnt = m[..., -S:][..., None]
        with np.errstate(all="ignore"):
            a = m[..., :S * nq].reshape(*m.shape[:-1], S, nq) / cnt
            b = m[..., S * nq:S * (nq + n1)].reshape(*m.shape[:-1], S, n1) / cnt
            return _mean_finite(np.mean(-np.log(a) / dq, -1) / np.mean(-np.log(b) / d1, -1))

    est = boot.estimate(F, vr)
    return BatchStat("variance_ratio", est, est.pvalue(1.0), 1.0, method, extra={"q": q})


def sphere_hurst(U: np.ndarray, times: np.ndarray, boot: ClusterBootstrap) -> BatchStat:
    """Hurst exponent from mean_t psi(t, t+k) ~ (mean real lag_k)^{2H} (spherical aggregated variance)."""
    R, T = U.shape[:2]
    lags = hurst_lags(T - 1)
    method = f"slope/2 of ln mean psi on ln mean real lag, index lags {lags.tolist()}; H0 H = 1/2"
    if T < MIN_TIME_POINTS or lags.size < 3:
        return undefined("hurst", R, 0.5, f"{T} time points < {MIN_TIME_POINTS}", method)
    x = np.array([np.mean(times[k:] - times[:-k]) for k in lags])
    parts = [_pair_cos(U, int(k)) for k in lags]
    edges = np.cumsum([0] + [p.shape[2] for p in parts])
    F = np.concatenate(parts, axis=2)

    def g(m):
        psi = np.stack([np.mean(-np.log(m[..., a:b]), -1) for a, b in zip(edges[:-1], edges[1:])], -1)
        return 0.5 * log_slope(x, psi)

    est = boot.estimate(F, g)
    return BatchStat("hurst", est, est.pvalue(0.5), 0.5, method)


def tangent_increments(U: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Log_{u_t}(u_{t+1}) / sqrt(dt), shape (R, n, N, d); conditionally mean-zero and isotropic in the
    tangent plane under the null, so successive ones are uncorrelated."""
    return log_map(U[:, :-1], U[:, 1:]) * (1 / np.sqrt(np.diff(times))).astype(U.dtype)[None, :, None, None]


def random_tangent_projection(v: np.ndarray, U: np.ndarray, hyperplane: bool, rng) -> np.ndarray:
    """<v, w_t> with w_t the tangent part (in the hyperplane too) of one random unit vector per walker,
    normalised: exactly N(0, s^2) given u_t for isotropic tangent increments v ~ N(0, s^2 P). (R, n, N, 1)."""
    w = rng.standard_normal((v.shape[2], v.shape[3]))
    if hyperplane:
        w -= w.mean(-1, keepdims=True)
    w = w.astype(v.dtype)
    base = U[:, :-1]
    along = np.einsum("rtnd,nd->rtn", base, w)[..., None]  # <u_t, w>
    norm = np.sqrt(np.maximum(np.sum(w * w, -1) - along[..., 0] ** 2, 1e-30))[..., None]  # |P_u w|
    return (np.einsum("rtnd,nd->rtn", v, w)[..., None] - along * np.sum(v * base, -1, keepdims=True)) / norm
