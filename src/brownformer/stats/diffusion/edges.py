"""Alternatives at the edge of every key margin: processes whose key effect, as the battery measures it, equals
a margin edge while the other effects stay near their null values (the least favourable alternatives of the
equivalence test, at which the rate of "brownian" must be at most 1 - POWER_GOAL).

Euclidean (increments e_i of the capture intervals, i = 1..n, Cov(e_i, e_j) = sqrt(dt_i dt_j) R_ij):
- "vr_low" / "vr_high": AR(1)-in-capture-index increments, R_ij = phi^|i-j|, phi solved so that the expected
  variance ratio (the battery's VR(q) after its drift handling, ratio of expectations) equals the margin edge;
- "acf_low" / "acf_high": MA(1) increments, R_{i,i+1} = r, r solved so that the expected lag-1 autocorrelation of
  standardised increments, in excess of its null value, equals the edge;
- "kurtosis_low" / "kurtosis_high": i.i.d. increments with excess kurtosis at the edge: sqrt(1/2) N + sqrt(1/2)
  Rademacher has excess -2 b^4 (b^2 = share of the Rademacher part), Student t_nu has 6/(nu - 4).

Sphere: "harmonic_low": spherical Brownian motion plus resets to a uniform point at rate lam, which adds lam to
every Gegenbauer decay rate (r_l = l(l + k - 2) D + lam) and so lowers the harmonic ratio to the margin edge while
the cosine law stays exponential (exponent and variance ratio exactly 1). No isotropic Markov process on the sphere
has a ratio above 1: by Schoenberg's theorem its rates are r_l = l(l+k-2) D + int (1 - G_l(c)) nu(dc), and
(1 - G_2(c))/(1 - G_1(c)) = k(1 + c)/(k - 1) <= 2k/(k - 1); so "harmonic_high" is not simulated.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

__all__ = ["EDGE_PROCESSES", "edge_processes", "edge_value", "expected_variance_ratio", "expected_excess_acf", "solve_edge",
           "edge_increments", "harmonic_reset_rate", "ou_rate_at_exponent"]

EDGE_PROCESSES = {
    "vr_low": ("variance_ratio", 0, "AR(1) increments with the expected variance ratio at the lower margin edge"),
    "vr_high": ("variance_ratio", 1, "AR(1) increments with the expected variance ratio at the upper margin edge"),
    "acf_low": ("increment_autocorrelation", 0, "MA(1) increments with lag-1 autocorrelation at the lower edge"),
    "acf_high": ("increment_autocorrelation", 1, "MA(1) increments with lag-1 autocorrelation at the upper edge"),
    "kurtosis_low": ("excess_kurtosis", 0, "light-tailed increments (normal + Rademacher) at the lower kurtosis edge"),
    "kurtosis_high": ("excess_kurtosis", 1, "Student-t increments at the upper kurtosis edge"),
    "harmonic_low": ("harmonic_ratio", 0, "spherical BM with uniform resets: harmonic ratio at the lower edge"),
}
_EUCLIDEAN = ("vr_low", "vr_high", "acf_low", "acf_high", "kurtosis_low", "kurtosis_high")
_SPHERE = ("harmonic_low",)


def edge_processes(kind: str) -> list[str]:
    """The margin-edge processes simulated for `kind` (module docstring)."""
    return list(_EUCLIDEAN if kind == "euclidean" else _SPHERE)


def edge_value(process: str, margins: dict) -> float:
    key, side, _ = EDGE_PROCESSES[process]
    return float(margins[key][side])


def _drift_matrix(times: np.ndarray, drift: str) -> np.ndarray:
    """(n, n) linear map of increments done by the battery's drift handling (per walker; "common" only rescales)."""
    dt = np.diff(times)
    n = dt.size
    if drift == "per_walker":
        return np.eye(n) - np.outer(dt, np.ones(n)) / (times[-1] - times[0])
    return np.eye(n)


def _bridge(times: np.ndarray, delta: np.ndarray, drift: str) -> np.ndarray:
    return 1.0 - delta / (times[-1] - times[0]) if drift == "per_walker" else np.ones_like(delta)


