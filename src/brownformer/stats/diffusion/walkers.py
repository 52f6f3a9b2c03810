"""Per-walker analysis: exponents and rates as distributions, per token type, and the AnDi diagnostics.

Walkers that are each Brownian but diffuse at different rates (CLS vs patch tokens, different inputs)
make an ensemble on the sphere look sub-diffusive; a mixture of Brownian and arrested walkers gives an
intermediate ensemble exponent that describes no walker. So the walkers are read one by one
(`walker_reading`): each walker's window exponent is compared with the range of per-walker exponents of
Brownian motion at the same shape (the null envelope's simulations), and their rates' spread with the
spread that estimation noise alone gives. Outcomes: "brownian-like" (rates "homogeneous" or "spread"),
"mixed" (a real share of walkers inside and a real share outside the Brownian range) or "anomalous".

Diagnostics (`andi_diagnostics`, batched like the battery so the null runs the same code), with
delta^2_i the time-averaged squared displacement per unit of clock over adjacent captures of the window:
- ergodicity breaking EB = Var_i(delta^2_i) / (mean_i delta^2_i)^2 (Metzler et al. 2014, eq. 29; rate
  heterogeneity raises it above its Brownian value);
- ergodicity ratio mean_i delta^2_i / (EA MSD(tau)/tau) (1 for Brownian motion; time and ensemble averages
  disagree under ageing or non-ergodic motion);
- ageing ratio: the ensemble MSD from a later start t_a over the one from the window start, at equal lags
  (1 for Brownian motion on its own clock; < 1 when motion slows with age);
- velocity autocorrelation C_q = sum <v_t, v_{t+q}> / sum |v_t|^2 of non-overlapping displacements over q
  captures, per unit sqrt(clock) (Muñoz-Gil et al. 2021; 0 for Brownian motion, < 0 mean reversion,
  > 0 ballistic), at q = 1, 2, 4;
- non-Gaussian parameter alpha_2 = m E|Delta|^4 / ((m + 2) (E|Delta|^2)^2) - 1 of the window's
  displacements at its last lag (0 for Gaussian displacements in m dimensions; > 0 for mixed rates).
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from brownformer.stats.diffusion.battery import levels
from brownformer.stats.sphere.sphere_battery import log_map
from brownformer.stats.diffusion.trajectory_inputs import TrajectorySidecar
from brownformer.statsfile import Keyed, WalkerPositions, WalkerReading, WalkerType

__all__ = ["token_types", "Diagnostic", "andi_diagnostics", "walker_reading", "row_quantiles", "VACF_STEPS"]

VACF_STEPS = (1, 2, 4)
_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def token_types(meta, n_walkers: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(type of each walker, token position or None) from the sidecar.

    Walker i*n_tokens + t is token t of probe input i (probes/extract.py). With "cls_index" (or a "walkers"
    text naming the CLS token) the types are "cls" and "patch" (the ViT); with n_tokens only, "position"
    (the LM: every token is a position); without them every walker is a "walker" (weight rows, a user's array).
    """
    meta = TrajectorySidecar.from_dict(meta)
    n_tokens = meta.n_tokens
    if not n_tokens or n_walkers % int(n_tokens):
        return np.full(n_walkers, "walker", dtype=object), None
    pos = np.arange(n_walkers) % int(n_tokens)
    cls = meta.cls_index
    if cls is None and "CLS token" in str(meta.walkers or ""):
        cls = 0
    if cls is None:
        return np.full(n_walkers, "position", dtype=object), pos
    return np.where(pos == int(cls), "cls", "patch").astype(object), pos


def _pair_sq(A: np.ndarray, B: np.ndarray, kind: str, k: int) -> np.ndarray:
    """(R, t, N) squared displacement per dimension between captures A and B (R, t, N, d); on the sphere
    (1 - cos)/(k - 1), which is D dt for small spherical Brownian steps."""
    diff = B - A
    sq = np.einsum("rtnd,rtnd->rtn", diff, diff).astype(np.float64)
    return sq / A.shape[-1] if kind == "euclidean" else 0.5 * sq / (k - 1)


