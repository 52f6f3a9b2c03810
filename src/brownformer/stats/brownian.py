"""Claim 3: is a trajectory (T, N, d) a Brownian motion? The full battery and a classification.

Euclidean trajectories: a common drift b_t (mean increment over walkers at each step) is
removed first (SGD has drift; STATISTICS.md 2.0), and its size is tested separately. On the
sphere the exact spherical-BM laws replace MSD power fits (sphere.py), and increments are the
tangent vectors Log_{u_t}(u_{t+1}), whose conditional mean is exactly zero under the null.

Every quantity is decided the same way: it counts against "brownian" only when its test rejects
at `alpha` AND its point estimate lies outside the pre-registered margin (config.DEFAULT_MARGINS
plus BATTERY_MARGINS), so that huge samples do not turn negligible deviations into verdicts.
"""
from __future__ import annotations

import logging

import numpy as np

from . import battery as B
from .battery import log_slope
from .bootstrap import WalkerBootstrap
from .results import TestResult, to_jsonable
from .sphere import cosine_law, gram_offdiagonal, log_map, sphere_hurst, sphere_variance_ratio
from .trajectory_io import validate_trajectory

log = logging.getLogger(__name__)

__all__ = ["analyze_trajectory", "analyze_noise", "CLASSES", "BATTERY_MARGINS", "default_margins"]

CLASSES = ("brownian", "subdiffusive", "superdiffusive", "mean-reverting", "heavy-tailed", "correlated", "non-gaussian")

#: margins for quantities config.DEFAULT_MARGINS does not list (a value inside counts as Brownian)
BATTERY_MARGINS = {
    "tail_index_ratio": (0.8, 10.0),  # Hill index relative to matched Gaussian surrogates
    "increment_autocorrelation": (-0.1, 0.1),  # lag-1; AR(1) increments with |phi| <= 0.1 pass
    "volatility_autocorrelation": (-0.1, 0.1),
    "drift_fraction": (0.0, 0.1),  # share of the final MSD explained by a common drift
    "msd_exponent_raw": (0.9, 1.1),
}


def default_margins(margins: dict | None = None) -> dict:
    from brownformer.config import DEFAULT_MARGINS
    m = {**DEFAULT_MARGINS, **BATTERY_MARGINS}
    m.update({k: tuple(v) for k, v in (margins or {}).items()})
    return m


def _subsample(X: np.ndarray, max_walkers: int, rng: np.random.Generator) -> np.ndarray:
    N = X.shape[1]
    if max_walkers and N > max_walkers:
        idx = np.sort(rng.choice(N, size=max_walkers, replace=False))
        return X[:, idx]
    return X


def _standardize(e: np.ndarray) -> np.ndarray:
    """Divide by the cross-sectional sd at each step and coordinate (handles schedules, anisotropy)."""
    sd = e.std(axis=1, ddof=1, keepdims=True)
    return e / np.where(sd > 0, sd, 1.0)


