"""`brownformer stats trajectory FILE --calibrate`: the rule calibrated at a user's array's own shape.

The pipeline calibrates every decided file of a run (stages.stats_calibrate); a user's array gets the same
cells at its own shape: the idealised null and every alternative (exponent, OU, i.i.d. and the edges of every
key margin) and the fitted null. A first chunk of PROBE_REPLICATES null replicates is timed and the worst-case cost
(every process to its cap) is reported before the rest runs; the sequential gates usually stop far earlier.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

import numpy as np

from brownformer.statsfile import BatteryStats, FittedNullInfo

__all__ = ["calibrate_result", "cost_estimate", "CalibrationCost", "PROBE_REPLICATES"]

PROBE_REPLICATES = 4


@dataclass(frozen=True)
class CalibrationCost:
    """What calibrating one shape costs: seconds per simulated replicate (timed on PROBE_REPLICATES), the worst case
    of the whole calibration, the replicates at most per null (`null_cap`) and per alternative, how many alternatives."""

    seconds_per_replicate: float
    worst_case_seconds: float
    null_cap: int
    alternatives: int
    alternative_cap: int


def cost_estimate(shape, *, stats) -> CalibrationCost:
    """Seconds of a PROBE_REPLICATES-replicate null chunk and the worst case of the whole calibration."""
    from brownformer.stats.diffusion.brownian import battery_batch
    from brownformer.stats.core.calibration import max_power_replicates, processes_for
    from brownformer.stats.diffusion.simulate import simulate_batch
    t0 = time.perf_counter()
    times, labels = np.asarray(shape.times), shape.labels()
    X = simulate_batch("brownian", times=times, labels=labels, d=shape.d, kind=shape.kind,
                       replicates=PROBE_REPLICATES, rng=0, rho=shape.rho, hyperplane=shape.hyperplane,
                       decay=shape.decay, drift=shape.drift, margins=dict(stats.margins))
    battery_batch(X, kind=shape.kind, times=times, labels=labels, margins=dict(stats.margins), alpha=stats.alpha,
                  window=shape.window,
                  drift=shape.drift if shape.kind == "euclidean" else "none", hyperplane=shape.hyperplane,
                  n_resamples=stats.n_resamples, rng=0)
    per_rep = (time.perf_counter() - t0) / PROBE_REPLICATES
    n = int(stats.calibration_replicates)
    n_alt = len(processes_for(shape.kind)) - 1
    worst = per_rep * (2 * n + n_alt * max_power_replicates(n))  # idealised + fitted nulls, alternatives
    return CalibrationCost(per_rep, worst, n, n_alt, max_power_replicates(n))


def calibrate_result(file, result: BatteryStats, *, stats, kind: str | None = None, echo=None) -> BatteryStats:
    """`result` (trajectory_file_stats) with the calibration at its own shape and the gated verdict."""
    import pandas as pd

    from brownformer.stats.core.calibration import calibrate_fitted, run_calibration
    from brownformer.stats.claims.claim3_brownian import file_verdict
    from brownformer.stats.diffusion.rule import MIN_TIME_POINTS
    from brownformer.stats.core.shapes import CalibrationShape, calibration_for, fitted_calibration_for
    from .trajectory_io import fit_file_null
    echo = echo or (lambda msg: print(msg, file=sys.stderr))
    shape = CalibrationShape.from_dict(result.calibration_shape)
    if len(shape.times) < MIN_TIME_POINTS:
        return replace(result, calibration_note=f"not calibrated: {len(shape.times)} time points < {MIN_TIME_POINTS}, "
                                                "the verdict is inconclusive whatever the calibration")
    cost = cost_estimate(shape, stats=stats)
    echo(f"calibration at this array's shape (T={len(shape.times)}, N={shape.n_walkers}, G={len(shape.group_sizes)}, "
         f"d={shape.d}): {cost.seconds_per_replicate:.3f} s per replicate; at most {cost.null_cap} replicates "
         f"for each null and {cost.alternative_cap} for each of {cost.alternatives} alternatives, i.e. at most "
         f"{cost.worst_case_seconds:.0f} s (sequential gates usually stop after 40 replicates per process)")
    t0 = time.perf_counter()
    kw = {"n_replicates": int(stats.calibration_replicates), "rng": stats.seed, "alpha": stats.alpha,
          "margins": dict(stats.margins), "n_resamples": stats.n_resamples}
    fid, null = fit_file_null(file, stats=stats, kind=kind)
    table = pd.concat([run_calibration([shape], **kw), calibrate_fitted(null, fid, window=shape.window, **kw)],
                      ignore_index=True)
    verdict, reason, _ = file_verdict(result.to_dict(), stats, table)  # the claims' gates read the file as written
    return replace(result, rule_verdict=result.verdict, rule_reason=result.reason, verdict=verdict, reason=reason,
                   brownian=verdict == "brownian", calibration=calibration_for(table, shape),
                   fitted_null=FittedNullInfo(fid, fitted_calibration_for(table, fid), null.summary()),
                   calibration_seconds=time.perf_counter() - t0, calibration_note=None)