class Diagnostic(NamedTuple):
    """One diagnostic of the module docstring (its name as files write it) for R trajectories: values (R,)."""

    name: str
    values: np.ndarray


def andi_diagnostics(Xw: np.ndarray, tw: np.ndarray, *, kind: str, k: int, drift: str, ens_tau: np.ndarray,
                     ens_curve: np.ndarray, n_walkers_total: int | None = None) -> tuple[Diagnostic, ...]:
    """The diagnostics of the module docstring for R trajectories, each (R,), in the order files write them (eb,
    ergodicity_ratio, ageing_ratio, vacf_q1/2/4, alpha2).

    Args:
        Xw: (R, Tw, N, d) the window's captures (from its start); tw: (Tw,) their clock.
        kind, k: euclidean, or sphere with span dimension k; drift: the battery's drift handling.
        ens_tau, ens_curve: (n,), (R, n) the ensemble curve from the window start (local_slope.ensemble_curve).
    """
    R, Tw, N, d = Xw.shape
    if kind == "euclidean":
        Y, _, bridge = levels(Xw, tw, drift)
    else:
        Y, bridge = Xw / np.linalg.norm(Xw, axis=-1, keepdims=True), (lambda x: np.ones_like(np.asarray(x, float)))
    dt = np.diff(tw)
    ta = (_pair_sq(Y[:, :-1], Y[:, 1:], kind, k) / dt[None, :, None]).mean(1)  # (R, N): time averages per unit clock
    with np.errstate(all="ignore"):
        out = [Diagnostic("eb", ta.var(1) / ta.mean(1) ** 2)]
        finite = np.isfinite(ens_curve) & (ens_curve > 0)
        ea_rate = np.where(finite, ens_curve * ens_tau, 0).sum(-1) / np.where(finite, ens_tau**2, 0).sum(-1)
        out.append(Diagnostic("ergodicity_ratio", ta.mean(1) / ea_rate))
    out.append(Diagnostic("ageing_ratio", _ageing_ratio(Y, tw, kind, k, bridge, ens_tau, ens_curve)))
    out += [Diagnostic(f"vacf_q{q}", _vacf(Y, tw, q)) for q in VACF_STEPS]
    last = Y[:, -2] if (kind == "euclidean" and drift == "per_walker") else Y[:, -1]  # bridge end is pinned at 0
    if kind == "euclidean":
        disp, m = last - Y[:, 0], d
    else:
        disp, m = log_map(Y[:, 0], last), k - 1
    r2 = np.einsum("rnd,rnd->rn", disp, disp).astype(np.float64)
    with np.errstate(all="ignore"):
        out.append(Diagnostic("alpha2", m * np.mean(r2**2, 1) / ((m + 2) * np.mean(r2, 1) ** 2) - 1))
    return tuple(out)


def _ageing_ratio(Y, tw, kind, k, bridge, ens_tau, ens_curve) -> np.ndarray:
    """exp(mean log(MSD from t_a / MSD from t_w)) at the lags from t_a, t_a at the middle of the window's log clock."""
    R, Tw = Y.shape[:2]
    rel = tw - tw[0]
    mid = np.exp(0.5 * (np.log(rel[1]) + np.log(rel[-1])))
    a = int(np.searchsorted(rel, mid))
    if a >= Tw - 2:
        return np.full(R, np.nan)
    lag = tw[a + 1:] - tw[a]
    keep = bridge(lag) > 1e-9
    sq = _pair_sq(np.repeat(Y[:, a:a + 1], Tw - a - 1, axis=1), Y[:, a + 1:], kind, k).mean(-1)  # (R, n_a)
    if kind == "euclidean":
        ya = sq / bridge(lag)
    else:  # psi from the later start, as the ensemble curve is psi from the window start
        with np.errstate(all="ignore"):
            ya = -np.log(1 - (k - 1) * sq) / (k - 1)
    out = np.full(R, np.nan)
    for r in range(R):
        ok = np.isfinite(ens_curve[r]) & (ens_curve[r] > 0)
        inside = keep & (lag >= ens_tau[ok].min(initial=np.inf)) & (lag <= ens_tau[ok].max(initial=-np.inf))
        inside &= np.isfinite(ya[r]) & (ya[r] > 0)
        if ok.sum() >= 2 and inside.any():
            yw = np.exp(np.interp(np.log(lag[inside]), np.log(ens_tau[ok]), np.log(ens_curve[r, ok])))
            out[r] = float(np.exp(np.mean(np.log(ya[r, inside] / yw))))
    return out


