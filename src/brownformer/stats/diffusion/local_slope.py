"""Local slopes: the running exponent of a trajectory's MSD against its clock, inside a pre-fixed window.

One exponent fitted over a whole file hides the shape of the curve: a walk that moves fast during the
warm-up and is then arrested gives a log-log slope below 1 although it is no power law at all. So claim 3
is read on

- the fitting window, fixed in the config before the data (`fitting_window`): displacements start at the
  first capture at or after the warm-up and only lags of at least the momentum time 1/(1 - beta) steps
  count (momentum correlates increments over that many steps);
- the curve inside it: euclidean MSD(tau) = mean_i |Y_i(t_w + tau) - Y_i(t_w)|^2 / d (drift handled as the
  battery does), on the sphere psi(tau) = -ln mean_i <u_i(t_w), u_i(t_w + tau)> / (k - 1) (psi = D tau for
  spherical Brownian motion), with MSD = c + D tau^alpha: c, the capture noise, is computed from the storage
  precision (`storage_offset`: float16 rounding adds a known constant to every squared displacement), and a
  fitted c (`fit_offset_power`) is reported beside it as a check;
- its local slope d log(y - c) / d log tau (`local_slopes`: a running regression over a few captures);
- per-walker curves (`walker_curves`) and their log-log slopes, whose mean is the window exponent the
  verdict rests on: in R^d the mean of per-walker OLS slopes is exactly 1 for Brownian walkers of ANY rates
  (E log|Y_i(tau)|^2 = log tau + const per walker), while the ensemble curve of walkers with different
  rates bends on the sphere (mean_i exp(-lambda_i tau) is no exponential) and reads as sub-diffusion.

Everything takes a batch X (R, T, N, d), so the null envelope (stats/diffusion/window_reading.py) runs the
identical code on simulated Brownian motion.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from brownformer.stats.diffusion.battery import levels, log_slope
from brownformer.statsfile import SlopeWindow
from brownformer.stats.diffusion.trajectory_inputs import SidecarWindow, TrajectorySidecar

__all__ = ["FittingWindow", "fitting_window", "sidecar_window", "window_features", "ensemble_curve", "walker_curves",
           "fit_offset_power", "storage_offset", "local_slopes", "walker_slopes", "WalkerSlopes", "MIN_WINDOW_POINTS", "WALKER_COS_FLOOR"]

#: a window needs this many lags (a slope over fewer is not a curve)
MIN_WINDOW_POINTS = 6
#: per-walker psi_i = -ln cos_i / (k - 1) is used while cos_i > this (beyond it one walker's cosine is
#: dominated by its 1/sqrt(k) fluctuation and -ln cos_i is no longer close to lambda_i tau)
WALKER_COS_FLOOR = 0.5
#: the capture-noise offset is kept where an F-test of c = 0 rejects at this level (fit_offset_power)
OFFSET_LEVEL = 0.99
#: exponents of the profile least-squares fit of c + D tau^alpha
ALPHA_GRID = np.round(np.arange(0.04, 2.5001, 0.02), 2)


@dataclass(frozen=True)
class FittingWindow:
    """Capture indices of the window: displacements from `start`, lags to the captures `used` (> start)."""

    start: int
    used: np.ndarray
    start_step: int | None
    min_lag_steps: int
    why: str

    @property
    def n_points(self) -> int:
        return int(self.used.size)

    def record(self, times: np.ndarray, steps=None) -> SlopeWindow:
        """Where the window lies, on the file's clock `times` and (a training file) its capture `steps`."""
        t = np.asarray(times, float)
        lag_range = step_range = None
        if self.used.size:
            lag_range = [float(t[self.used[0]] - t[self.start]), float(t[self.used[-1]] - t[self.start])]
            if steps is not None:
                s = np.asarray(steps)
                step_range = [int(s[self.start]), int(s[self.used[-1]])]
        return SlopeWindow(start_index=self.start, used_indices=self.used.tolist(), n_points=self.n_points,
                           start_step=self.start_step, min_lag_steps=self.min_lag_steps,
                           start_clock=float(t[self.start]), why=self.why, lag_range=lag_range, step_range=step_range)


