"""Simulated processes with known answers, used for tests and for calibrating the battery.

Every simulator returns an array of shape (T, N, d) = (time, walkers, dims), like the
trajectory files, or (R, T, N, d) for R replicates at once (`simulate_batch`, the calibration), so
the identical analysis runs on simulated and real data.

`simulate_batch` reproduces a real file's shape: its capture times (irregular spacing honoured),
its groups of dependent walkers with a within-group correlation rho of the increments (shared noise
sqrt(rho) xi_g + sqrt(1 - rho) xi_i), and on the sphere its total decay and LayerNorm's hyperplane.

Euclidean processes have unit-variance increments per coordinate. On the sphere, increments
of the euclidean process are projected onto the tangent plane and scaled so that spherical
Brownian motion with the same step would have E<u_0, u_T> = exp(-1) (a mid-range decay).
"""
from __future__ import annotations

import numpy as np

from brownformer.stats.diffusion.battery import walk_levels
from brownformer.stats.diffusion.edges import ou_rate_at_exponent
from brownformer.stats.diffusion.momentum_filter import WARMUP_MOMENTUM_TIMES, momentum_filtered, momentum_kurtosis_share

__all__ = ["PROCESSES", "CALIBRATION_PROCESSES", "simulate", "simulate_batch", "spherical_brownian_motion",
           "fgn_increments", "sphere_step_scale", "ou_rate_at_exponent", "heavy_ball_brownian"]

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
        from scipy import stats  # here only: scipy.stats costs a replica set's statistics 0.5 s to import
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
    2 D dt per tangent coordinate and E<u_0, u_t> -> exp(-(d-1) D t) as dt -> 0 (docs/METHODS.md, "Formulas").

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


#: processes of the calibration: the null, the margin edges and a non-walk (simulate_batch)
CALIBRATION_PROCESSES = {
    "brownian": "Brownian motion on the file's clock (spherical BM on the sphere), the null",
    "clock_0.9": "Brownian motion on the clock t^0.9: MSD exponent 0.9, the lower margin edge",
    "clock_1.1": "Brownian motion on the clock t^1.1: MSD exponent 1.1, the upper margin edge",
    "ou_edge": "Ornstein-Uhlenbeck whose MSD log-slope over the capture times, after the battery's drift "
               "handling, is 0.9: the weakest mean reversion the exponent margin allows (euclidean only)",
    "iid": "independent points at every time (i.i.d. Gaussian; uniform on the sphere): not a walk",
}
#: largest decay (k-1) D dt of one spherical substep (its discretisation bias in D is about half of it, the same
#: for every substep, so the exponent is unbiased); at most this many substeps in total
_SUBSTEP_DECAY, _MAX_SUBSTEPS = 0.02, 200


def _shared_noise(rng, R: int, n: int, labels: np.ndarray, k: int, rho: float) -> np.ndarray:
    """(R, n, N, k) standard normal noise, correlation rho between walkers of one group."""
    G = int(labels.max()) + 1
    own = rng.standard_normal((R, n, labels.size, k), dtype=np.float32)
    if rho <= 0:
        return own
    shared = rng.standard_normal((R, n, G, k), dtype=np.float32)
    own *= np.float32(np.sqrt(1 - rho))  # in place: this runs once per spherical substep
    shared *= np.float32(np.sqrt(rho))  # scaled before the walkers take it: G, not N, products
    size = labels.size // G
    if labels.size == G * size and np.array_equal(labels, np.repeat(np.arange(G), size)):
        # equal groups of consecutive walkers (the files' layout): the group's noise broadcast, not gathered
        own.reshape(R, n, G, size, k)[...] += shared[:, :, :, None]
    else:
        own += shared[:, :, labels]
    return own


def _hyperplane_basis(d: int) -> np.ndarray:
    """(d, d-1) orthonormal basis of the hyperplane sum(z) = 0 (LayerNorm outputs lie in it)."""
    q = np.linalg.qr(np.concatenate([np.ones((d, 1)), np.eye(d)[:, :-1]], axis=1))[0]
    return q[:, 1:]


def _to_ambient(V: np.ndarray, d: int) -> np.ndarray:
    """Walks (..., d-1) in the hyperplane's coordinates -> (..., d) in R^d, float32. The basis is made contiguous:
    numpy's matmul over the leading axes is 3-4x faster with it than with the transposed view (the same products)."""
    return V @ np.ascontiguousarray(_hyperplane_basis(d).T, dtype=np.float32)




