"""Size and power of the exact Brownian rule at the exact shapes of the real trajectory files.

For each CalibrationShape (shapes.py: real capture times, group sizes, within-group correlation,
dimension, sphere/hyperplane, drift handling, decay; all at the data's own values) and each process of
`processes_for` (the null, simulate.CALIBRATION_PROCESSES and the margin edges of edges.py), replicates go
through `battery_batch`, which applies rule.decide: the very rule the verdicts use. A file's fitted null
(fitted_null.py) is simulated through the same rule (`calibrate_fitted`). Rows per (shape, process):

- test "verdict": rate_brownian / rate_not_brownian / rate_inconclusive of the verdict, and
  rejection_rate = rate of a verdict other than "brownian" (on the null: 1 - equivalence power; on an
  alternative: the power not to certify it), with one-sided GATE_CONFIDENCE Clopper-Pearson bounds (ci_low,
  ci_high) of the rate the gate reads (size: rate of "not brownian"; power: rejection_rate);
- one row per key test: rejection_rate = share of p < alpha (its size on the null, power otherwise).

Gates (claims/claim3_brownian.py): a verdict counts only where the size's upper bound is at most SIZE_GOAL[1] and, for
"brownian", every alternative's power has a lower bound above POWER_GOAL (a point estimate against 0.9 passes
about 20% of the time at a true power of 0.88). Shapes with fewer than rule.MIN_TIME_POINTS times are not
simulated: their verdict is "inconclusive" whatever the data. Replicates are simulated and analysed CHUNK at a time.

Sequential replicates (a curtailed binomial test of the gate; Jennison & Turnbull 2000, ch. 12): every process
stops after a chunk once the bounds decide its gate (size: 0 of 40 gives an upper bound 0.072 < 0.08; power: 40 of
40 a lower bound 0.928 > 0.9), else runs to its cap (the null: n_replicates; alternatives: max_power_replicates).
An undecided gate at the cap fails. The stopping rule biases the point estimate by less than its standard error.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from brownformer.config import DEFAULT_STATS

from brownformer.stats.diffusion.brownian import battery_batch
from brownformer.stats.diffusion.edges import edge_processes
from brownformer.stats.core.gates import GATE_CONFIDENCE, POWER_GOAL, SIZE_GOAL, cp_bounds, power_decided, size_decided
from brownformer.stats.diffusion.rule import KEY_EFFECTS, MIN_TIME_POINTS
from brownformer.stats.core.shapes import CalibrationShape
from brownformer.stats.diffusion.simulate import CALIBRATION_PROCESSES
from brownformer.stats.sphere.replica_null import simulate_null

log = logging.getLogger(__name__)

__all__ = ["run_calibration", "calibrate_fitted", "processes_for", "power_decided", "size_decided", "cp_bounds",
           "max_power_replicates", "SIZE_GOAL", "POWER_GOAL", "GATE_CONFIDENCE", "CHUNK", "KEY_COLUMNS"]

CHUNK = 40
#: a row of the table is one (shape or fitted file, process, test): tables of several runs merge on it
KEY_COLUMNS = ("shape_id", "process", "test")
#: alternatives get this share of the null's replicates at most: power near 0.9-1 needs fewer than a size near 0.05
POWER_REPLICATES_SHARE = 0.5


def processes_for(kind: str) -> list[str]:
    """The null and the alternatives simulated for a kind: exponent edges, OU at the exponent edge (euclidean),
    i.i.d. points, and the edges of every other key margin (edges.py)."""
    base = [p for p in CALIBRATION_PROCESSES if kind == "euclidean" or p != "ou_edge"]
    return base + edge_processes(kind)


def max_power_replicates(n_null: int) -> int:
    """The most replicates an alternative gets when the null gets `n_null` (POWER_REPLICATES_SHARE, at least CHUNK)."""
    return min(n_null, max(CHUNK, int(n_null * POWER_REPLICATES_SHARE)))


@dataclass(frozen=True)
class _Cell:
    """One simulated cell: verdict counts, per key test its rejections and estimates, the replicates used."""

    counts: dict[str, int]
    rejects: dict[str, int]
    estimates: dict[str, list[float]]
    n: int


def _one_cell(simulate, *, kind: str, times, labels, drift: str, hyperplane: bool, n_replicates: int, seed,
              margins: dict, alpha: float, n_resamples: int, decided, window=None) -> _Cell:
    """Verdict counts and key-test rejection counts of one (shape or fitted model, process).

    `simulate(R, rng)` draws R trajectories (R, T, N, d); `decided(counts, n)` stops after a chunk (sequential
    gate). "n" is the number of replicates used. `window` (window_reading.WindowSpec, the shape's): the MSD effect
    is the window exponent, as in the verdict.
    """
    times = np.asarray(times, float)
    counts = {"brownian": 0, "not brownian": 0, "inconclusive": 0}
    rejects = {t: 0 for t in KEY_EFFECTS[kind]}
    estimates = {t: [] for t in KEY_EFFECTS[kind]}
    n_used = 0
    for c, child in enumerate(np.random.SeedSequence(seed).spawn(-(-n_replicates // CHUNK))):
        if n_used and decided(counts, n_used):
            break
        R = min(CHUNK, n_replicates - c * CHUNK)
        n_used += R
        # SFC64 for the simulation: a spherical cell draws ~40M normals and SFC64 makes them ~30% faster than
        # PCG64 (both pass BigCrush / PractRand; numpy documents SFC64 as a recommended alternative)
        sim_s, boot_s = child.spawn(2)
        sim_rng, boot_rng = np.random.Generator(np.random.SFC64(sim_s)), np.random.default_rng(boot_s)
        X = simulate(R, sim_rng)
        bat = battery_batch(X, kind=kind, times=times, labels=labels, margins=margins, alpha=alpha,
                            drift=drift if kind == "euclidean" else "none", hyperplane=hyperplane,
                            n_resamples=n_resamples, rng=boot_rng, window=window)
        for v in bat.verdicts:
            counts[str(v)] += 1
        for t in rejects:
            p = bat.stats[t].pvalue
            rejects[t] += int(np.sum(np.isfinite(p) & (p < alpha)))
            estimates[t].extend(bat.stats[t].estimate.tolist())
    return _Cell(counts, rejects, estimates, n_used)


def _size_stop(counts, n):
    return size_decided(counts["not brownian"], n)


def _power_stop(counts, n):
    return power_decided(n - counts["brownian"], n)


def _rows(cell: _Cell, info: dict, process: str, role: str, secs: float) -> list[dict]:
    """Table rows of one cell: the verdict row with its gate bounds, then one row per key test."""
    n = cell.n
    rates = {f"rate_{k.replace(' ', '_')}": v / n for k, v in cell.counts.items()}
    not_certified = n - cell.counts["brownian"]
    if role == "power":
        lo, hi = cp_bounds(not_certified, n)
        goal = lo > POWER_GOAL
    else:
        lo, hi = cp_bounds(cell.counts["not brownian"], n)
        goal = hi <= SIZE_GOAL[1]
    common = {**info, "process": process, "role": role, **rates, "n_replicates": n, "seconds": secs}
    rows = [{**common, "test": "verdict", "rejection_rate": not_certified / n, "mean_estimate": np.nan,
             "ci_low": lo, "ci_high": hi, "goal_met": bool(goal)}]
    for t, r in cell.rejects.items():
        est = np.asarray(cell.estimates[t], float)
        rows.append({**common, "test": t, "rejection_rate": r / n, "ci_low": np.nan, "ci_high": np.nan,
                     "mean_estimate": float(np.nanmean(est)) if np.isfinite(est).any() else np.nan, "goal_met": None})
    return rows


def _defaults(margins, n_resamples):
    from brownformer.config import DEFAULT_MARGINS, StatsConfig
    return {**DEFAULT_MARGINS, **(margins or {})}, int(n_resamples or StatsConfig().n_resamples)


def run_calibration(shapes: list[CalibrationShape], *, n_replicates: int = DEFAULT_STATS.calibration_replicates,
                    rng=DEFAULT_STATS.seed, alpha: float = DEFAULT_STATS.alpha,
                    margins: dict | None = None, n_resamples: int | None = None, processes: list[str] | None = None,
                    alternatives: bool = True) -> pd.DataFrame:
    """Simulate every process at every shape through the verdict rule and tabulate rates.

    Args:
        shapes: calibration shapes (shapes.shape_of); duplicates are simulated once.
        n_replicates: the null's cap (400 gives a size SE of 1.1% at 5%); each alternative gets at most
            max_power_replicates of them; both stop once their gate is decided (module docstring).
        rng: seed; each (shape, process) cell has its own stream from (rng, shape id, process).
        alpha: the rule's level; margins: StatsConfig.margins (default config.DEFAULT_MARGINS).
        n_resamples: cluster-bootstrap resamples inside each analysis: the data's own count (StatsConfig.n_resamples,
            its default when None), so that the simulated rule is the rule applied.
        processes: a subset of processes_for(kind) (default all).
        alternatives: False simulates the null only (power is needed only to certify "brownian").

    Returns:
        DataFrame with columns shape_id, kind, T, N, d, G, rho, decay, drift, hyperplane, times (JSON), window (JSON
        of the shape's window_reading.WindowSpec, or None: the full-range rule),
        process, role ("size" for the null, "power" otherwise), test, rejection_rate, rate_brownian,
        rate_not_brownian, rate_inconclusive, n_replicates, ci_low, ci_high, mean_estimate, goal_met, seconds.
    """
    margins, n_resamples = _defaults(margins, n_resamples)
    base_seed = int(rng) if np.isscalar(rng) else 0
    rows = []
    for shape in {s.id: s for s in shapes}.values():
        if len(shape.times) < MIN_TIME_POINTS:
            log.info("calibration: shape %s has %d times < %d: not simulated (its verdict is inconclusive)",
                     shape.id, len(shape.times), MIN_TIME_POINTS)
            continue
        info = {**{k: v for k, v in shape.to_dict(full=False).items() if k != "id"}, "shape_id": shape.id,
                "times": json.dumps(list(shape.times)), "group_sizes": json.dumps(list(shape.group_sizes)),
                "window": json.dumps(shape.window.to_dict()) if shape.window is not None else None}  # parquet: a string
        labels, times = shape.labels(), np.asarray(shape.times)
        for p_i, process in enumerate(processes_for(shape.kind)):
            if (processes is not None and process not in processes) or (not alternatives and process != "brownian"):
                continue
            t0 = time.perf_counter()
            role = "size" if process == "brownian" else "power"

            def sim(R, g, process=process):
                w = shape.window  # a training file's momentum: its null is Brownian motion through it
                return simulate_null(process, times=times, labels=labels, d=shape.d, kind=shape.kind, replicates=R,
                                      rng=g, rho=shape.rho, hyperplane=shape.hyperplane, decay=shape.decay,
                                      drift=shape.drift, margins=margins, momentum=w.momentum if w else 0.0,
                                      steps=w.steps if w else None, replicas=w.replicas if w else 0,
                                      replica_start=w.replica_start if w else 0.0)

            cell = _one_cell(sim, kind=shape.kind, times=times, labels=labels, drift=shape.drift,
                             hyperplane=shape.hyperplane, seed=[base_seed, int(shape.id, 16) % 2**32, p_i],
                             n_replicates=n_replicates if role == "size" else max_power_replicates(n_replicates),
                             margins=margins, alpha=alpha, n_resamples=n_resamples,
                             decided=_size_stop if role == "size" else _power_stop, window=shape.window)
            rows += _rows(cell, info, process, role, time.perf_counter() - t0)
            log.info("calibration %s %s (T=%d N=%d G=%d d=%d rho=%.3g): %s in %.1fs", shape.id, process,
                     len(shape.times), shape.n_walkers, len(shape.group_sizes), shape.d, shape.rho,
                     cell.counts, rows[-1]["seconds"])
    return pd.DataFrame(rows)


def calibrate_fitted(null, fit_id: str, *, n_replicates: int = DEFAULT_STATS.calibration_replicates,
                     rng=DEFAULT_STATS.seed, alpha: float = DEFAULT_STATS.alpha,
                     margins: dict | None = None, n_resamples: int | None = None, window=None) -> pd.DataFrame:
    """Size of the rule on a file's fitted null (fitted_null.FittedNull): rows with shape_id = `fit_id`,
    process "fitted", role "size", sequential like the idealised null; `window`: the file's
    window_reading.WindowSpec (its calibration shape's), on which the verdict's MSD effect is read."""
    from brownformer.stats.diffusion.fitted_null import simulate_fitted
    margins, n_resamples = _defaults(margins, n_resamples)
    if null.times.size < MIN_TIME_POINTS:
        return pd.DataFrame()
    t0 = time.perf_counter()
    cell = _one_cell(lambda R, g: simulate_fitted(null, replicates=R, rng=g), kind=null.kind, times=null.times,
                     labels=null.labels, drift=null.drift, hyperplane=null.hyperplane, n_replicates=n_replicates,
                     seed=[int(rng) if np.isscalar(rng) else 0, int(fit_id.split("-")[-1], 16) % 2**32],
                     margins=margins, alpha=alpha, n_resamples=n_resamples, decided=_size_stop, window=window)
    info = {"shape_id": fit_id, "kind": null.kind, "T": int(null.times.size), "N": int(null.labels.size),
            "d": int(null.coord_scale.size), "G": int(null.labels.max()) + 1, "drift": null.drift,
            "rho": null.rho_within, "fitted": json.dumps(null.summary().to_dict())}
    return pd.DataFrame(_rows(cell, info, "fitted", "size", time.perf_counter() - t0))
