"""One trajectory's claim-3 verdict as the pipeline decides it: the battery (brownian.trajectory_battery, decided on the
full range), then the reading on the window fixed before the data (window_reading.window_reading), on which the
verdict is decided once (rule.decide_results) and stored with the full-range one.

`trajectory_result` is a pure function of the array and its sidecar (trajectory_inputs.TrajectorySidecar, or its
mapping): stats_stage/run_stats.py calls it on every trajectory file, and stats/controls/positive_controls.py on the
processes built to say yes (or no). A training file whose sidecar
declares its optimizer's "momentum" is kept to the captures of its momentum window, and its full-range key effects
lose what momentum alone gives them
(brownian.momentum_bias), as the calibration does (brownian.battery_batch with the file's window).
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from brownformer.stats.diffusion.brownian import trajectory_battery
from brownformer.stats.diffusion.trajectory_inputs import BatteryInputs, TrajectorySidecar, battery_inputs
from brownformer.statsfile import BatteryStats, Decision, EffectResult, Keyed, LocalSlopes

log = logging.getLogger(__name__)

__all__ = ["trajectory_result", "momentum_captures", "WINDOW_RULE"]

#: the rule a file's verdict is taken by (Decision.rule)
WINDOW_RULE = "equivalence of every key effect, the MSD exponent read on the pre-fixed window (rule.decide)"


def trajectory_result(X: np.ndarray, meta: TrajectorySidecar | dict, *, stats, calibration=None,
                      min_lag_steps: int = 0) -> BatteryStats:
    """The battery, the window reading and the verdict of one trajectory X (T, N, d) with its sidecar `meta`
    ("kind", "times" and the optional sidecar keys of docs/ARTIFACTS.md), as its statistics record.

    Args:
        stats: StatsConfig; calibration: a calibration table (rows at the file's shape attached) or None.
        min_lag_steps: the run's momentum time in steps (config.ExperimentConfig.analysis_window(run).min_gap), for a
            file whose sidecar gives no momentum of its own.
    """
    X, meta = momentum_captures(X, meta, stats)
    inputs = battery_inputs(meta, meta.kind)
    battery = trajectory_battery(X, kind=meta.kind, times=meta.times, groups=inputs.groups,
                                 n_inputs=inputs.n_inputs, n_tokens=inputs.n_tokens, hyperplane=inputs.hyperplane,
                                 drift=inputs.drift, confidence_level=stats.confidence_level,
                                 n_resamples=stats.n_resamples, alpha=stats.alpha, margins=dict(stats.margins),
                                 max_walkers=stats.max_walkers, rng=stats.seed, calibration=calibration,
                                 check_clocks=_check_clocks(meta, X.shape[0]))
    return _on_window(battery, X, meta, inputs, stats, min_lag_steps)


def _check_clocks(meta: TrajectorySidecar, T: int) -> list[tuple[str, np.ndarray]]:
    """(name, times) of the sidecar's other clocks that can time this file (T increasing values)."""
    clocks = []
    for name, values in (meta.clocks or {}).items():
        t = np.asarray(values, float)
        if name != meta.time and t.shape == (T,) and np.all(np.diff(t) > 0):
            clocks.append((name, t))
    return clocks


def momentum_captures(X: np.ndarray, meta: TrajectorySidecar | dict, stats) -> tuple[np.ndarray, TrajectorySidecar]:
    """A training file with a sidecar "momentum" and a step clock, kept to the captures of its analysis window:
    from max(warm-up, the momentum time) on, spaced at least one momentum time apart (local_slope.sidecar_window, the
    rule config.AnalysisWindow applies to the pipeline's replica files, which come thinned: their sidecar "window").
    Increments shorter than the momentum time carry the optimizer's filter, not the walk."""
    from brownformer.config import AnalysisWindow
    from brownformer.stats.diffusion.local_slope import sidecar_window
    meta = TrajectorySidecar.from_dict(meta)
    steps = meta.step_clock(X.shape[0])
    if not meta.momentum or meta.window is not None or steps is None:
        return X, meta
    start, gap, beta = sidecar_window(meta, start_step=stats.window["start_step"], momentum_times=stats.momentum_times)
    keep = AnalysisWindow(int(start or 0), gap, 1.0 / (1.0 - beta)).select([int(s) for s in steps])
    if len(keep) == X.shape[0]:
        return X, meta
    clocks = {name: [v[i] for i in keep] for name, v in (meta.clocks or {}).items() if len(v) == X.shape[0]}
    log.info("%s: %d of %d captures in the momentum window (from step %s, >= %d steps apart)", meta.path,
             len(keep), X.shape[0], start, gap)
    return X[keep], replace(meta, times=[meta.times[i] for i in keep], clocks=clocks)


def _momentum_shifted(effects: Keyed, bias: Keyed, *, n_groups: int, alpha: float) -> Keyed:
    """Stored key effects (EffectResults by test) less what momentum alone gives them (brownian.momentum_bias's
    MomentumBias records, the block's "momentum_bias"), through the rule's rule.shift_effect (the raw values are the
    shifted ones plus that bias)."""
    from brownformer.stats.diffusion.rule import Effect, shift_effect
    arr = lambda v: np.array([np.nan if v is None else float(v)])  # noqa: E731

    def shifted(e: EffectResult) -> EffectResult:
        b = bias.get(e.name)
        if b is None or e.name == "msd_exponent" or e.estimate is None:
            return e
        lo, hi = e.tost_interval or (None, None)
        s = shift_effect(Effect(arr(e.estimate), arr(lo), arr(hi), arr(e.pvalue)), b.bias, b.null_value,
                         n_groups=n_groups, alpha=alpha)
        ci = tuple(None if v is None else float(v) - b.bias for v in e.confidence_interval or (None, None))
        return replace(e, estimate=float(s.estimate[0]), tost_interval=(float(s.tost_low[0]), float(s.tost_high[0])),
                       confidence_interval=ci, pvalue=float(s.pvalue[0]))
    return Keyed.of(shifted(e) for e in effects)


def _read_window(battery: BatteryStats, X: np.ndarray, meta: TrajectorySidecar, inputs: BatteryInputs, stats, min_lag_steps: int):
    """(WindowReading or None when it failed, the block to store, the battery's walker indices and their labels)."""
    from brownformer.stats.core.shapes import select_walkers
    from brownformer.stats.diffusion.local_slope import sidecar_window
    from brownformer.stats.diffusion.window_reading import window_reading
    rho = battery.within_group_correlation
    rho = float(rho) if rho is not None and np.isfinite(rho) else 0.0  # undefined (one walker per group): none
    labels = inputs.labels(X.shape[1])
    idx = select_walkers(labels, stats.max_walkers, np.random.default_rng(stats.seed))  # the battery's walkers
    steps = meta.step_clock(X.shape[0])
    side = replace(meta, n_tokens=meta.n_tokens if idx.size == X.shape[1] else None)  # positions need all walkers
    sub_labels = np.unique(labels[idx], return_inverse=True)[1]
    start, lag, beta = sidecar_window(meta, start_step=stats.window["start_step"], momentum_times=stats.momentum_times,
                                      min_lag_steps=min_lag_steps)
    try:
        reading = window_reading(X[:, idx], battery.times, kind=battery.kind, labels=sub_labels,
                                 k=battery.span_dimension, hyperplane=battery.hyperplane,
                                 drift=inputs.drift if battery.kind == "euclidean" else "none", steps=steps,
                                 meta=side, stats=stats, rho=rho, rng=stats.seed,
                                 min_lag_steps=lag if steps is not None else 0, start_step=start, momentum=beta)
    except (ValueError, ArithmeticError, IndexError, np.linalg.LinAlgError) as exc:  # keep the battery's result
        log.warning("window reading failed: %s", exc)
        why = f"window reading failed: {exc}"
        failed = LocalSlopes(classification="inconclusive", description=why,
                             effect=EffectResult.effect(None, (None, None), (None, None), why_undefined=why))
        return None, failed, idx, sub_labels
    return reading, reading.local_slopes, idx, sub_labels


def _on_window(full: BatteryStats, X: np.ndarray, meta: TrajectorySidecar, inputs: BatteryInputs, stats,
               min_lag_steps: int = 0) -> BatteryStats:
    """Claim 3's reading on the pre-fixed window (stats/diffusion/window_reading.py): "local_slopes", "walkers", and the
    verdict and classification decided once on the window exponent (the full-range ones are kept as
    "verdict_full_range", "classification_full_range"); the calibration shape gets the window (WindowSpec), so
    that the calibration simulates this verdict's rule."""
    from brownformer.stats.diffusion.brownian import momentum_bias
    from brownformer.stats.diffusion.rule import decide_results
    from brownformer.stats.diffusion.window_reading import key_effects_on_window, window_classification_of
    reading, slopes, idx, sub_labels = _read_window(full, X, meta, inputs, stats, min_lag_steps)
    spec = reading.spec if reading is not None else None
    bias = None
    if spec is not None and spec.carries_physics and slopes.effect.estimate is not None:
        bias = momentum_bias(
            full.times, spec, sub_labels, d=X.shape[-1], kind=full.kind, k=full.span_dimension,
            hyperplane=full.hyperplane, drift=inputs.drift if full.kind == "euclidean" else "none",
            margins=dict(stats.margins), alpha=stats.alpha, n_resamples=stats.n_resamples)
        slopes = replace(slopes, momentum_bias=bias)
    shape = full.calibration_shape
    if spec is not None:  # its id and geometry cover the window
        shape = replace(shape, window=spec)
        if spec.replicas:  # the sphere the contrasted walks live on: the null's decay and plane
            from brownformer.stats.core.shapes import sphere_decay
            from brownformer.stats.sphere.replica_null import contrast_decay
            shape = replace(shape, decay=sphere_decay(contrast_decay(X[:, idx])), hyperplane=spec.replica_hyperplane)
    effects = _momentum_shifted(full.effects, bias, n_groups=int(full.n_groups or 0), alpha=stats.alpha) if bias \
        else full.effects
    decision = decide_results(key_effects_on_window(effects, slopes), kind=full.kind, margins=dict(stats.margins),
                              alpha=stats.alpha, n_times=int(full.n_times), n_groups=full.n_groups, rule=WINDOW_RULE)
    null = slopes.effect.null
    if decision.verdict == "inconclusive" and null is not None:
        # how often the window exponent alone certifies Brownian motion simulated at this file's shape: a low
        # value says the data are too few to decide, not that the walk is not Brownian (the full rule's power
        # needs the calibration: `stats trajectory --calibrate` or the pipeline's calibrate stage)
        decision = replace(decision, reason=decision.reason + (
            f" (power at this shape: the window exponent certifies {null.equivalence_power:.0%} of "
            f"{null.n_replicates} Brownian motions simulated at it)"))
    return replace(full, local_slopes=slopes, walkers=reading.walkers if reading is not None else None,
                   calibration_shape=shape, effects=effects, verdict=decision.verdict, reason=decision.reason,
                   brownian=decision.verdict == "brownian", verdict_full_range=full.verdict,
                   reason_full_range=full.reason, classification_full_range=full.classification,
                   classification=window_classification_of(slopes, full.flags, decision.verdict))
