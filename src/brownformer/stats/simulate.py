"""Simulated processes with known answers, used for tests and for calibrating the battery.

Every simulator returns an array of shape (T, N, d) = (time, walkers, dims), like the
trajectory files, so the identical analysis runs on simulated and real data.

Euclidean processes have unit-variance increments per coordinate. On the sphere, increments
of the euclidean process are projected onto the tangent plane and scaled so that spherical
Brownian motion with the same step would have E<u_0, u_T> = exp(-1) (a mid-range decay).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["PROCESSES", "simulate", "spherical_brownian_motion", "fgn_increments", "sphere_step_scale"]

#: process name -> short description; the calibration simulates all of them.
PROCESSES = {
    "brownian": "Brownian motion (spherical BM on the sphere), the null",
    "ou": "Ornstein-Uhlenbeck / AR(1) levels, phi=0.9 (mean-reverting)",
    "fbm_0.3": "fractional Brownian motion H=0.3 (anti-persistent, subdiffusive)",
    "fbm_0.7": "fractional Brownian motion H=0.7 (persistent, superdiffusive)",
    "stable_1.5": "symmetric alpha-stable increments, alpha=1.5 (heavy-tailed)",
    "correlated": "AR(1) increments, phi=0.3 (correlated increments)",
    "drift": "Brownian motion plus a common deterministic drift of 0.5 sd per step and coordinate",
}

OU_PHI = 0.9
AR_INCREMENT_PHI = 0.3
DRIFT_PER_STEP = 0.5
STABLE_ALPHA = 1.5


def fgn_increments(n_steps: int, hurst: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Fractional Gaussian noise by Cholesky factorisation of its exact covariance.

    gamma(k) = 0.5 (|k+1|^{2H} - 2|k|^{2H} + |k-1|^{2H}) (Mandelbrot & Van Ness 1968).

    Returns:
        Array (n_steps, size) of unit-variance fGn columns.
    """
    k = np.arange(n_steps, dtype=float)
    gamma = 0.5 * (np.abs(k + 1) ** (2 * hurst) - 2 * k ** (2 * hurst) + np.abs(k - 1) ** (2 * hurst))
    cov = gamma[np.abs(k[:, None] - k[None, :]).astype(int)]
    L = np.linalg.cholesky(cov)
    return L @ rng.standard_normal((n_steps, size))


def _ar1(n_steps: int, phi: float, size, rng: np.random.Generator, *, stationary: bool = True) -> np.ndarray:
    """AR(1) series x_t = phi x_{t-1} + e_t, unit-variance innovations, shape (n_steps, *size)."""
    e = rng.standard_normal((n_steps, *size))
    x = np.empty_like(e)
    x[0] = e[0] / np.sqrt(1 - phi**2) if stationary else e[0]
    for t in range(1, n_steps):
        x[t] = phi * x[t - 1] + e[t]
    return x


def _increments(process: str, T: int, N: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Increments (T-1, N, d) of the euclidean version of `process` (not for "ou")."""
    n = T - 1
    if process == "brownian":
        return rng.standard_normal((n, N, d))
    if process.startswith("fbm_"):
        return fgn_increments(n, float(process.split("_")[1]), N * d, rng).reshape(n, N, d)
    if process.startswith("stable_"):
        alpha = float(process.split("_")[1])
        return stats.levy_stable.rvs(alpha, 0.0, size=(n, N, d), random_state=rng) / np.sqrt(2)
    if process == "correlated":
        return _ar1(n, AR_INCREMENT_PHI, (N, d), rng) * np.sqrt(1 - AR_INCREMENT_PHI**2)
    if process == "drift":
        return rng.standard_normal((n, N, d)) + DRIFT_PER_STEP
    raise ValueError(f"unknown process {process!r}; known: {sorted(PROCESSES)}")


def sphere_step_scale(T: int, d: int) -> float:
    """Tangent step sd s with (d-1) D (T-1) = 1 for D = s^2/2, i.e. E<u_0,u_T> = e^-1 under BM."""
    return float(np.sqrt(2.0 / ((d - 1) * (T - 1))))


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def spherical_brownian_motion(T: int, N: int, d: int, *, diffusion: float, rng, substeps: int | None = None,
                              times=None) -> np.ndarray:
    """Brownian motion with generator D * Laplace-Beltrami on S^{d-1}, uniform start.

    Each unit of time is split into small steps u <- (u + sqrt(2 D dt) xi)/|.|, xi ~ N(0, I_d);
    the radial part of xi is discarded by the normalisation, so the tangent step has variance
    2 D dt per tangent coordinate and E<u_0, u_t> -> exp(-(d-1) D t) as dt -> 0 (STATISTICS.md 2.a).

    Returns:
        Unit vectors of shape (T, N, d).
    """
    rng = np.random.default_rng(rng)
    times = np.arange(T, dtype=float) if times is None else np.asarray(times, float)
    u = _normalize(rng.standard_normal((N, d)))
    out = np.empty((T, N, d))
    out[0] = u
    for t in range(1, T):
        dt = times[t] - times[t - 1]
        # keep (d-1) D delta <= 0.005 so the discretisation bias in the decay rate stays below ~0.5%
        n_sub = substeps or max(1, int(np.ceil((d - 1) * diffusion * dt / 0.005)))
        s = np.sqrt(2 * diffusion * dt / n_sub)
        for _ in range(n_sub):
            u = _normalize(u + s * rng.standard_normal((N, d)))
        out[t] = u
    return out


def _project_tangent(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v - np.sum(u * v, axis=-1, keepdims=True) * u


def simulate(process: str, T: int, N: int, d: int, *, kind: str = "euclidean", rng=None) -> np.ndarray:
    """Simulate one of PROCESSES with shape (T, N, d).

    Args:
        process: a key of PROCESSES.
        T, N, d: times, independent walkers, dimensions.
        kind: "euclidean" or "sphere". On the sphere "brownian" is exact spherical BM; the
            alternatives take tangent steps u <- (u + s P_u e_t)/|.| with the process's
            increments e_t (OU: plus a pull theta (mu_i - u) towards a fixed point mu_i).
        rng: seed or Generator.
    """
    rng = np.random.default_rng(rng)
    if kind == "euclidean":
        if process == "ou":
            return _ar1(T, OU_PHI, (N, d), rng) * np.sqrt(1 - OU_PHI**2)
        X0 = rng.standard_normal((1, N, d))
        return np.concatenate([X0, X0 + np.cumsum(_increments(process, T, N, d, rng), axis=0)])
    if kind != "sphere":
        raise ValueError(f"kind must be 'euclidean' or 'sphere', got {kind!r}")
    s = sphere_step_scale(T, d)
    if process == "brownian":
        return spherical_brownian_motion(T, N, d, diffusion=s**2 / 2, rng=rng)
    u = _normalize(rng.standard_normal((N, d)))
    out = np.empty((T, N, d))
    out[0] = u
    if process == "ou":
        mu = _normalize(u + 0.5 * rng.standard_normal((N, d)) / np.sqrt(d))
        eps = rng.standard_normal((T - 1, N, d))
        pull = 1 - OU_PHI
    else:
        eps = _increments(process, T, N, d, rng)
        mu, pull = None, 0.0
    for t in range(1, T):
        step = s * _project_tangent(u, eps[t - 1])
        if mu is not None:
            step = step + pull * _project_tangent(u, mu)
        u = _normalize(u + step)
        out[t] = u
    return out
