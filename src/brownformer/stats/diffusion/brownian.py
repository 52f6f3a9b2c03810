"""Claim 3: is a trajectory (T, N, d) a Brownian motion? The battery, the verdict and a description.

`battery_batch` runs the key statistics on R trajectories at once and applies the one decision rule
(rule.decide); the calibration simulates through it. The statistics are the entries of the battery's registry
(battery_registry.STATISTICS), computed in its order; this module names only those with fields of their own in
the contract (MSD exponent, diffusion coefficient) or a directional classification (exponent, tail index).
`trajectory_battery` runs it on one trajectory, adds descriptive tests (tails, isotropy, drift, Hurst, volatility,
Gram clustering) and a classification, and returns the statsfile.BatteryStats record whose `to_dict` is the
`stats trajectory` contract (docs/ARTIFACTS.md), before the window reading (window_verdict.trajectory_result).

Walkers of one group (sidecar "groups", or "n_inputs" x "n_tokens") are dependent: every interval
and test resamples groups (bootstrap.py). Times are real clock values (irregular spacing honoured).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from brownformer.config import DEFAULT_MARGINS, DEFAULT_STATS

from brownformer.stats.diffusion import battery as B
from brownformer.stats.sphere import sphere_battery as S
from brownformer.stats.diffusion import rule
from brownformer.stats.core.batch_stat import BatchStat
from brownformer.stats.diffusion.battery_registry import STATISTICS, TrajectoryInputs, batch_statistics, euclidean_inputs, sphere_inputs
from brownformer.stats.core.bootstrap import ClusterBootstrap, group_labels
from brownformer.stats.diffusion.rule import KEY_EFFECTS, MARGIN_KEYS, Effect, margins_for
from brownformer.stats.core.shapes import calibration_for, select_walkers, shape_of
from brownformer.stats.sphere.sphere_distance import gram_offdiagonal
from brownformer.stats.diffusion.trajectory_inputs import validate_trajectory
from brownformer.statsfile import (BatterySettings, BatteryStats, EffectResult, EuclideanCurves, Keyed, KeyedValue,
                                   MomentumBias, SphereCurves, SphereNormalisation)

log = logging.getLogger(__name__)

__all__ = ["trajectory_battery", "battery_batch", "momentum_bias", "BatteryResult", "CLASSES"]

#: "crossover" (the local slope is not flat across the window) and "mixed" (Brownian and non-Brownian walkers)
#: come from the window reading (stats/diffusion/window_reading.py)
CLASSES = ("brownian", "subdiffusive", "superdiffusive", "mean-reverting", "heavy-tailed", "correlated", "non-gaussian",
           "crossover", "mixed")


@dataclass
class BatteryResult:
    """Key and descriptive statistics of R trajectories, their verdicts and the within-group correlation."""

    stats: dict
    verdicts: np.ndarray
    reasons: list
    rho: np.ndarray
    decay: np.ndarray
    span_dimension: int
    hyperplane: bool
    curves: dict


def battery_batch(X: np.ndarray, *, kind: str, times: np.ndarray, labels: np.ndarray, margins: dict, alpha: float,
                  n_resamples: int, rng, drift: str = "common",
                  hyperplane: bool | None = None, describe: bool = False, window=None) -> BatteryResult:
    """The battery and the verdict on R trajectories X (R, T, N, d) sharing times and groups.

    Args:
        kind: "euclidean" or "sphere"; drift: battery.DRIFT_MODES (euclidean); hyperplane: sphere in
            sum(z) = 0 (None: detected from the data).
        labels: (N,) group of each walker; margins: StatsConfig.margins; alpha: rule level.
        describe: also the descriptive statistics (the entries of battery_registry.STATISTICS that are not key
            effects of `kind`: Hurst, volatility clustering, kurtosis on the sphere).
        window: a window_reading.WindowSpec: the key MSD effect is then the window exponent on it
            (window_reading.window_exponent, the effect the claim-3 verdict rests on), as in the calibration.
    """
    rng = np.random.default_rng(rng)
    boot = ClusterBootstrap(labels, n_resamples=n_resamples, rng=rng)
    R, T, N, d = X.shape
    inputs = (euclidean_inputs(X, times, drift, boot, rng) if kind == "euclidean" else
              sphere_inputs(X, times, hyperplane, boot, rng))
    st: dict[str, BatchStat] = {}
    entries = batch_statistics(kind, describe)
    for entry in entries:
        st[entry.name] = entry.compute[kind](inputs)
    rho = B.within_group_correlation(inputs.z, labels)
    if kind == "euclidean":
        decay = np.full(R, np.nan)
    else:
        with np.errstate(all="ignore"):
            decay = -np.log(np.einsum("rnd,rnd->r", inputs.U[:, 0], inputs.U[:, -1]) / N)
        if describe:
            inputs.curves["tangent_increments"] = inputs.v
    tost = 1 - 2 * alpha
    effects = {name: Effect(st[name].estimate, *st[name].interval(tost), st[name].pvalue, st[name].why_undefined)
               for name in KEY_EFFECTS[kind] if name in st}
    if window is not None:  # the verdict's MSD effect: the window exponent (what window_effects puts in its place)
        from brownformer.stats.diffusion.window_reading import window_exponent
        for entry in entries:
            if entry.window_effect:
                effects[entry.name], _ = window_exponent(X, times, window, labels, kind=kind, k=inputs.k,
                                                         hyperplane=inputs.hyperplane,
                                                         drift=drift if kind == "euclidean" else "none", boot=boot,
                                                         alpha=alpha)
        if window.carries_physics:  # key effects less what the window's momentum alone gives them; the window
            # exponent corrects its own bias (the data's reading does the same: window_verdict._momentum_shifted)
            own = {s.name for s in STATISTICS if s.window_effect}
            for b in momentum_bias(times, window, labels, d=d, kind=kind, k=inputs.k, hyperplane=inputs.hyperplane,
                                   drift=drift if kind == "euclidean" else "none", margins=margins, alpha=alpha,
                                   n_resamples=n_resamples):
                if b.effect in effects and b.effect not in own:
                    effects[b.effect] = rule.shift_effect(effects[b.effect], b.bias, b.null_value,
                                                          n_groups=boot.n_groups, alpha=alpha)
    verdicts, reasons = rule.decide(effects, kind=kind, margins=margins, alpha=alpha, n_times=T,
                                    n_groups=boot.n_groups)  # the one rule
    return BatteryResult(st, verdicts, reasons, rho, decay, inputs.k, inputs.hyperplane, inputs.curves)


def momentum_bias(times, spec, labels, *, d: int, kind: str, k: int, hyperplane: bool, drift: str,
                  margins: dict, alpha: float, n_resamples: int) -> Keyed:
    """What the file's momentum alone gives each full-range key effect (MomentumBias records: bias and null value),
    on Brownian motion through it (the window exponent corrects its own bias): each effect's median on the simulated
    walks minus its value for Brownian motion. Empty without momentum. Heavy-ball momentum correlates increments a
    few momentum times apart (lag-1 correlation 0.52 at 10-step increments for beta = 0.9), which is the optimizer,
    not the walk; so the rule reads these effects as departures from what momentum alone gives (parametric-bootstrap
    bias correction, Efron & Tibshirani 1993, ch. 10), the same correction and the same simulations as the window
    exponent's. A replica-contrast file of tokens on the sphere is corrected alike by what its null's saturation
    alone gives (the contrasts of spherical Brownian motions from a common start, stats/sphere/replica_null.py),
    momentum included."""
    if not spec.carries_physics:
        return Keyed()
    from brownformer.stats.diffusion.window_reading import null_walks  # window_reading imports this module's users; keep it lazy
    null = null_walks(times, spec, labels, d=d, kind=kind, k=k, hyperplane=hyperplane, drift=drift)
    if "bias" not in null.derived:  # one battery per cached null, shared by the files of its shape
        bat = battery_batch(null.full, kind=kind, times=np.asarray(times, float), labels=labels, margins=margins,
                            alpha=alpha, n_resamples=n_resamples, rng=np.random.default_rng([spec.seed, 11]),
                            drift=drift, hyperplane=hyperplane)
        null.derived["bias"] = Keyed.of(
            MomentumBias(float(np.nanmedian(st.estimate)) - float(st.null_value), float(st.null_value), effect=name)
            for name, st in bat.stats.items() if np.isfinite(st.estimate).any())
    return null.derived["bias"]


def _outside(res, margin, alpha: float) -> str | None:
    """"low"/"high" when the (1 - 2 alpha) interval, or a rejection's estimate, lies outside the margin."""
    lo, hi = margin
    tlo, thi = res.tost_interval
    est = res.estimate
    if np.isfinite(thi) and thi < lo or (res.reject(alpha) and np.isfinite(est) and est < lo):
        return "low"
    if np.isfinite(tlo) and tlo > hi or (res.reject(alpha) and np.isfinite(est) and est > hi):
        return "high"
    return None