def _cov(times: np.ndarray, corr: np.ndarray, drift: str) -> np.ndarray:
    s = np.sqrt(np.diff(times))
    A = _drift_matrix(times, drift)
    return A @ (corr * np.outer(s, s)) @ A.T


def _ar1_corr(n: int, phi: float) -> np.ndarray:
    k = np.arange(n)
    return phi ** np.abs(k[:, None] - k[None, :])


def _ma1_corr(n: int, r: float) -> np.ndarray:
    return np.eye(n) + r * (np.eye(n, k=1) + np.eye(n, k=-1))


def expected_variance_ratio(times, corr: np.ndarray, drift: str) -> float:
    """E of the battery's VR(q) numerator over E of its denominator (battery.variance_ratio), increments with
    correlation matrix `corr` over capture intervals."""
    from brownformer.stats.diffusion.battery import default_vr_lag
    times = np.asarray(times, float)
    S = _cov(times, corr, drift)
    P = np.zeros((S.shape[0] + 1, S.shape[0] + 1))
    P[1:, 1:] = np.cumsum(np.cumsum(S, 0), 1)  # P[a, b] = sum_{i<a, j<b} S_ij

    def msd(q):
        a = np.arange(times.size - q)
        b = a + q
        sq = P[b, b] - 2 * P[a, b] + P[a, a]  # E |Y_b - Y_a|^2 per coordinate
        delta = times[b] - times[a]
        return np.mean(sq / (_bridge(times, delta, drift) * delta))

    q = default_vr_lag(times.size - 1)
    return float(msd(q) / msd(1))


def expected_excess_acf(times, corr: np.ndarray, drift: str) -> float:
    """Mean over t of corr(E_t, E_{t+1}) after drift handling, minus the battery's null value (battery.bridge_acf)."""
    from brownformer.stats.diffusion.battery import bridge_acf
    times = np.asarray(times, float)
    S = _cov(times, corr, drift)
    d = np.sqrt(np.diag(S))
    lag1 = np.mean(np.diag(S, 1) / (d[:-1] * d[1:]))
    null = bridge_acf(times, 1)[0] if drift == "per_walker" else 0.0
    return float(lag1 - null)


def solve_edge(process: str, times, target: float, drift: str) -> float:
    """phi (vr_*) or r (acf_*) whose expected statistic equals `target` (brentq; ValueError when out of reach)."""
    times = np.asarray(times, float)
    n = times.size - 1
    if process.startswith("vr_"):
        f = lambda p: expected_variance_ratio(times, _ar1_corr(n, p), drift) - target  # noqa: E731
        lo, hi = -0.95, 0.95
    else:
        f = lambda r: expected_excess_acf(times, _ma1_corr(n, r), drift) - target  # noqa: E731
        lo, hi = -0.49, 0.49
    if f(lo) * f(hi) > 0:
        raise ValueError(f"{process}: target {target} out of reach at these capture times")
    return float(brentq(f, lo, hi, xtol=1e-6))


def _time_filter(noise: np.ndarray, process: str, param: float) -> np.ndarray:
    """Apply AR(1) (phi) or MA(1) (r) correlation along axis 1 of unit-variance noise (R, n + 1, N, d) -> (R, n, ...)."""
    if process.startswith("vr_"):
        out = np.empty_like(noise[:, 1:])
        out[:, 0] = noise[:, 1]
        a, b = np.float32(param), np.float32(np.sqrt(1 - param**2))
        for i in range(1, out.shape[1]):
            out[:, i] = a * out[:, i - 1] + b * noise[:, i + 1]
        return out
    theta = 0.0 if param == 0 else (1 - np.sqrt(1 - 4 * param**2)) / (2 * param)
    return ((noise[:, 1:] + np.float32(theta) * noise[:, :-1]) / np.float32(np.sqrt(1 + theta**2))).astype(noise.dtype)


def _kurtotic(shape, excess: float, rng) -> np.ndarray:
    """Unit-variance noise with the given excess kurtosis (module docstring), float32."""
    if excess >= 0:
        nu = 4 + 6 / max(excess, 1e-9)
        return (rng.standard_t(nu, size=shape) * np.sqrt((nu - 2) / nu)).astype(np.float32)
    b2 = np.sqrt(min(-excess, 2.0) / 2)
    rad = rng.integers(0, 2, size=shape).astype(np.float32) * 2 - 1
    return (np.sqrt(1 - b2) * rng.standard_normal(shape, dtype=np.float32) + np.sqrt(b2) * rad).astype(np.float32)


