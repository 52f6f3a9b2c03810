"""Size and power of the exact Brownian rule at the exact shapes of the real trajectory files.

For each CalibrationShape (shapes.py: real capture times, group sizes, within-group correlation,
dimension, sphere/hyperplane, drift handling, decay) and each process of
simulate.CALIBRATION_PROCESSES, `n_replicates` trajectories go through `battery_batch`, which applies
rule.decide: the very rule the verdicts use. Rows per (shape, process):

- test "verdict": rate_brownian / rate_not_brownian / rate_inconclusive of the verdict, and
  rejection_rate = rate of a verdict other than "brownian" (on the null: 1 - equivalence power; on an
  alternative: the power not to certify it);
- one row per key test: rejection_rate = share of p < alpha (its size on the null, power otherwise).

Shapes with fewer than rule.MIN_TIME_POINTS times are not simulated: their verdict is "inconclusive"
whatever the data. Replicates are simulated and analysed CHUNK at a time (vectorised).

Replicates. The null gets every one of `n_replicates` (its size must be known to about 1%). An
alternative stops early, after a whole chunk, once the Clopper-Pearson interval of its power excludes
POWER_GOAL (a curtailed binomial test of "power >= 0.9": 50 of 50 replicates not certified already gives
[0.93, 1]); power far from the goal is thereby known as precisely as the decision needs, and only powers
near it are simulated to the full POWER_REPLICATES_SHARE. The row's n_replicates says how many were used;
the stopping rule biases the power estimate by less than its standard error (Jennison & Turnbull 2000, ch. 12).
"""
from __future__ import annotations

import json
import logging
import time

import numpy as np
import pandas as pd

from .brownian import battery_batch
from .rule import KEY_EFFECTS, MIN_TIME_POINTS
from .shapes import CalibrationShape
from .simulate import CALIBRATION_PROCESSES, simulate_batch

log = logging.getLogger(__name__)

__all__ = ["run_calibration", "processes_for", "power_decided", "max_power_replicates", "SIZE_GOAL", "POWER_GOAL", "CHUNK"]

SIZE_GOAL = (0.0, 0.08)  # rate of "not brownian" on Brownian motion
POWER_GOAL = 0.9  # rate of a verdict other than "brownian" at each margin edge and on i.i.d. points
CHUNK = 50
#: alternatives get this share of the null's replicates: power near 0.9-1 needs fewer than a size near 0.05
#: (SE <= 2.2% at 200 replicates), and they are most of the calibration's cost
POWER_REPLICATES_SHARE = 0.5


def processes_for(kind: str) -> list[str]:
    """The null and the alternatives simulated for a kind (OU at the edge is euclidean only)."""
    return [p for p in CALIBRATION_PROCESSES if kind == "euclidean" or p != "ou_edge"]


def max_power_replicates(n_null: int) -> int:
    """The most replicates an alternative gets when the null gets `n_null` (POWER_REPLICATES_SHARE, at least CHUNK)."""
    return min(n_null, max(CHUNK, int(n_null * POWER_REPLICATES_SHARE)))


def power_decided(not_certified: int, n: int, *, goal: float = POWER_GOAL, confidence_level: float = 0.95) -> bool:
    """True when the Clopper-Pearson interval of a power estimated as not_certified / n excludes `goal`."""
    from scipy.stats import binomtest
    ci = binomtest(int(not_certified), int(n)).proportion_ci(confidence_level, method="exact")
    return bool(ci.low > goal or ci.high < goal)