def _gauss_inputs(z: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """z (n, N, k) standardised -> (one coordinate per walker, all steps), per-walker (mean z^2, mean z^4)."""
    n, N, k = z.shape
    pick = rng.integers(0, k, size=N)
    indep = z[:, np.arange(N), pick].ravel()
    mom = np.stack([np.mean(z**2, axis=(0, 2)), np.mean(z**4, axis=(0, 2))], axis=1)
    return indep, mom


def _vr_lags(n: int) -> np.ndarray:
    lags = 2 ** np.arange(0, 8)
    return lags[lags <= max(1, n // 2)]


def _curvature_lags(n: int) -> np.ndarray:
    return np.arange(1, min(n - 1, max(3, n // 2)) + 1)


def _curvature(qs: np.ndarray, msd: np.ndarray) -> dict:
    """Early- and late-half log-log slopes of the time-averaged MSD (or psi_bar on the sphere).

    A power law (fBm) has equal slopes; saturation (OU, mean reversion) flattens the late half.
    """
    if qs.size < 3 or np.any(~np.isfinite(msd)) or np.any(msd <= 0):
        return {"early_slope": np.nan, "late_slope": np.nan}
    h = (qs.size + 1) // 2
    return {"early_slope": float(log_slope(qs[:h].astype(float), msd[:h])),
            "late_slope": float(log_slope(qs[h - 1:].astype(float), msd[h - 1:])), "curvature_lags": qs.tolist()}


def _euclidean_part(X, times, boot, rng, res, supplements=True):
    T, N, d = X.shape
    tau = times[1:] - times[0]
    dt = np.diff(times)
    inc = np.diff(X, axis=0)  # (n, N, d)
    drift = inc.mean(axis=1, keepdims=True)  # (n, 1, d) common drift per step
    E = inc - drift
    Y = np.concatenate([np.zeros((1, N, d)), np.cumsum(E, axis=0)])  # drift-removed levels
    res["drift"] = B.drift_test(X[-1] - X[0], rng=rng)
    raw_sq = np.sum((X[1:] - X[0]) ** 2, axis=-1).T  # (N, n)
    res["msd_exponent_raw"], _, _ = B.msd_exponent(raw_sq, tau, boot, name="msd_exponent_raw", dim=d)
    sq = np.sum(Y[1:] ** 2, axis=-1).T
    res["msd_exponent"], res["diffusion_coefficient"], curve = B.msd_exponent(sq, tau, boot, dim=d)

    def lagged(q):  # (N,) mean over t of |Y_{t+q} - Y_t|^2 / (t_{t+q} - t_t)
        return B.lagged_msd(Y, times, q)

    q = B.default_vr_lag(T - 1)
    res["variance_ratio"] = B.variance_ratio(lagged(q), lagged(1), boot, q=q)
    # own fixed seed: switching supplements off (calibration) must not shift the shared random stream
    curve_extra = {"arch_variance_ratio": B.arch_variance_ratio(Y, E, q, rng=0)} if supplements else {}
    lags = _vr_lags(T - 1)
    if lags.size >= 2:
        res["hurst"] = B.hurst_from_vr(np.stack([lagged(int(k)) for k in lags], 1) * lags, lags, boot)
    qs = _curvature_lags(T - 1)
    curve.update(_curvature(qs, np.array([np.mean(lagged(int(k)) * k) for k in qs])))
    curve.update(curve_extra)
    e = E / np.sqrt(dt)[:, None, None]
    z = _standardize(e)
    return e, z, curve


def _sphere_part(X, times, boot, rng, res):
    T, N, d = X.shape
    U = X / np.linalg.norm(X, axis=-1, keepdims=True)
    tau = times[1:] - times[0]
    expo, dres, harm, curve = cosine_law(U, tau, boot)
    res["msd_exponent"], res["diffusion_coefficient"], res["harmonic_ratio"] = expo, dres, harm
    res["variance_ratio"] = sphere_variance_ratio(U, B.default_vr_lag(T - 1), boot)
    lags = _vr_lags(T - 1)
    if lags.size >= 2:
        res["hurst"] = sphere_hurst(U, lags, boot)
    qs = _curvature_lags(T - 1)
    curve.update(_curvature(qs, np.array([-np.log(np.mean(np.sum(U[k:] * U[:-k], -1))) for k in qs])))
    v = log_map(U[:-1], U[1:]) / np.sqrt(np.diff(times))[:, None, None]  # tangent increments (n, N, d)
    # random unit direction in each tangent plane: <v, w> is exactly N(0, s^2) for v ~ N(0, s^2 P_u)
    w = rng.standard_normal(v.shape)
    w -= np.sum(w * U[:-1], -1, keepdims=True) * U[:-1]
    w /= np.linalg.norm(w, axis=-1, keepdims=True)
    z = _standardize(np.sum(v * w, -1, keepdims=True))
    g = gram_offdiagonal(U)
    D = res["diffusion_coefficient"].estimate
    pred = g[0] * np.exp(-2 * (d - 1) * D * (times - times[0])) if np.isfinite(D) else np.full(T, np.nan)
    cross = np.sum(v.sum(1) ** 2, -1) - np.sum(v**2, axis=(1, 2))
    curve.update({"gram_offdiagonal": g.tolist(), "gram_offdiagonal_bm_prediction": pred.tolist(),
                  "cross_walker_increment_correlation": float(cross.sum() / ((N - 1) * np.sum(v**2)))})
    return v, z, curve


def _status(est, ci, margin):
    lo, hi = margin
    if not np.isfinite(est):
        return "undefined"
    if np.all(np.isfinite(ci)) and lo <= ci[0] and ci[1] <= hi:
        return "inside"
    if np.all(np.isfinite(ci)) and (ci[1] < lo or ci[0] > hi):
        return "outside"
    return "overlap"


def _classify(res: dict, eff: dict, alpha: float, margins: dict, curve: dict) -> list[str]:
    def off(test, key=None):
        r = res.get(test)
        if r is None or not r.reject(alpha):
            return False
        lo, hi = margins[key or test]
        return not (lo <= r.estimate <= hi)

    flags = []
    if off("tail_index", "tail_index_ratio"):
        flags.append("heavy-tailed")
    expo = res["msd_exponent"]
    sub = off("msd_exponent") and expo.estimate < margins["msd_exponent"][0]
    early, late = curve.get("early_slope", np.nan), curve.get("late_slope", np.nan)
    if sub and np.isfinite(late) and late < 0.75 * early:  # saturation: fBm gives ratio ~1, OU(0.9) ~0.55
        flags.append("mean-reverting")
    elif sub:
        flags.append("subdiffusive")
    if (off("msd_exponent") and expo.estimate > margins["msd_exponent"][1]) or (
            off("drift", "drift_fraction") and off("msd_exponent_raw")):
        flags.append("superdiffusive")
    if (off("variance_ratio") or off("increment_autocorrelation")
            or off("volatility_clustering", "volatility_autocorrelation") or off("hurst")):
        flags.append("correlated")
    if off("gaussianity", "excess_kurtosis") or off("harmonic_ratio"):
        flags.append("non-gaussian")
    return flags


_EFFECT_KEYS = {"msd_exponent": "msd_exponent", "msd_exponent_raw": "msd_exponent_raw",
                "variance_ratio": "variance_ratio", "hurst": "hurst", "gaussianity": "excess_kurtosis",
                "tail_index": "tail_index_ratio", "increment_autocorrelation": "increment_autocorrelation",
                "volatility_clustering": "volatility_autocorrelation", "drift": "drift_fraction",
                "harmonic_ratio": "harmonic_ratio"}


def analyze_trajectory(X, *, kind: str, times=None, confidence_level: float = 0.95, n_resamples: int = 499,
                       alpha: float = 0.05, margins: dict | None = None, max_walkers: int = 512, rng=0,
                       calibration=None, supplements: bool = True) -> dict:
    """Run the Brownian battery on a trajectory array and classify it.

    Args:
        X: (T, N, d) = (time, independent walkers, dims).
        kind: "euclidean" or "sphere" (rows are normalised to unit length on the sphere).
        times: (T,) strictly increasing time stamps (default arange(T)).
        confidence_level, n_resamples: walker-bootstrap intervals.
        alpha: level of every individual test.
        margins: equivalence margins overriding the defaults (see `default_margins`).
        max_walkers: walkers are subsampled (seeded) to at most this many.
        rng: seed or Generator.
        calibration: optional DataFrame from `run_calibration`; rows for the nearest simulated
            shape of the same kind are attached (empirical size and power of each test).
        supplements: also compute reported-only extras (euclidean: arch's per-walker variance ratio on
            the top principal component, "supplements"); the calibration switches them off.

    Returns:
        JSON-ready dict: kind, n_times, n_walkers, dim, msd_exponent {estimate, ci}, diffusion_coefficient,
        tests [{name, statistic, p_value, reject, ...}], effect_sizes, classification, flags, brownian, ...

    Raises:
        ValueError: for arrays that are not valid trajectories (see validate_trajectory).
    """
    X, times = validate_trajectory(X, kind=kind, times=times)
    rng = np.random.default_rng(rng)
    N_total = X.shape[1]
    X = _subsample(X, max_walkers, rng)
    T, N, d = X.shape
    m = default_margins(margins)
    boot = WalkerBootstrap(N, n_resamples=n_resamples, confidence_level=confidence_level, rng=rng)
    res: dict[str, TestResult] = {}
    if kind == "euclidean":
        e, z, curve = _euclidean_part(X, times, boot, rng, res, supplements)
    else:
        e, z, curve = _sphere_part(X, times, boot, rng, res)
    max_lag = int(min(5, T - 2))
    res["increment_autocorrelation"] = B.autocorrelation_test(e, boot, max_lag=max_lag)
    res["volatility_clustering"] = B.volatility_test(e, boot, max_lag=max_lag)
    indep, mom = _gauss_inputs(z, rng)
    res["gaussianity"] = B.gaussianity_test(indep, mom, boot)
    res["tail_index"] = B.tail_test(indep, n_resamples=199, rng=rng, confidence_level=confidence_level)
    res["isotropy"] = B.isotropy_test(e)
    flags = _classify(res, None, alpha, m, curve)
    effects = {}
    for test, key in _EFFECT_KEYS.items():
        if test in res:
            r = res[test]
            effects[key] = {"estimate": r.estimate, "ci": list(r.confidence_interval), "margin": list(m[key]),
                            "status": _status(r.estimate, r.confidence_interval, m[key])}
    tests = [{"name": r.name, "statistic": r.statistic, "p_value": r.pvalue, "reject": r.reject(alpha),
              "estimate": r.estimate, "ci": list(r.confidence_interval), "null_value": r.null_value,
              "method": r.method, "n": r.n, **({"extra": r.extra} if r.extra else {})}
             for key, r in res.items() if key != "diffusion_coefficient"]
    expo, D = res["msd_exponent"], res["diffusion_coefficient"]
    out = {
        "kind": kind, "n_times": T, "n_walkers": N, "n_walkers_total": N_total, "dim": d, "times": times.tolist(),
        "msd_exponent": {"estimate": expo.estimate, "ci": list(expo.confidence_interval), "p_value": expo.pvalue,
                         "method": expo.method},
        "diffusion_coefficient": D.estimate, "diffusion_coefficient_ci": list(D.confidence_interval),
        "drift_removed": kind == "euclidean",
        "tests": tests, "effect_sizes": effects, "isotropy_participation_ratio": res["isotropy"].estimate,
        "classification": flags[0] if flags else "brownian", "flags": flags, "brownian": not flags,
        "brownian_equivalence": all(v["status"] == "inside" for v in effects.values() if v["status"] != "undefined"),
        "curves": curve,
        "supplements": ({"arch_variance_ratio": curve.pop("arch_variance_ratio")} if "arch_variance_ratio" in curve
                        else {}),
        "settings": {"confidence_level": confidence_level, "alpha": alpha, "n_resamples": n_resamples,
                     "max_walkers": max_walkers, "margins": {k: list(v) for k, v in m.items()}},
    }
    if calibration is not None:
        from .calibration import calibration_for
        out["calibration"] = calibration_for(calibration, kind=kind, T=T, N=N, d=d)
    return to_jsonable(out)


def analyze_noise(G, *, confidence_level: float = 0.95, rng=0, n_resamples: int = 199) -> dict:
    """Tails and Gaussianity of gradient-noise samples G (C, M, p) = (captures, samples, params).

    Per capture: excess kurtosis of the standardised coordinates, D'Agostino K^2 on one coordinate
    per sample... pooled over coordinates, and the Hill index against matched Gaussian surrogates
    (Simsekli et al. 2019 report heavy tails; others report Gaussian at large batch).
    """
    G = np.asarray(G, dtype=float)
    if G.ndim != 3 or not np.all(np.isfinite(G)):
        raise ValueError(f"gradient noise must be a finite array (captures, samples, params); got shape {G.shape}")
    rng = np.random.default_rng(rng)
    rows = []
    for c in range(G.shape[0]):
        g = G[c] - G[c].mean(0)
        sd = g.std(0, ddof=1)
        zz = (g / np.where(sd > 0, sd, 1.0))[:, sd > 0].ravel()
        if zz.size < 20:
            rows.append({"capture": c, "n": int(zz.size)})
            continue
        from scipy import stats
        nt = stats.normaltest(zz)
        tail = B.tail_test(zz, n_resamples=n_resamples, rng=rng, confidence_level=confidence_level)
        rows.append({"capture": c, "n": int(zz.size), "excess_kurtosis": float(stats.kurtosis(zz)),
                     "normaltest_statistic": float(nt.statistic), "normaltest_p_value": float(nt.pvalue),
                     "tail_index": tail.to_dict()})
    return to_jsonable({"kind": "gradient_noise", "n_captures": G.shape[0], "n_samples": G.shape[1],
                        "dim": G.shape[2], "per_capture": rows,
                        "note": "coordinates within a sample are dependent; p-values are indicative"})