def edge_increments(process: str, *, times, labels, d: int, replicates: int, rng, rho: float, drift: str,
                    margins: dict, kurtosis_share: float = 1.0) -> np.ndarray:
    """Increments (R, n, N, d) of a euclidean margin-edge process, within-group correlation rho; `kurtosis_share`:
    the share of the increments' excess kurtosis the battery will see (momentum_filter.momentum_kurtosis_share, after the
    optimizer's momentum filter), so a kurtosis edge is drawn at edge / share."""
    if process not in _EUCLIDEAN:
        raise ValueError(f"{process!r} is not a euclidean margin-edge process; known: {list(_EUCLIDEAN)}")
    times = np.asarray(times, float)
    s = (times - times[0]) / (times[-1] - times[0])
    labels = np.asarray(labels)
    R, n, N = int(replicates), times.size - 1, labels.size
    G = int(labels.max()) + 1
    target = edge_value(process, margins)
    if process.startswith("kurtosis_"):
        target /= kurtosis_share
        # the shared and own parts carry the same non-Gaussian law: the sum's excess is (rho^2 + (1-rho)^2) x each
        each = target / (rho**2 + (1 - rho) ** 2) if rho > 0 else target
        noise = np.sqrt(1 - rho) * _kurtotic((R, n, N, d), each, rng)
        if rho > 0:
            noise += np.sqrt(rho) * _kurtotic((R, n, G, d), each, rng)[:, :, labels]
    else:
        param = solve_edge(process, s, target, drift)
        base = rng.standard_normal((R, n + 1, N, d), dtype=np.float32) * np.float32(np.sqrt(1 - rho))
        if rho > 0:
            base += np.float32(np.sqrt(rho)) * rng.standard_normal((R, n + 1, G, d), dtype=np.float32)[:, :, labels]
        noise = _time_filter(base, process, param)
    return noise * np.sqrt(np.diff(s)).astype(np.float32)[None, :, None, None]


def harmonic_reset_rate(k: int, target: float) -> float:
    """lam / ((k - 1) D): reset rate, relative to the first-harmonic BM rate, that puts the harmonic ratio at `target`.

    ((T a + lam)/(a + lam))/T = target with a = (k - 1) D and T = 2k/(k - 1) gives lam = a T (1 - target)/(target T - 1).
    """
    T = 2 * k / (k - 1)
    return T * (1 - target) / (target * T - 1)


def _ou_msd(theta: float, s: np.ndarray, drift: str) -> tuple[np.ndarray, np.ndarray]:
    """(times used, expected MSD the battery fits) of a stationary OU process with rate theta at times s (0..1).

    C(u) = exp(-theta u)/(2 theta). "per_walker": Y_t = (X_t - X_0) - t (X_1 - X_0) divided by the bridge factor
    1 - t, as battery.levels and battery.msd_exponent do; otherwise E|X_t - X_0|^2 = 2 (C(0) - C(t)).
    """
    c = lambda u: np.exp(-theta * u) / (2 * theta)  # noqa: E731
    t = s[1:]
    var_a = 2 * (c(0) - c(t))
    if drift != "per_walker":
        return t, var_a
    t = t[:-1]
    var_a = var_a[:-1]
    var_b = 2 * (c(0) - c(1.0))
    cov_ab = c(1.0 - t) - c(t) - c(1.0) + c(0)
    return t, (var_a - 2 * t * cov_ab + t * t * var_b) / (1 - t)


def ou_rate_at_exponent(s: np.ndarray, exponent: float, drift: str = "common") -> float:
    """theta whose expected MSD, as the battery measures it after `drift` handling, has OLS log-slope
    `exponent` over the capture times s (elapsed share of the clock, 0..1); bisection (the slope falls
    from 1 as theta grows, so the root is unique)."""
    from brownformer.stats.diffusion.battery import log_slope
    s = np.asarray(s, float)
    lo, hi = 1e-6, 1e4 / s[1]
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        t, m = _ou_msd(mid, s, drift)
        if log_slope(t, m) > exponent:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))
