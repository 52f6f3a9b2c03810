"""Calibration shapes: what a simulated trajectory must share with a real one, and the table lookup.

A verdict is certified by simulating its exact rule on trajectories of the same shape: the same
capture times (relative spacing, which is all a scale-free rule sees), the same group sizes, the same
dimension, sphere (and LayerNorm's hyperplane) or euclidean, the same drift handling, the data's own
within-group correlation and, on the sphere, the data's own total decay (both to SIGNIFICANT digits, like the
times: no grid, no clipping, since size moves with both; until issue 19 they were rounded to steps of 0.2,
clipped at 0.8 and decays rounded to powers of 4). The only limits are those of the simulated model: a
correlation of the shared-noise form lies in [0, RHO_MAX], and a walk that decorrelated before its last capture
(undefined decay) is simulated at DECAY_DECORRELATED. `shape_of` computes it from the data; `calibration_for` finds the rows of
the calibration table for exactly that shape (None when there are none: the claim is then
"inconclusive", never "supported").
"""
from __future__ import annotations

import json

import numpy as np

from brownformer.statsfile import (RULE_VERDICTS, CalibrationShape, FittedCalibration, FittedModel, Keyed, KeyedValue,
                                   ProcessRates, ShapeCalibration)

__all__ = ["CalibrationShape", "shape_of", "calibration_for", "fitted_calibration_for", "select_walkers", "sphere_decay", "SIGNIFICANT", "RHO_MAX",
           "DECAY_DECORRELATED"]

#: significant digits kept of every real-valued shape parameter (a shape id must not depend on float noise)
SIGNIFICANT = 4
#: shared-noise correlations sqrt(rho) xi_g + sqrt(1 - rho) xi_i lie in [0, 1); 0.99 keeps the own part
RHO_MAX = 0.99
#: a sphere walk whose mean cosine between first and last capture is <= 0 has decorrelated: simulated at this decay
DECAY_DECORRELATED = 16.0