def sidecar_window(meta, *, start_step: int | None, momentum_times: float,
                   min_lag_steps: int = 0) -> tuple[int | None, int, float]:
    """(start step, least lag in steps, momentum beta) of a training file's window, from its sidecar.

    A replica file's sidecar "window" (the base run's, chosen when its captures were) comes first; else a sidecar
    "momentum" beta gives the momentum time 1/(1 - beta), and the window starts at max(`start_step`, its gap) and
    skips shorter lags, as ExperimentConfig.analysis_window does for the pipeline's runs (config.momentum_gap, the
    one home of that rule); else `min_lag_steps` (the run's, from the config). The beta is also what the window's
    null carries (window_reading.WindowSpec.momentum), so window and null come from the same momentum.

    Raises:
        ValueError: a momentum outside [0, 1).
    """
    from brownformer.config import momentum_gap
    meta = TrajectorySidecar.from_dict(meta)
    beta = meta.momentum
    own = meta.window or SidecarWindow()
    if beta is None and own.momentum_steps:
        beta = 1.0 - 1.0 / float(own.momentum_steps)
    beta = 0.0 if beta is None else float(beta)
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"sidecar momentum must be in [0, 1) (a heavy-ball beta), got {beta}")
    if own.min_gap_steps is not None:
        return start_step, int(own.min_gap_steps), beta
    if beta > 0 and momentum_times > 0:
        gap = momentum_gap(1.0 / (1.0 - beta), momentum_times)
        return max(int(start_step or 0), gap), gap, beta
    return start_step, int(min_lag_steps), beta


def fitting_window(times, steps=None, *, start_step: int | None, min_lag_steps: int) -> FittingWindow:
    """The pre-fixed window of one trajectory.

    Args:
        times: (T,) the trajectory's clock.
        steps: (T,) training step of each capture (sidecar "clocks"["step"]), or None (depth, a user's array):
            then the window is the whole trajectory.
        start_step: the window starts at the first capture at or after this step (the warm-up's end).
        min_lag_steps: lags shorter than this many steps are left out: the run's momentum time
            ceil(stats.momentum_times / (1 - beta)) of its own optimizer (config.ExperimentConfig.analysis_window).
    """
    T = len(times)
    if steps is None:
        return FittingWindow(0, np.arange(1, T), None, 0, "no training-step clock: the whole trajectory")
    steps = np.asarray(steps, dtype=np.int64)
    if steps.shape != (T,):
        raise ValueError(f"steps has {steps.size} entries, expected T={T}")
    m = int(min_lag_steps)
    after = np.flatnonzero(steps >= int(start_step or 0))
    if after.size == 0:
        return FittingWindow(T - 1, np.empty(0, np.int64), start_step, m, f"no capture at or after step {start_step}")
    start = int(after[0])
    used = np.flatnonzero((np.arange(T) > start) & (steps - steps[start] >= m))
    return FittingWindow(start, used, start_step, m, f"from the first capture at or after step {start_step} (the "
                         f"warm-up's end), lags of at least {m} steps (the optimizer's momentum time)")


def window_features(X: np.ndarray, times: np.ndarray, win: FittingWindow, *, kind: str, k: int,
                    drift: str = "none") -> tuple[np.ndarray, np.ndarray]:
    """(tau (n,), F (R, N, n)) per-walker raw features at the window's lags.

    Euclidean: |Y_i(t + tau) - Y_i(t)|^2 / (d * bridge(tau)), Y the drift-handled levels of the window
    (battery.levels, the last point dropped under per-walker drift, where the bridge variance is 0). Sphere:
    <u_i(t), u_i(t + tau)>. On an evenly spaced window t runs over up to MAX_ORIGINS origins near the window's
    start (`_origins`: a time average over origins, as the time-averaged MSD of single-particle tracking, Metzler
    et al. 2014, restricted to the first ORIGIN_SHARE of the span), else t = t_w.
    Brownian increments are stationary (a Brownian bridge's too: Var = tau (1 - tau/L) from any origin; spherical
    BM from a uniform start), so every origin estimates the same curve, and averaging over them cuts the
    per-walker noise of one path's displacements: at 200 one-dimensional walkers and 200 times the window
    exponent's 90% interval narrows from +-0.083 (one origin) to about +-0.035 (issue 30, item 3). An irregular
    clock (the training captures) has no common lag between origins and keeps the window's start as the one origin.
    """
    R, T, N, d = X.shape
    Xw, tw = X[:, win.start:], np.asarray(times, float)[win.start:]
    rel = win.used - win.start
    tau = tw[rel] - tw[0]
    if kind == "euclidean":
        Y, _, bridge = levels(Xw, tw, drift)
        b = bridge(tau)
        keep = b > 1e-9
        rel, tau, b = rel[keep], tau[keep], b[keep]
        F = _averaged(Y, tw, rel, _squared_displacement) / (d * b)
        return tau, F
    U = Xw / np.linalg.norm(Xw, axis=-1, keepdims=True)
    # 1 - |a - b|^2 / 2 keeps 1 - cos accurate in float32 for small steps
    return tau, 1.0 - 0.5 * _averaged(U, tw, rel, _squared_displacement)


