"""One trajectory's claim-3 verdict as the pipeline decides it: the battery (brownian.analyze_trajectory), then the
reading on the window fixed before the data (window_reading.window_reading) on which the verdict is re-decided.

`trajectory_verdict` is a pure function of the array and its sidecar dict: stats_stage/run_stats.py calls it on every
trajectory file, and stats/controls/positive_controls.py on the processes built to say yes (or no). A training file whose
sidecar declares its optimizer's "momentum" is kept to the captures of its momentum window, and its full-range key
effects lose what momentum alone gives them (brownian.momentum_bias), as the calibration does (brownian.
battery_batch with the file's window).
"""
from __future__ import annotations

import logging

import numpy as np

from brownformer.stats.diffusion.brownian import analyze_trajectory
from brownformer.stats.diffusion.trajectory_inputs import battery_inputs

log = logging.getLogger(__name__)

__all__ = ["trajectory_verdict", "momentum_captures"]


def trajectory_verdict(X: np.ndarray, meta: dict, *, stats, calibration=None, min_lag_steps: int = 0) -> dict:
    """The battery, the window reading and the verdict of one trajectory X (T, N, d) with its sidecar `meta`
    ("kind", "times" and the optional sidecar keys of docs/ARTIFACTS.md).

    Args:
        stats: StatsConfig; calibration: a calibration table (rows at the file's shape attached) or None.
        min_lag_steps: the run's momentum time in steps (config.ExperimentConfig.analysis_window(run).min_gap), for a
            file whose sidecar gives no momentum of its own.
    """
    X, meta = momentum_captures(X, meta, stats)
    out = analyze_trajectory(X, kind=meta["kind"], times=meta["times"], confidence_level=stats.confidence_level,
                             n_resamples=stats.n_resamples, alpha=stats.alpha, margins=dict(stats.margins),
                             max_walkers=stats.max_walkers, rng=stats.seed, calibration=calibration,
                             check_clocks=_check_clocks(meta, X.shape[0]), **battery_inputs(meta, meta["kind"]))
    _add_window(out, X, meta, stats, min_lag_steps)
    return out


def _check_clocks(meta: dict, T: int) -> dict:
    clocks = {}
    for name, values in (meta.get("clocks") or {}).items():
        t = np.asarray(values, float)
        if name != meta.get("time") and t.shape == (T,) and np.all(np.diff(t) > 0):
            clocks[name] = t
    return clocks


def momentum_captures(X: np.ndarray, meta: dict, stats) -> tuple[np.ndarray, dict]:
    """A training file with a sidecar "momentum" and a step clock, kept to the captures of its analysis window:
    from max(warm-up, the momentum time) on, spaced at least one momentum time apart (local_slope.sidecar_window, the
    rule config.AnalysisWindow applies to the pipeline's replica files, which come thinned: their sidecar "window").
    Increments shorter than the momentum time carry the optimizer's filter, not the walk."""
    from brownformer.config import AnalysisWindow
    from brownformer.stats.diffusion.local_slope import sidecar_window
    steps = (meta.get("clocks") or {}).get("step")
    if not meta.get("momentum") or isinstance(meta.get("window"), dict) or steps is None or len(steps) != X.shape[0]:
        return X, meta
    start, gap, beta = sidecar_window(meta, start_step=stats.window["start_step"], momentum_times=stats.momentum_times)
    keep = AnalysisWindow(int(start or 0), gap, 1.0 / (1.0 - beta)).select([int(s) for s in steps])
    if len(keep) == X.shape[0]:
        return X, meta
    clocks = {name: [v[i] for i in keep] for name, v in (meta.get("clocks") or {}).items() if len(v) == X.shape[0]}
    log.info("%s: %d of %d captures in the momentum window (from step %s, >= %d steps apart)", meta.get("path"),
             len(keep), X.shape[0], start, gap)
    return X[keep], {**meta, "times": [meta["times"][i] for i in keep], "clocks": clocks,
                     "momentum_captures": {"kept": keep, "n_total": int(X.shape[0])}}


def _momentum_shifted(effects: dict, bias: dict, *, n_groups: int, alpha: float) -> dict:
    """Stored key effects less what momentum alone gives them (brownian.momentum_bias, the block's
    "momentum_bias"), through the rule's rule.shift_effect (the raw values are the shifted ones plus that bias)."""
    from brownformer.stats.diffusion.rule import Effect, shift_effect
    out = dict(effects)
    for name, b in (bias or {}).items():
        e = out.get(name)
        if name == "msd_exponent" or not isinstance(e, dict) or e.get("estimate") is None:
            continue
        arr = lambda v: np.array([np.nan if v is None else float(v)])  # noqa: E731
        lo, hi = e.get("tost_interval") or [None, None]
        s = shift_effect(Effect(arr(e["estimate"]), arr(lo), arr(hi), arr(e.get("pvalue"))), b["bias"],
                         b["null_value"], n_groups=n_groups, alpha=alpha)
        ci = [None if v is None else float(v) - b["bias"] for v in e.get("confidence_interval") or [None, None]]
        out[name] = {**e, "estimate": float(s.estimate[0]), "tost_interval": [float(s.tost_low[0]), float(s.tost_high[0])],
                     "confidence_interval": ci, "pvalue": float(s.pvalue[0])}
    return out