def _heavy_ball_chunk(x, v, m: int, beta: float, var: float, rng, labels, rho: float):
    """(x, v) after m heavy-ball steps v <- beta v + e, x <- x + v (e: variance `var`, within-group correlation rho),
    drawn exactly: the steps act linearly on the state, (x, v) -> A^m (x, v) + w with A = [[1, beta], [0, beta]]
    and w Gaussian with covariance Q_m = var sum_{j<m} A^j b b^T A^jT, b = (1, 1) (per coordinate and walker), so a
    chunk costs two normals per coordinate whatever its length (the shared part of the noise is aggregated alike)."""
    A = np.array([[1.0, beta], [0.0, beta]])
    Am, Q, b = np.eye(2), np.zeros((2, 2)), np.ones(2)
    for _ in range(m):
        Q += np.outer(Am @ b, Am @ b)
        Am = A @ Am
    lam, V = np.linalg.eigh(var * Q)  # Q has rank 1 for m = 1 (x and v move by the same e): no Cholesky
    L = V * np.sqrt(np.maximum(lam, 0.0))  # L L^T = var Q
    z = _shared_noise(rng, x.shape[0], 2, labels, x.shape[-1], rho)  # (R, 2, N, k)
    wx = np.float32(L[0, 0]) * z[:, 0] + np.float32(L[0, 1]) * z[:, 1]
    wv = np.float32(L[1, 0]) * z[:, 0] + np.float32(L[1, 1]) * z[:, 1]
    return (np.float32(Am[0, 0]) * x + np.float32(Am[0, 1]) * v + wx,
            np.float32(Am[1, 0]) * x + np.float32(Am[1, 1]) * v + wv)


def heavy_ball_brownian(*, times, steps, labels, d: int, kind: str, replicates: int, rng, momentum: float,
                        rho: float = 0.0, hyperplane: bool = False, decay: float = 1.0, start=None) -> np.ndarray:
    """Brownian motion passed through heavy-ball momentum, seen at the captures: (R, T, N, d).

    At every training step s the noise e_s (variance the clock's increment per step, the clock taken linear in
    steps between two captures; within-group correlation rho) is filtered as the optimizer filters gradients,
    v_s = beta v_{s-1} + (1 - beta) e_s, x_s = x_{s-1} + v_s, from v = 0 at step 0 (an optimizer's buffer starts
    empty; a file whose captures start later, e.g. thinned to the analysis window, sees it already running). Past
    the momentum time 1/(1 - beta) steps this is Brownian motion on the clock; at shorter lags it is ballistic
    (Polyak 1964; the heavy-ball walk of issue 30). The steps between two captures are drawn at once, exactly
    (`_heavy_ball_chunk`). On the sphere the velocity lives in the ambient space and the walk turns by the tangent
    part of each chunk's displacement, u <- (u + P_u dx)/|.|, chunks of at most _SUBSTEP_DECAY of decay, scaled so
    that the first harmonic decays by about `decay` over the captures as spherical Brownian motion would.

    Args:
        times: (T,) the captures' clock; steps: (T,) their training steps (increasing integers); momentum: beta.
        labels, d, kind, replicates, rng, rho, hyperplane, decay, start: as simulate_batch.
    """
    t, st = np.asarray(times, float), np.asarray(steps, np.int64)
    if st.shape != t.shape or np.any(np.diff(st) <= 0):
        raise ValueError("heavy-ball null: steps must be strictly increasing, one per capture")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    labels = np.asarray(labels)
    R, T, N = int(replicates), t.size, labels.size
    k = d - 1 if (kind == "sphere" and hyperplane) else d
    s = (t - t[0]) / (t[-1] - t[0])  # elapsed share of the clock, 0..1
    D = decay / max(k - 1, 1) if kind == "sphere" else 0.5  # euclidean: unit variance per unit of s
    out = np.empty((R, T, N, k), dtype=np.float32)
    x = (_sphere_start(start, rng, R, N, k) if kind == "sphere" else np.zeros((R, N, k), np.float32))
    v = np.zeros((R, N, k), np.float32)
    # the buffer starts empty at step 0 (at most WARMUP_MOMENTUM_TIMES momentum times before the first capture: by
    # then beta^steps is below 1e-9 and v is stationary); the clock runs at the first interval's rate meanwhile
    warm = int(min(st[0], np.ceil(WARMUP_MOMENTUM_TIMES / (1 - momentum))))
    if warm:
        var0 = (1 - momentum) ** 2 * 2 * D * (s[1] - s[0]) / int(st[1] - st[0])
        _, v = _heavy_ball_chunk(np.zeros_like(v), v, warm, momentum, var0, rng, labels, rho)
    out[:, 0] = x
    for i in range(1, T):
        n_steps = int(st[i] - st[i - 1])
        var = (1 - momentum) ** 2 * 2 * D * (s[i] - s[i - 1]) / n_steps  # noise variance per step
        # on the sphere the walk turns between chunks of at most _SUBSTEP_DECAY of decay (the ambient displacement of
        # a chunk projected onto the tangent plane); in R^d one chunk per capture interval is exact
        per_step = (k - 1) * D * (s[i] - s[i - 1]) / n_steps if kind == "sphere" else 0.0
        # at most _MAX_SUBSTEPS chunks over the file, as simulate_batch's spherical substeps (a decorrelating walk
        # costs no more than one of decay 4)
        chunk = n_steps if per_step == 0 else max(1, min(n_steps, int(max(_SUBSTEP_DECAY, decay / _MAX_SUBSTEPS)
                                                                      / per_step)))
        done = 0
        while done < n_steps:
            m = min(chunk, n_steps - done)
            dx, v = _heavy_ball_chunk(np.zeros_like(v), v, m, momentum, var, rng, labels, rho)
            x = _normalize(x + _project_tangent(x, dx)) if kind == "sphere" else x + dx
            done += m
        out[:, i] = x
    return _to_ambient(out, d) if k < d else out