def _squared_displacement(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(R, N, t) |c - a|^2 of captures a, c (R, t, N, d), the difference taken once."""
    diff = c - a
    return np.einsum("rtnd,rtnd->rnt", diff, diff)


#: on an evenly spaced window the displacements start at up to MAX_ORIGINS origins (the cost grows with them) in
#: the first ORIGIN_SHARE of the window's span: the curve stays the walk's from (about) the window's start, so a
#: walk that changes its motion inside the window (fast, then arrested) still bends, while each lag averages over
#: many origins (window_features)
MAX_ORIGINS, ORIGIN_SHARE = 16, 0.1


def _origins(tw: np.ndarray, lag: int) -> np.ndarray:
    """Origin indices of the displacements at index lag `lag`: 0 only on an irregular clock, else up to MAX_ORIGINS
    evenly spread over the origins a in the first ORIGIN_SHARE of the span with a + lag inside the window."""
    steps = np.diff(tw)
    if steps.size < 2 or not np.allclose(steps, steps[0], rtol=1e-6, atol=0.0):
        return np.zeros(1, np.int64)
    last = min(tw.size - 1 - lag, int(np.floor(ORIGIN_SHARE * (tw.size - 1))))
    return np.unique(np.round(np.linspace(0, last, min(MAX_ORIGINS, last + 1))).astype(np.int64))


def _averaged(V: np.ndarray, tw: np.ndarray, rel: np.ndarray, sq) -> np.ndarray:
    """(R, N, n) mean over the origins of each lag of sq(V[:, origins], V[:, origins + lag]) ((R, n_o, N, d) each)."""
    out = np.empty((V.shape[0], V.shape[2], rel.size))
    for j, lag in enumerate(rel):
        a = _origins(tw, int(lag))
        out[..., j] = sq(V[:, a], V[:, a + lag]).astype(np.float64).mean(-1)
    return out


def ensemble_curve(mean_F: np.ndarray, *, kind: str, k: int, n_walkers: int) -> np.ndarray:
    """The ensemble curve from walker means of the features: MSD per dimension, or psi on the sphere
    (NaN where the mean cosine is below the uniform floor 3/sqrt(k N), where psi is noise)."""
    if kind == "euclidean":
        return mean_F
    floor = 3.0 / np.sqrt(k * n_walkers)
    with np.errstate(all="ignore"):
        return np.where(mean_F > floor, -np.log(np.where(mean_F > floor, mean_F, 1.0)) / (k - 1), np.nan)


def walker_curves(F: np.ndarray, tau: np.ndarray, *, kind: str, k: int) -> np.ndarray:
    """Per-walker curves y_i(tau): the squared displacement (euclidean), or on the sphere
    psi_i = -ln cos_i / (k - 1) at the lags where the walker is predicted to keep cos_i above
    WALKER_COS_FLOOR (NaN beyond).

    The prediction uses the walker's rate over its first two lags, not the cosine at the lag itself:
    dropping the lags where a walker happens to have moved far would keep the slow draws and bias every
    walker towards sub-diffusion.
    """
    if kind == "euclidean":
        return F
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a walker with no positive cosine at its first lags: NaN
        psi = np.where(F > 0, -np.log(np.where(F > 0, F, 1.0)) / (k - 1), np.nan)
        first = np.nanmean(psi[..., :2] / tau[:2], axis=-1, keepdims=True)  # (R, N, 1) early rate
        horizon = -np.log(WALKER_COS_FLOOR) / (k - 1)
        keep = (first * tau <= horizon) | (np.arange(tau.size) < 3)
        return np.where(keep, psi, np.nan)


def fit_offset_power(tau: np.ndarray, y: np.ndarray, *, level: float = OFFSET_LEVEL
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Profile least squares of y = c + D tau^alpha, c >= 0, in relative errors (weights 1/y^2).

    For each alpha of ALPHA_GRID the fit is linear in (c, D); alpha minimises the weighted residual. The
    offset is kept only where it improves the fit significantly (F-test of c = 0 at `level`, 1 and n - 3
    df): a free offset fitted to noise would be subtracted from every walker and bias the exponent up,
    while real capture noise flattens the short lags far beyond noise. NaN points of y are left out;
    fewer than 3 points give NaN.

    Args:
        tau: (n,) lags; y: (..., n) curves.

    Returns:
        (alpha, c, D), each of shape y.shape[:-1].
    """
    from scipy.special import fdtri  # F quantile
    y = np.asarray(y, float)
    ok = np.isfinite(y) & (y > 0)
    w = np.where(ok, 1.0 / np.where(ok, y, 1.0) ** 2, 0.0)[..., None, :]  # (..., 1, n)
    yy = np.where(ok, y, 0.0)[..., None, :]
    b = np.asarray(tau, float)[None, :] ** ALPHA_GRID[:, None]  # (g, n)
    S0, S1, S2 = w.sum(-1), (w * b).sum(-1), (w * b * b).sum(-1)
    Sy, Sby = (w * yy).sum(-1), (w * b * yy).sum(-1)
    with np.errstate(all="ignore"):
        det = S0 * S2 - S1 * S1
        c = (S2 * Sy - S1 * Sby) / det
        D = (S0 * Sby - S1 * Sy) / det
        neg = ~(c >= 0)  # the constrained fit: no offset
        D = np.where(neg, Sby / S2, D)
        c = np.where(neg, 0.0, c)
        D0 = Sby / S2

        def ssr(cc, dd):
            r = (w * (yy - cc[..., None] - dd[..., None] * b) ** 2).sum(-1)  # (..., g)
            return np.where(np.isfinite(r) & (dd > 0), r, np.inf)

        r1, r0 = ssr(c, D), ssr(np.zeros_like(D0), D0)
    best1, best0 = np.argmin(r1, axis=-1), np.argmin(r0, axis=-1)
    take = lambda a, i: np.take_along_axis(a, i[..., None], -1)[..., 0]  # noqa: E731
    n = ok.sum(-1)
    s1, s0 = take(r1, best1), take(r0, best0)
    with np.errstate(all="ignore"):
        F = (s0 - s1) / (s1 / np.maximum(n - 3, 1))
        keep = (n > 3) & (F > fdtri(1, np.maximum(n - 3, 1), level))
    alpha = np.where(keep, ALPHA_GRID[best1], ALPHA_GRID[best0])
    cc = np.where(keep, take(c, best1), 0.0)
    dd = np.where(keep, take(D, best1), take(D0, best0))
    enough = n >= 3
    return np.where(enough, alpha, np.nan), np.where(enough, cc, np.nan), np.where(enough, dd, np.nan)


#: values storage_offset checks for the float16 grid before it checks them all
_GRID_PROBE = 256


def _float16_values(x: np.ndarray, scale: float) -> np.ndarray | None:
    """x times `scale` in float64 rounded through float16, or None when a value is not finite on float16's grid (to a
    relative 1e-6)."""
    z = np.asarray(x, np.float64) * scale
    with np.errstate(all="ignore"):
        z16 = z.astype(np.float16).astype(np.float64)
    if not np.all(np.isfinite(z16)) or np.any(np.abs(z - z16) > 1e-6 * np.abs(z)):
        return None
    return z16


def storage_offset(X: np.ndarray, *, kind: str, k: int) -> float:
    """The capture-noise offset c of the curves from the storage precision of X (T, N, d); 0 when X is not float16.

    Captures are stored in float16 (probes.dtype): each coordinate carries a rounding error uniform over one unit
    in the last place, variance ulp(x)^2 / 12 (ulp(x) = 2^(floor(log2|x|) - 10)), independent between captures.
    A displacement's squared length per dimension then gains 2 mean(ulp^2)/12 (euclidean curve); on the sphere
    1 - cos gains d mean(ulp^2)/12 and psi = -ln cos/(k - 1) about that over k - 1. The training token files hold
    float16 values divided by sqrt(d), so both scalings are tried. This offset is known, not fitted: an offset
    fitted to the curve's shape absorbs noise and bends the exponent.
    """
    X = np.asarray(X)
    d = X.shape[-1]
    for scale in (1.0, float(np.sqrt(d))):
        # one value off the float16 grid rules a scaling out: a first look at a few values spares a simulated walk
        # (nowhere on the grid) the pass over the whole array
        if _float16_values(X.flat[:_GRID_PROBE], scale) is None:
            continue
        Z16 = _float16_values(X, scale)
        if Z16 is None:
            continue
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(Z16), 2.0**-14))) - 10)  # subnormals: 2^-24
        var = float(np.mean(ulp**2)) / 12 / scale**2  # per coordinate, in X's units
        return 2 * var if kind == "euclidean" else d * var / (k - 1)
    return 0.0