def _vacf(Y: np.ndarray, tw: np.ndarray, q: int) -> np.ndarray:
    """Correlation of successive non-overlapping displacements over q captures, each per sqrt(clock)."""
    R = Y.shape[0]
    idx = np.arange(0, Y.shape[1], q)
    if idx.size < 3:
        return np.full(R, np.nan)
    dY = np.diff(Y[:, ::q], axis=1)  # (R, m, N, d): one copy; the clock weights are applied to the dot products
    dt = np.diff(tw[idx])
    num = np.einsum("rtnd,rtnd->rt", dY[:, :-1], dY[:, 1:]).astype(np.float64) / np.sqrt(dt[:-1] * dt[1:])
    den = np.einsum("rtnd,rtnd->rt", dY[:, :-1], dY[:, :-1]).astype(np.float64) / dt[:-1]
    with np.errstate(all="ignore"):
        return num.sum(1) / den.sum(1)


def row_quantiles(x: np.ndarray, qs) -> np.ndarray:
    """Quantiles (linear interpolation, as np.quantile) of each row of x (R, n) over its finite values: (len(qs), R),
    NaN for a row without any. np.nanquantile along an axis loops over the rows in Python (50x slower here)."""
    x = np.asarray(x, float)
    srt = np.sort(np.where(np.isfinite(x), x, np.inf), axis=-1)  # non-finite last
    n = np.isfinite(x).sum(-1)
    out = []
    for q in np.atleast_1d(qs):
        pos = q * np.maximum(n - 1, 0)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
        a = np.take_along_axis(srt, lo[:, None], -1)[:, 0]
        b = np.take_along_axis(srt, hi[:, None], -1)[:, 0]
        with np.errstate(invalid="ignore"):
            out.append(np.where(n > 0, a + (pos - lo) * np.where(hi > lo, b - a, 0.0), np.nan))
    return np.stack(out)


def _quantiles(x: np.ndarray) -> list | None:
    x = x[np.isfinite(x)]
    return [float(v) for v in np.quantile(x, _QUANTILES)] if x.size else None


def _log_spread(rate: np.ndarray) -> np.ndarray:
    """(R,) interquartile range of log10 rates over walkers (NaN with fewer than 4 positive rates)."""
    with np.errstate(all="ignore"):
        lr = np.where(np.isfinite(rate) & (rate > 0), np.log10(np.where(rate > 0, rate, 1.0)), np.nan)
    q = row_quantiles(lr, [0.25, 0.75])
    return np.where(np.isfinite(lr).sum(-1) >= 4, q[1] - q[0], np.nan)


def _iqr(x: np.ndarray) -> np.ndarray:
    """(R,) interquartile range over walkers of x (R, N), ignoring NaN."""
    q = row_quantiles(x, [0.25, 0.75])
    return q[1] - q[0]