def _sphere_start(start, rng, R: int, N: int, k: int) -> np.ndarray:
    """(R, N, k) first points of sphere walks: `start` broadcast (in the walk's own k coordinates), else uniform."""
    if start is None:
        return _normalize(rng.standard_normal((R, N, k), dtype=np.float32))
    start = np.asarray(start, np.float32)
    if start.shape[-2:] != (N, k):
        raise ValueError(f"start must have shape (..., {N}, {k}) (walkers, the walk's own dimensions); got {start.shape}")
    return np.broadcast_to(_normalize(start), (R, N, k)).copy()


def _euclidean_alternative(process, t, s, clock, labels, d, R, rng, rho, drift, margins,
                           kurtosis_share: float = 1.0) -> np.ndarray:
    """Levels (R, T, N, d) of a euclidean CALIBRATION_PROCESSES / edges process (simulate_batch's arguments)."""
    from brownformer.stats.diffusion import edges
    T, N = t.size, labels.size
    if process == "iid":
        return rng.standard_normal((R, T, N, d), dtype=np.float32)
    if process == "ou_edge":
        theta = ou_rate_at_exponent(s, 0.9, drift)
        xi = _shared_noise(rng, R, T, labels, d, rho)
        out = np.empty((R, T, N, d), dtype=np.float32)
        out[:, 0] = xi[:, 0] / np.sqrt(2 * theta)
        for i in range(1, T):
            a = np.exp(-theta * (s[i] - s[i - 1]))
            out[:, i] = a * out[:, i - 1] + np.sqrt((1 - a * a) / (2 * theta)) * xi[:, i]
        return out
    if process in edges.EDGE_PROCESSES:
        return walk_levels(edges.edge_increments(process, times=t, labels=labels, d=d, replicates=R, rng=rng,
                                                 rho=rho, drift=drift, margins=margins, kurtosis_share=kurtosis_share))
    inc = _shared_noise(rng, R, T - 1, labels, d, rho) * np.sqrt(np.diff(clock)).astype(np.float32)[None, :, None, None]
    return walk_levels(inc)