def local_slopes(tau: np.ndarray, y: np.ndarray, *, decades: float = 0.5) -> np.ndarray:
    """Running exponent d log y / d log tau: the OLS slope of log y on log tau over the lags within
    `decades`/2 of each lag on the log axis (a fixed width in log time, not a fixed number of captures: late in
    a cosine schedule many captures crowd into a short stretch of the clock); NaN where fewer than 3 finite
    positive values are in reach.

    Args:
        tau: (n,); y: (..., n) with the offset already removed. Returns (..., n).
    """
    y = np.asarray(y, float)
    lt = np.log10(np.asarray(tau, float))
    out = np.full(y.shape, np.nan)
    for j in range(lt.size):
        near = np.abs(lt - lt[j]) <= decades / 2
        seg = y[..., near]
        ok = np.isfinite(seg) & (seg > 0)
        with np.errstate(all="ignore"):
            s = log_slope(tau[near], np.where(ok, seg, 1.0), ok)
        out[..., j] = np.where(ok.sum(-1) >= 3, s, np.nan)
    return out


@dataclass(frozen=True)
class WalkerSlopes:
    """Per-walker log-log slopes over the window (`alpha`), its early and late halves, and rates D_i: (R, N) each,
    NaN where fewer than 3 (halves: 2) points are usable."""

    alpha: np.ndarray
    early: np.ndarray
    late: np.ndarray
    rate: np.ndarray