def walker_reading(alpha: np.ndarray, rate: np.ndarray, null_alpha: np.ndarray, null_rate: np.ndarray, *,
                   types: np.ndarray, positions: np.ndarray | None, mixed_share: float) -> WalkerReading:
    """Distributions of per-walker exponents and rates, per type, and the reading of the module docstring.

    Args:
        alpha, rate: (N,) the data's per-walker window exponents and rates (NaN: too few usable lags).
        null_alpha, null_rate: (R, N) the same on Brownian motion at the file's shape (one common rate).
        types, positions: token_types(); mixed_share: StatsConfig.window["mixed_share"].
    """
    valid = np.isfinite(alpha)
    na = null_alpha[np.isfinite(null_alpha)]
    if valid.mean() < 0.5 or na.size < 20:
        return WalkerReading("undefined", f"{int(valid.sum())} of {alpha.size} walkers have 3 usable lags")
    lo, q25, q75, hi = np.quantile(na, [0.025, 0.25, 0.75, 0.975])
    med = float(np.median(alpha[valid]))
    share_out = float(np.mean((alpha[valid] < lo) | (alpha[valid] > hi)))
    null_out = np.array([np.mean((a[np.isfinite(a)] < lo) | (a[np.isfinite(a)] > hi)) if np.isfinite(a).any()
                         else np.nan for a in null_alpha])
    out_limit = float(np.nanquantile(null_out, 0.95))
    excess = share_out - float(np.nanmean(null_out))
    spread, null_spread = float(_log_spread(rate[None])[0]), _log_spread(null_rate)
    spread_limit = float(np.nanquantile(null_spread, 0.95))
    # a mixture widens the exponents' distribution; one anomalous law shared by all walkers only shifts it
    iqr, null_iqr = float(_iqr(alpha[None])[0]), _iqr(null_alpha)
    iqr_limit = float(np.nanquantile(null_iqr, 0.95))
    if share_out > out_limit and iqr > iqr_limit and excess >= mixed_share and 1 - share_out >= mixed_share:
        reading = "mixed"
        why = (f"{share_out:.0%} of walkers outside the Brownian per-walker range [{lo:.2f}, {hi:.2f}] "
               f"(Brownian motion: at most {out_limit:.0%}), {1 - share_out:.0%} inside; exponents spread "
               f"(interquartile range {iqr:.2f}) beyond one law's ({iqr_limit:.2f})")
    elif share_out > out_limit and not (q25 <= med <= q75):
        reading = "anomalous"
        why = (f"{share_out:.0%} of walkers outside the Brownian per-walker range [{lo:.2f}, {hi:.2f}]; their median "
               f"exponent {med:.2f} lies outside the Brownian walkers' interquartile range [{q25:.2f}, {q75:.2f}]")
    else:
        reading = "brownian-like"
        why = (f"{share_out:.0%} of walkers outside the Brownian per-walker range [{lo:.2f}, {hi:.2f}] "
               f"(Brownian motion: up to {out_limit:.0%})")
    rates = "spread" if np.isfinite(spread) and spread > spread_limit else "homogeneous"
    why += (f"; rates {rates}: interquartile range of log10 rate {spread:.2f} (Brownian motion at one rate: "
            f"up to {spread_limit:.2f})")
    by_type = Keyed.of(WalkerType(int((types == t).sum()), _quantiles(alpha[types == t]), _quantiles(rate[types == t]),
                                  token_type=t) for t in dict.fromkeys(types.tolist()))
    by_position = None
    if positions is not None:
        P = int(positions.max()) + 1
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            by_position = WalkerPositions([float(np.nanmedian(alpha[positions == p])) for p in range(P)],
                                          [float(np.nanmedian(rate[positions == p])) for p in range(P)])
    return WalkerReading(
        reading, why, rates=rates, quantile_levels=list(_QUANTILES), exponent_quantiles=_quantiles(alpha),
        rate_quantiles=_quantiles(rate), null_exponent_range=[float(lo), float(hi)],
        null_exponent_quantiles=_quantiles(na), share_outside=share_out, null_share_outside_limit=out_limit,
        log10_rate_iqr=spread, null_log10_rate_iqr_limit=spread_limit, exponent_iqr=iqr,
        null_exponent_iqr_limit=iqr_limit, n_valid=int(valid.sum()), by_type=by_type, by_position=by_position)