def simulate_batch(process: str, *, times, labels, d: int, kind: str, replicates: int, rng, rho: float = 0.0,
                   hyperplane: bool = False, decay: float = 1.0, drift: str = "common",
                   margins: dict | None = None, momentum: float = 0.0, steps=None, start=None) -> np.ndarray:
    """R replicates of a CALIBRATION_PROCESSES process at a real file's shape: (R, T, N, d).

    Args:
        process: a key of CALIBRATION_PROCESSES.
        times: (T,) capture times (irregular spacing honoured); only their relative spacing matters.
        labels: (N,) group of each walker; rho: within-group correlation of the increments.
        d: dimension; kind: "euclidean" or "sphere".
        hyperplane: sphere only: walk on S^(d-2) inside sum(z) = 0 (LayerNorm), else on S^(d-1).
        decay: sphere only: (k-1) D (t_T - t_0), i.e. E<u_0, u_T> = exp(-decay) under the null.
        drift: the battery's drift handling; "ou_edge" is placed at the margin edge as the battery sees it.
        margins: StatsConfig.margins, for the margin-edge processes of edges.py (default config.DEFAULT_MARGINS).
        momentum, steps: the optimizer's heavy-ball beta and the captures' training steps: "brownian" is then
            Brownian motion passed through that momentum (`heavy_ball_brownian`), the null of a training file; the
            euclidean alternatives pass through the same momentum (`momentum_filtered`).
        start: sphere only: the walkers' first points (..., N, k) in the walk's own coordinates (default uniform).
    """
    from brownformer.stats.diffusion import edges
    if momentum and (process == "brownian" or process.startswith("clock_")):
        if steps is None:
            raise ValueError("a momentum null needs the captures' training steps")
        # the exponent edges too: Brownian motion on the clock t^0.9 / t^1.1 through the same momentum (the other
        # euclidean alternatives pass through it below, `momentum_filtered`; the sphere's harmonic edge does not:
        # its power at a momentum shape is optimistic)
        t = np.asarray(times, float)
        clock = t if process == "brownian" else t[0] + (t[-1] - t[0]) * (
            (t - t[0]) / (t[-1] - t[0])) ** float(process.split("_")[1])
        return heavy_ball_brownian(times=clock, steps=steps, labels=labels, d=d, kind=kind, replicates=replicates,
                                   rng=np.random.default_rng(rng), momentum=momentum, rho=rho, hyperplane=hyperplane,
                                   decay=decay, start=start)
    if process not in CALIBRATION_PROCESSES and process not in edges.EDGE_PROCESSES:
        raise ValueError(f"unknown process {process!r}; known: {sorted(CALIBRATION_PROCESSES) + sorted(edges.EDGE_PROCESSES)}")
    if margins is None:
        from brownformer.config import DEFAULT_MARGINS
        margins = DEFAULT_MARGINS
    rng = np.random.default_rng(rng)
    t = np.asarray(times, float)
    s = (t - t[0]) / (t[-1] - t[0])  # elapsed share of the clock, 0..1
    clock = s ** float(process.split("_")[1]) if process.startswith("clock_") else s
    labels = np.asarray(labels)
    R, T, N = int(replicates), t.size, labels.size
    k = d - 1 if (kind == "sphere" and hyperplane) else d
    if kind == "euclidean":
        carry = bool(momentum) and steps is not None  # the alternatives at the data's physics: the same momentum
        share = momentum_kurtosis_share(steps, t, momentum) if carry and process.startswith("kurtosis_") else 1.0
        X = _euclidean_alternative(process, t, s, clock, labels, d, R, rng, rho, drift, margins, share)
        return momentum_filtered(X, steps=steps, momentum=momentum, labels=labels, rng=rng) if carry else X
    if kind != "sphere":
        raise ValueError(f"kind must be 'euclidean' or 'sphere', got {kind!r}")
    if process == "ou_edge" or (process in edges.EDGE_PROCESSES and process not in edges.edge_processes("sphere")):
        raise ValueError(f"{process} is simulated for euclidean trajectories only")
    u = _sphere_start(start, rng, R, N, k)
    if process == "iid":
        V = _normalize(rng.standard_normal((R, T, N, k), dtype=np.float32))
    else:
        # harmonic_low: resets to a uniform point at rate lam add lam to every harmonic's decay (edges.py); the
        # first harmonic's total decay stays `decay`
        lam_rel = edges.harmonic_reset_rate(k, edges.edge_value(process, margins)) if process == "harmonic_low" else 0.0
        D = decay / (1 + lam_rel) / max(k - 1, 1)
        lam = lam_rel * (k - 1) * D
        per_sub = max(_SUBSTEP_DECAY, decay / _MAX_SUBSTEPS)
        V = np.empty((R, T, N, k), dtype=np.float32)
        V[:, 0] = u
        for i in range(1, T):
            dc = clock[i] - clock[i - 1]
            n_sub = max(1, int(np.ceil((k - 1) * D * dc / per_sub)))
            step = np.float32(np.sqrt(2 * D * dc / n_sub))
            for _ in range(n_sub):
                u = _normalize(u + step * _shared_noise(rng, R, 1, labels, k, rho)[:, 0])
                if lam > 0:
                    reset = rng.random((R, N)) < -np.expm1(-lam * dc / n_sub)
                    u[reset] = _normalize(rng.standard_normal((int(reset.sum()), k), dtype=np.float32))
            V[:, i] = u
    return _to_ambient(V, d) if k < d else V