def walker_slopes(tau: np.ndarray, y: np.ndarray, offset) -> WalkerSlopes:
    """Per-walker log-log slopes of y_i - c over the window, and over its early and late halves (split at
    the middle of log tau), plus each walker's rate D_i = sum (y_i - c) tau / sum tau^2 (least squares
    through the origin, the Brownian form).

    Args:
        tau: (n,); y: (R, N, n) walker curves (NaN: not usable); offset: (R,) capture-noise offsets c.

    Returns:
        WalkerSlopes.
    """
    z = y - np.asarray(offset, float)[:, None, None]
    ok = np.isfinite(z) & (z > 0)
    zz = np.where(ok, z, 1.0)
    mid = 0.5 * (np.log(tau[0]) + np.log(tau[-1]))
    early, late = np.log(tau) <= mid, np.log(tau) >= mid
    with np.errstate(all="ignore"):
        alpha = np.where(ok.sum(-1) >= 3, log_slope(tau, zz, ok), np.nan)
        half = [np.where((ok & part).sum(-1) >= 2, log_slope(tau, zz, ok & part), np.nan) for part in (early, late)]
        t2 = np.where(ok, tau * tau, 0.0).sum(-1)
        rate = np.where(ok.sum(-1) >= 1, np.where(ok, z * tau, 0.0).sum(-1) / t2, np.nan)
    return WalkerSlopes(alpha, *half, rate)