def _one_cell(shape: CalibrationShape, process: str, *, n_replicates: int, seed, margins: dict, alpha: float,
              n_resamples: int, sequential: bool = False) -> dict:
    """Verdict counts and key-test rejection counts of one (shape, process); `sequential`: stop after a chunk once
    the power is decided (power_decided). "n" is the number of replicates used."""
    labels = shape.labels()
    times = np.asarray(shape.times)
    counts = {"brownian": 0, "not brownian": 0, "inconclusive": 0}
    rejects = {t: 0 for t in KEY_EFFECTS[shape.kind]}
    estimates = {t: [] for t in KEY_EFFECTS[shape.kind]}
    n_used = 0
    for c, child in enumerate(np.random.SeedSequence(seed).spawn(-(-n_replicates // CHUNK))):
        if sequential and n_used and power_decided(n_used - counts["brownian"], n_used):
            break
        R = min(CHUNK, n_replicates - c * CHUNK)
        n_used += R
        # SFC64 for the simulation: a spherical cell draws ~40M normals and SFC64 makes them ~30% faster than
        # PCG64 (both pass BigCrush / PractRand; numpy documents SFC64 as a recommended alternative)
        sim_s, boot_s = child.spawn(2)
        sim_rng, boot_rng = np.random.Generator(np.random.SFC64(sim_s)), np.random.default_rng(boot_s)
        X = simulate_batch(process, times=times, labels=labels, d=shape.d, kind=shape.kind, replicates=R, rng=sim_rng,
                           rho=shape.rho, hyperplane=shape.hyperplane, decay=shape.decay, drift=shape.drift)
        bat = battery_batch(X, kind=shape.kind, times=times, labels=labels, margins=margins, alpha=alpha,
                            drift=shape.drift if shape.kind == "euclidean" else "none", hyperplane=shape.hyperplane,
                            n_resamples=n_resamples, rng=boot_rng)
        for v in bat.verdicts:
            counts[str(v)] += 1
        for t in rejects:
            p = bat.stats[t].pvalue
            rejects[t] += int(np.sum(np.isfinite(p) & (p < alpha)))
            estimates[t].extend(bat.stats[t].estimate.tolist())
    return {"counts": counts, "rejects": rejects, "estimates": estimates, "n": n_used}


def run_calibration(shapes: list[CalibrationShape], *, n_replicates: int = 400, rng=0, alpha: float = 0.05,
                    margins: dict | None = None, n_resamples: int = 199, processes: list[str] | None = None) -> pd.DataFrame:
    """Simulate every process at every shape through the verdict rule and tabulate rates.

    Args:
        shapes: calibration shapes (shapes.shape_of); duplicates are simulated once.
        n_replicates: trajectories per shape on the null (400 gives a size SE of 1.1% at 5%); each
            alternative gets at most POWER_REPLICATES_SHARE of them (at least CHUNK), fewer when its power
            is decided earlier (module docstring).
        rng: seed; each (shape, process) cell has its own stream from (rng, shape id, process).
        alpha: the rule's level; margins: StatsConfig.margins (default config.DEFAULT_MARGINS).
        n_resamples: cluster-bootstrap resamples inside each analysis.
        processes: a subset of processes_for(kind) (default all).

    Returns:
        DataFrame with columns shape_id, kind, T, N, d, G, rho, decay, drift, hyperplane, times (JSON),
        process, role ("size" for the null, "power" otherwise), test, rejection_rate, rate_brownian,
        rate_not_brownian, rate_inconclusive, n_replicates, mean_estimate, goal_met, seconds.
    """
    from brownformer.config import DEFAULT_MARGINS
    margins = {**DEFAULT_MARGINS, **(margins or {})}
    base_seed = int(rng) if np.isscalar(rng) else 0
    rows = []
    for shape in {s.id: s for s in shapes}.values():
        if len(shape.times) < MIN_TIME_POINTS:
            log.info("calibration: shape %s has %d times < %d: not simulated (its verdict is inconclusive)",
                     shape.id, len(shape.times), MIN_TIME_POINTS)
            continue
        info = {**{k: v for k, v in shape.to_dict(full=False).items() if k != "id"}, "shape_id": shape.id,
                "times": json.dumps(list(shape.times)), "group_sizes": json.dumps(list(shape.group_sizes))}
        for p_i, process in enumerate(processes_for(shape.kind)):
            if processes is not None and process not in processes:
                continue
            t0 = time.perf_counter()
            seed = [base_seed, int(shape.id, 16) % 2**32, p_i]
            n_rep = n_replicates if process == "brownian" else max_power_replicates(n_replicates)
            cell = _one_cell(shape, process, n_replicates=n_rep, seed=seed, margins=margins, alpha=alpha,
                             n_resamples=n_resamples, sequential=process != "brownian")
            secs = time.perf_counter() - t0
            n_rep = cell["n"]
            rates = {f"rate_{k.replace(' ', '_')}": v / n_rep for k, v in cell["counts"].items()}
            role = "size" if process == "brownian" else "power"
            not_certified = 1.0 - rates["rate_brownian"]
            goal = (rates["rate_not_brownian"] <= SIZE_GOAL[1]) if role == "size" else not_certified >= POWER_GOAL
            common = {**info, "process": process, "role": role, **rates, "n_replicates": n_rep, "seconds": secs}
            rows.append({**common, "test": "verdict", "rejection_rate": not_certified, "mean_estimate": np.nan,
                         "goal_met": bool(goal)})
            for t, r in cell["rejects"].items():
                est = np.asarray(cell["estimates"][t], float)
                rows.append({**common, "test": t, "rejection_rate": r / n_rep,
                             "mean_estimate": float(np.nanmean(est)) if np.isfinite(est).any() else np.nan,
                             "goal_met": None})
            log.info("calibration %s %s (T=%d N=%d G=%d d=%d rho=%.1f): %s in %.1fs", shape.id, process,
                     len(shape.times), shape.n_walkers, len(shape.group_sizes), shape.d, shape.rho,
                     cell["counts"], secs)
    return pd.DataFrame(rows)