def _add_window(out: dict, X: np.ndarray, meta: dict, stats, min_lag_steps: int = 0) -> None:
    """Claim 3's reading on the pre-fixed window (stats/diffusion/window_reading.py): "local_slopes", "walkers", and the
    verdict and classification re-decided on the window exponent (the full-range ones are kept as
    "verdict_full_range", "classification_full_range"); the calibration shape gets the window (WindowSpec), so
    that the calibration simulates this verdict's rule."""
    from brownformer.stats.core.bootstrap import group_labels
    from brownformer.stats.diffusion.local_slope import sidecar_window
    from brownformer.stats.diffusion.rule import decide_one
    from brownformer.stats.core.shapes import CalibrationShape, select_walkers
    from brownformer.stats.diffusion.brownian import momentum_bias
    from brownformer.stats.diffusion.window_reading import WindowSpec, window_effects, window_classification, window_reading
    inputs = battery_inputs(meta, out["kind"])
    labels = group_labels(X.shape[1], groups=inputs["groups"], n_inputs=inputs["n_inputs"], n_tokens=inputs["n_tokens"])
    idx = select_walkers(labels, stats.max_walkers, np.random.default_rng(stats.seed))  # the battery's walkers
    steps = (meta.get("clocks") or {}).get("step")
    steps = steps if steps is not None and len(steps) == X.shape[0] else None
    side = {**meta, "n_tokens": meta.get("n_tokens") if idx.size == X.shape[1] else None}  # positions need all walkers
    sub_labels = np.unique(labels[idx], return_inverse=True)[1]
    start, lag, beta = sidecar_window(meta, start_step=stats.window["start_step"], momentum_times=stats.momentum_times,
                                      min_lag_steps=min_lag_steps)
    try:
        block = window_reading(X[:, idx], out["times"], kind=out["kind"], labels=sub_labels,
                               k=out["span_dimension"], hyperplane=out["hyperplane"],
                               drift=inputs["drift"] if out["kind"] == "euclidean" else "none", steps=steps,
                               meta=side, stats=stats, rho=out.get("within_group_correlation") or 0.0, rng=stats.seed,
                               min_lag_steps=lag if steps is not None else 0, start_step=start, momentum=beta)
    except (ValueError, ArithmeticError, IndexError, np.linalg.LinAlgError) as exc:  # keep the battery's result
        log.warning("window reading failed: %s", exc)
        why = f"window reading failed: {exc}"
        block = {"classification": "inconclusive", "description": why,
                 "effect": {"estimate": None, "confidence_interval": [None, None], "tost_interval": [None, None],
                            "why_undefined": why}}
    spec = WindowSpec.from_dict(block.get("spec"))
    if spec is not None and spec.carries_physics and block.get("effect", {}).get("estimate") is not None:
        block["momentum_bias"] = {name: {"bias": b, "null_value": nv} for name, (b, nv) in momentum_bias(
            out["times"], spec, sub_labels, d=X.shape[-1], kind=out["kind"], k=out["span_dimension"],
            hyperplane=out["hyperplane"], drift=inputs["drift"] if out["kind"] == "euclidean" else "none",
            margins=dict(stats.margins), alpha=stats.alpha, n_resamples=stats.n_resamples).items()}
    out["walkers"] = block.pop("walkers", None)
    out["local_slopes"] = block
    if block.get("spec") and out.get("calibration_shape"):
        out["calibration_shape"] = {**out["calibration_shape"], "window": block["spec"]}
        if spec is not None and spec.replicas:  # the sphere the contrasted walks live on: the null's decay and plane
            from brownformer.stats.sphere.replica_null import contrast_decay
            from brownformer.stats.core.shapes import sphere_decay
            out["calibration_shape"].update(decay=sphere_decay(contrast_decay(X[:, idx])),
                                            hyperplane=spec.replica_hyperplane)
        out["calibration_shape"] = CalibrationShape.from_dict(out["calibration_shape"]).to_dict()  # id, geometry
    if block.get("momentum_bias"):
        out["effects"] = _momentum_shifted(out.get("effects") or {}, block["momentum_bias"],
                                           n_groups=int(out.get("n_groups") or 0), alpha=stats.alpha)
    out["verdict_full_range"], out["reason_full_range"] = out["verdict"], out["reason"]
    out["verdict"], out["reason"] = decide_one(window_effects(out), kind=out["kind"], margins=dict(stats.margins),
                                               alpha=stats.alpha, n_times=int(out["n_times"]),
                                               n_groups=out.get("n_groups"))
    out["brownian"] = out["verdict"] == "brownian"
    null = ((block.get("effect") or {}).get("null") or {})
    if out["verdict"] == "inconclusive" and null.get("equivalence_power") is not None:
        # how often the window exponent alone certifies Brownian motion simulated at this file's shape: a low
        # value says the data are too few to decide, not that the walk is not Brownian (the full rule's power
        # needs the calibration: `stats trajectory --calibrate` or the pipeline's calibrate stage)
        out["reason"] += (f" (power at this shape: the window exponent certifies {null['equivalence_power']:.0%} of "
                          f"{null.get('n_replicates')} Brownian motions simulated at it)")
    out["classification_full_range"] = out["classification"]
    out["classification"] = window_classification(out)