def _sig(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


def _relative_times(times: np.ndarray) -> tuple[float, ...]:
    s = (times - times[0]) / (times[-1] - times[0])
    return tuple(_sig(x) for x in s)


def _generating_rho(r: float, *, G: int, N: int) -> float:
    """The within-group correlation rho of the increments whose estimate after removing the common drift
    (the mean over all N walkers) is r: that removal turns rho into
    r = [rho (1 - 1/G) - (1 - rho)/N] / [rho (1 - 1/G) + (1 - rho)(1 - 1/N)] (equal groups); solved for rho."""
    if G < 2 or G == N:
        return r
    a, b = 1 - 1 / G, 1 / N
    return (r * (1 - b) + b) / (a * (1 - r) + b + r * (1 - b))


def shape_of(*, kind: str, times, labels: np.ndarray, d: int, hyperplane: bool, drift: str, rho: float,
             decay: float | None, window=None) -> CalibrationShape:
    """The calibration shape of one analysed trajectory (after walker subsampling).

    Args:
        rho: the within-group correlation of its increments (battery.within_group_correlation), as
            estimated after the drift handling (the generating value is recovered for "common" drift).
        decay: sphere: -ln of the mean cosine between first and last capture (None or <= 0 when the
            walk has decorrelated: the largest decay).
        window: the window_reading.WindowSpec the verdict's MSD effect is read on (None: the full-range exponent).
    """
    sizes = np.bincount(labels)
    r = _generating_rho(float(np.nan_to_num(rho)), G=sizes.size, N=int(labels.size)) if drift == "common" else rho
    r = _sig(float(np.clip(np.nan_to_num(r), 0.0, RHO_MAX)))
    dec = sphere_decay(decay) if kind == "sphere" else 0.0
    return CalibrationShape(kind, _relative_times(np.asarray(times, float)), tuple(sorted(sizes.tolist(), reverse=True)),
                            int(d), bool(hyperplane), drift, r, dec, window)


def sphere_decay(decay: float | None) -> float:
    """A sphere walk's total decay as a shape records it: SIGNIFICANT digits, DECAY_DECORRELATED when undefined."""
    return DECAY_DECORRELATED if decay is None or not np.isfinite(decay) or decay <= 0 else _sig(float(decay))


def select_walkers(labels: np.ndarray, max_walkers: int, rng) -> np.ndarray:
    """Indices of at most `max_walkers` walkers (seeded); all if they fit.

    Every group keeps walkers: the cluster bootstrap's unit is the group, so dropping whole groups (the earlier
    rule) could leave fewer groups than the rule needs (5 replica contrasts x 136 walkers at 512 kept 3). Walkers
    are thinned within groups to a common cap, the largest with sum_g min(n_g, cap) <= max_walkers (smaller groups
    are kept whole); the calibration shape records the thinned group sizes, so the calibration simulates this
    selection's shape. With more groups than `max_walkers`, one walker of each of `max_walkers` random groups.
    """
    N = labels.size
    if not max_walkers or N <= max_walkers:
        return np.arange(N)
    rng = np.random.default_rng(rng)
    G = int(labels.max()) + 1
    if G == N:
        return np.sort(rng.choice(N, size=max_walkers, replace=False))
    sizes = np.bincount(labels, minlength=G)
    quota = np.zeros(G, int)
    if G > max_walkers:
        quota[rng.choice(G, size=max_walkers, replace=False)] = 1
    else:
        quota[:] = sizes
        left, order = max_walkers, np.argsort(sizes, kind="stable")
        for i, g in enumerate(order):  # water-filling from the smallest group up
            share = left // (G - i)
            if sizes[g] > share:
                quota[order[i:]] = share
                break
            left -= sizes[g]
    keep = [rng.choice(np.flatnonzero(labels == g), size=quota[g], replace=False) for g in range(G) if quota[g]]
    return np.sort(np.concatenate(keep))


def _gate_bounds(r, rate: float) -> tuple[float, float]:
    """(low, high) bounds of a row's gate rate: stored columns, else recomputed from rate x n."""
    lo, hi = getattr(r, "ci_low", np.nan), getattr(r, "ci_high", np.nan)
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        return float(lo), float(hi)
    from brownformer.stats.core.gates import cp_bounds
    return cp_bounds(int(round(rate * int(r.n_replicates))), int(r.n_replicates))


def calibration_for(table, shape: CalibrationShape) -> ShapeCalibration | None:
    """Size and power of the rule at exactly `shape` from the calibration table, or None.

    Returns:
        statsfile.ShapeCalibration: size (rate of "not brownian" on Brownian motion), size_upper (its one-sided
        Clopper-Pearson upper bound, gates.GATE_CONFIDENCE), size_se, equivalence_power (rate of "brownian" on
        Brownian motion), power {alternative: rate of a verdict other than "brownian"}, power_lower {alternative: its
        lower bound} (empty when the alternatives were not simulated at this shape), rates {process: {verdict:
        rate}}, n_replicates, power_n_replicates.
    """
    if table is None or len(table) == 0 or "shape_id" not in table:
        return None
    cell = table[(table["shape_id"] == shape.id) & (table["test"] == "verdict")]
    if cell.empty:
        return None
    rates = {str(r.process): {"brownian": float(r.rate_brownian), "not brownian": float(r.rate_not_brownian),
                              "inconclusive": float(r.rate_inconclusive)} for r in cell.itertuples()}
    reps = dict(zip(cell["process"].astype(str), cell["n_replicates"].astype(int)))
    bounds = {str(r.process): _gate_bounds(r, float(r.rate_not_brownian) if r.process == "brownian"
                                           else 1.0 - float(r.rate_brownian)) for r in cell.itertuples()}
    null = rates.get("brownian")
    if null is None:
        return None
    size, n = null["not brownian"], reps["brownian"]
    smooth = (size * n + 1) / (n + 2)  # (k + 1)/(n + 2): a size of 0 in n replicates is not known to +-0
    alts = [p for p in rates if p != "brownian"]
    return ShapeCalibration(shape.summary(), size, bounds["brownian"][1], float(np.sqrt(smooth * (1 - smooth) / n)),
                            null["brownian"], KeyedValue.mapping({p: 1.0 - rates[p]["brownian"] for p in alts}),
                            KeyedValue.mapping({p: bounds[p][0] for p in alts}),
                            Keyed.of(ProcessRates(*(v[verdict] for verdict in RULE_VERDICTS), process=p)
                                     for p, v in rates.items()),
                            n, min((reps[p] for p in alts), default=None))


def fitted_calibration_for(table, fit_id: str | None) -> FittedCalibration | None:
    """Size of the rule under a file's fitted null (calibration.calibrate_fitted rows), or None."""
    if table is None or fit_id is None or len(table) == 0 or "shape_id" not in table:
        return None
    cell = table[(table["shape_id"] == fit_id) & (table["test"] == "verdict") & (table["process"] == "fitted")]
    if cell.empty:
        return None
    r = next(cell.itertuples())
    lo, hi = _gate_bounds(r, float(r.rate_not_brownian))
    fitted = getattr(r, "fitted", None)
    return FittedCalibration(fit_id, float(r.rate_not_brownian), hi, int(r.n_replicates), float(r.rate_brownian),
                             FittedModel.from_dict(json.loads(fitted), f"fitted null {fit_id}")
                             if isinstance(fitted, str) else None)