def _classify(res: dict, m: dict, alpha: float, curves: EuclideanCurves | SphereCurves) -> list[str]:
    """Descriptive flags, in order of precedence (the first one is the classification)."""
    def off(test):
        return _outside(res[test], m[MARGIN_KEYS[test]], alpha) if test in res else None

    flags = []
    if off("tail_index") == "low":
        flags.append("heavy-tailed")
    expo = off("msd_exponent")
    if expo == "low":
        early, late = curves.early_slope, curves.late_slope
        saturating = np.isfinite(late) and late < 0.75 * early  # OU flattens late; fBm keeps its slope
        flags.append("mean-reverting" if saturating else "subdiffusive")
    if expo == "high":
        flags.append("superdiffusive")
    for flag in ("correlated", "non-gaussian"):  # the entries' flags (battery_registry), in this precedence
        if any(off(s.name) for s in STATISTICS if s.flag == flag):
            flags.append(flag)
    return flags


def _slopes(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(early, late) log-log slope of y over the first and second half of t (NaN with fewer than 4 usable points)."""
    ok = np.isfinite(y) & (y > 0)
    t, y = t[ok], y[ok]
    if t.size < 4:
        return np.nan, np.nan
    h = (t.size + 1) // 2
    return float(B.log_slope(t[:h], y[:h])), float(B.log_slope(t[h - 1:], y[h - 1:]))


def _descriptions(X, times, kind, labels, drift, bat: BatteryResult, rng,
                  confidence_level) -> tuple[dict, EuclideanCurves | SphereCurves]:
    """Descriptive tests and curves of one trajectory (R = 1)."""
    tau = times[1:] - times[0]
    out = {}
    if kind == "euclidean":
        Y, E, bridge = B.levels(X[None], times, drift)
        z = B.standardize(E / np.sqrt(np.diff(times) * bridge(np.diff(times)))[None, :, None, None])[0]
        disp, basis = X[-1] - X[0], None
        msd = bat.curves["msd"][0] if bat.curves["msd"].size else np.array([])
        early, late = _slopes(tau[: msd.size], msd)
        curves = EuclideanCurves(msd=msd, tau=tau[: msd.size], early_slope=early, late_slope=late)
    else:
        U = X / np.linalg.norm(X, axis=-1, keepdims=True)
        v = bat.curves.pop("tangent_increments")[0]
        z = B.standardize(S.random_tangent_projection(v[None], U[None], bat.hyperplane, rng))[0]
        disp = S.log_map(U[0], U[-1])
        basis = np.linalg.qr(np.concatenate([np.ones((X.shape[-1], 1)), np.eye(X.shape[-1])[:, :-1]], 1))[0][:, 1:] \
            if bat.hyperplane else None
        cm = bat.curves["mean_cos"][0]
        with np.errstate(all="ignore"):
            psi = -np.log(cm) / (bat.span_dimension - 1)
        D = bat.stats["diffusion_coefficient"].estimate[0]
        g = gram_offdiagonal(U)
        early, late = _slopes(tau, psi)
        curves = SphereCurves(
            mean_cos=cm, second_harmonic=bat.curves["second_harmonic"][0], tau=tau,
            n_usable_times=int(bat.curves["n_usable_times"][0]), gram_offdiagonal=g,
            gram_offdiagonal_bm_prediction=g[0] * np.exp(-2 * (bat.span_dimension - 1) * D * (times - times[0])),
            early_slope=early, late_slope=late)
        e = v
    pick = rng.integers(0, z.shape[-1], size=z.shape[1])
    z = B.walker_scaled(z[None])[0]  # walkers of different rates are not a heavy tail
    one = z[:, np.arange(z.shape[1]), pick].ravel()  # one coordinate per walker, all steps
    inputs = TrajectoryInputs(one, E[0] if kind == "euclidean" else e, basis, disp, labels, rng, confidence_level)
    out.update({s.name: s.compute[kind](inputs) for s in STATISTICS if s.per_trajectory and kind in s.compute})
    return out, curves


def trajectory_battery(X, *, kind: str, times=None, groups=None, n_inputs: int | None = None,
                       n_tokens: int | None = None, hyperplane: bool | None = None, drift: str = "common",
                       confidence_level: float = DEFAULT_STATS.confidence_level,
                       n_resamples: int = DEFAULT_STATS.n_resamples, alpha: float = DEFAULT_STATS.alpha,
                       margins: dict = DEFAULT_STATS.margins, max_walkers: int = DEFAULT_STATS.max_walkers,
                       rng=DEFAULT_STATS.seed, calibration=None,
                       check_clocks: dict | None = None) -> BatteryStats:
    """Run the Brownian battery on one trajectory array, decide (on the full range), and describe it.

    Args:
        X: (T, N, d) = (time, walkers, dims).
        kind: "euclidean" or "sphere" (rows are normalised to unit length on the sphere).
        times: (T,) strictly increasing real clock values (default arange(T)).
        groups, n_inputs, n_tokens: dependent walkers (bootstrap.group_labels); default independent.
        hyperplane: sphere: the vectors are LayerNorm outputs in sum(z) = 0 (None: detected).
        drift: "common" (mean increment over walkers removed), "per_walker" (each walker's linear drift
            removed; weights) or "none".
        confidence_level, n_resamples: reported intervals (n_resamples: the count the calibration simulates
            with); alpha: the rule's level ((1 - 2 alpha) TOST). These, margins, max_walkers and rng default to
            the schema's (config.DEFAULT_STATS): the stage passes the config's.
        margins: StatsConfig.margins (a key not given keeps its config.DEFAULT_MARGINS value).
        max_walkers: at most this many walkers, thinned within groups, every group kept (shapes.select_walkers).
        calibration: optional calibration table; the rows at this trajectory's exact shape are attached
            ("calibration": null with "calibration_note" saying why when there are none: the verdict is uncalibrated).
        check_clocks: {clock name: (T,) times}, or (name, times) pairs: the MSD exponent is also reported on these
            clocks ("clock_check").

    Returns:
        The statsfile.BatteryStats record (kind, n_times, n_walkers, dim, msd_exponent, diffusion_coefficient,
        tests, effects: the key effects with margins, verdict, reason, brownian, classification, flags,
        within_group_correlation, calibration_shape: the CalibrationShape it was decided at, calibration).

    Raises:
        ValueError: arrays that are not valid trajectories (see validate_trajectory), bad groups or drift.
    """
    X, times = validate_trajectory(X, kind=kind, times=times)
    normalisation = _sphere_normalisation(X) if kind == "sphere" else None
    m = {**DEFAULT_MARGINS, **{k: tuple(v) for k, v in margins.items()}}  # a partial mapping overrides some
    margins_for(m, kind)  # a missing key margin is a config error, before any work
    labels = group_labels(X.shape[1], groups=groups, n_inputs=n_inputs, n_tokens=n_tokens)
    rng = np.random.default_rng(rng)
    N_total = X.shape[1]
    idx = select_walkers(labels, max_walkers, rng)
    X, labels = X[:, idx], np.unique(labels[idx], return_inverse=True)[1]
    T, N, d = X.shape
    bat = battery_batch(X[None], kind=kind, times=times, labels=labels, margins=m, alpha=alpha, drift=drift,
                        hyperplane=hyperplane, n_resamples=n_resamples, rng=rng, describe=True)
    res = {name: s.result(0, confidence_level=confidence_level, alpha=alpha) for name, s in bat.stats.items()}
    extra, curves = _descriptions(X, times, kind, labels, drift, bat, rng, confidence_level)
    res.update(extra)
    flags = _classify(res, m, alpha, curves)
    verdict, reason = str(bat.verdicts[0]), bat.reasons[0]
    key = margins_for(m, kind)
    effects = Keyed.of(_key_effect(res[km.test], km) for km in key if km.test in res)
    tests = [r.decided(alpha) for name, r in res.items() if name != "diffusion_coefficient"]
    expo, D = res["msd_exponent"], res["diffusion_coefficient"]
    shape = shape_of(kind=kind, times=times, labels=labels, d=d, hyperplane=bat.hyperplane,
                     drift=drift if kind == "euclidean" else "none", rho=float(bat.rho[0]), decay=float(bat.decay[0]))
    calibrated = calibration_for(calibration, shape) if calibration is not None else None
    uncalibrated = None if calibrated is not None else (
        ("uncalibrated: no calibration table was given" if calibration is None else
         "uncalibrated: the calibration table has no rows at this trajectory's shape") +
        "; the verdict's size and power at this shape are unknown (`brownformer stats trajectory FILE --calibrate` "
        "simulates them; in the pipeline the calibrate stage does, and claims.json applies them)")
    record = BatteryStats(
        kind=kind, n_times=T, n_walkers=N, n_walkers_total=N_total, n_groups=int(labels.max()) + 1, dim=d,
        span_dimension=bat.span_dimension, hyperplane=bat.hyperplane, times=times,
        drift_removed=drift if kind == "euclidean" else "none (the sphere branch tests drift, see tests)",
        msd_exponent=_estimate(expo, method=expo.method, why_undefined=expo.why_undefined),
        diffusion_coefficient=EffectResult.effect(_finite(D.estimate), _pair(D.confidence_interval)), tests=tests, effects=effects, key_effects=[km.test for km in key],
        verdict=verdict, reason=reason, brownian=verdict == "brownian",
        classification=flags[0] if flags else ("brownian" if verdict == "brownian" else None),
        flags=flags, within_group_correlation=float(bat.rho[0]), calibration_shape=shape, curves=curves,
        settings=BatterySettings(confidence_level, alpha, 1 - 2 * alpha, n_resamples, max_walkers,
                                 KeyedValue.mapping({k: list(v) for k, v in m.items()}),
                                 "t-interval over groups (G - 1 df) with the cluster-bootstrap SE"),
        calibration=calibrated, calibration_note=uncalibrated,
        classification_note=("no key effect outside its margin, but the verdict is not 'brownian': " + reason)
        if not flags and verdict != "brownian" else None,
        clock_check=Keyed.of(_exponent_on_clock(name, X, np.asarray(t, float), kind, labels, drift, bat.hyperplane,
                                                confidence_level, alpha, n_resamples, rng)
                             for name, t in _clock_pairs(check_clocks)) if check_clocks else None,
        sphere_normalisation=normalisation)
    return record


def _finite(x) -> float | None:
    """A finite number as float, else None (how the "effect" layout stores an undefined value)."""
    return float(x) if x is not None and np.isfinite(x) else None


def _pair(v) -> tuple[float | None, float | None] | None:
    return None if v is None else (_finite(v[0]), _finite(v[1]))


def _estimate(r: EffectResult, **known) -> EffectResult:
    """A test's estimate with its intervals and p-value in the "effect" layout (NaN as None)."""
    return EffectResult.effect(_finite(r.estimate), _pair(r.confidence_interval), _pair(r.tost_interval),
                               _finite(r.pvalue), **known)


def _key_effect(r: EffectResult, margin: rule.KeyMargin) -> EffectResult:
    """A key effect of the rule: the test's estimate with its margin (named by its test)."""
    return _estimate(r, name=margin.test, why_undefined=r.why_undefined, margin=(margin.low, margin.high), key=True)


def _clock_pairs(clocks) -> list[tuple[str, np.ndarray]]:
    """(name, times) of each other clock: a {name: times} mapping or such pairs."""
    return list(clocks.items() if isinstance(clocks, Mapping) else clocks)


#: unit vectors whose norms differ from 1 by more than this are reported as rescaled (stored float16 captures of
#: LN output / sqrt(d) deviate by ~1e-3; LayerNorm's eps lowers norms of low-variance tokens a little more)
NORM_TOLERANCE = 1e-2


def _sphere_normalisation(X: np.ndarray) -> SphereNormalisation:
    """What `kind="sphere"` does to the vectors: each is divided by its norm (the sphere is the unit sphere);
    recorded so that a user whose vectors are not unit length sees it."""
    norms = np.linalg.norm(X, axis=-1)
    dev = float(np.max(np.abs(norms - 1.0)))
    rescaled = dev > NORM_TOLERANCE
    note = (f"--kind sphere: the vectors are not unit length (norms {norms.min():.3g} to {norms.max():.3g}); "
            "each was divided by its norm, so only directions were analysed and radial motion was discarded")
    return SphereNormalisation(rescaled_to_unit_length=rescaled, norm_min=float(norms.min()),
                               norm_max=float(norms.max()), norm_mean=float(norms.mean()), tolerance=NORM_TOLERANCE,
                               note=note if rescaled else None)


def _exponent_on_clock(name, X, times, kind, labels, drift, hyperplane, confidence_level, alpha, n_resamples,
                       rng) -> EffectResult:
    """The MSD exponent of the same trajectory on another clock (a check on the choice of the primary one)."""
    boot = ClusterBootstrap(labels, n_resamples=n_resamples, rng=rng)
    if kind == "euclidean":
        Y, _, bridge = B.levels(X[None], times, drift)
        stat = B.msd_exponent(Y, times, bridge, boot)[0]
    else:
        U = X / np.linalg.norm(X, axis=-1, keepdims=True)
        stat = S.cosine_law(U[None], times, S.span_dimension(U, hyperplane)[0], boot)[0]
    r = stat.result(0, confidence_level=confidence_level, alpha=alpha)
    return EffectResult.effect(r.estimate, r.confidence_interval, r.tost_interval, why_undefined=r.why_undefined,
                               name=name)
