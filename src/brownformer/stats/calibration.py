"""Size and power of the battery on simulated processes of the same shape as the real data.

For each shape (T, N, d, kind) and each process of simulate.PROCESSES, `n_replicates`
independent trajectories go through the identical `analyze_trajectory`; a test's rejection
rate on "brownian" is its empirical size (goal: within [2%, 8%] at nominal 5%), on the others
its power (goal: >= 0.9). The row test == "classification" gives the rate at which the verdict
is not "brownian" (size for the null, power for the alternatives).
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from .brownian import analyze_trajectory
from .simulate import PROCESSES, simulate

log = logging.getLogger(__name__)

__all__ = ["run_calibration", "calibration_for", "SIZE_GOAL", "POWER_GOAL", "DEFAULT_SHAPES"]

SIZE_GOAL = (0.02, 0.08)
POWER_GOAL = 0.9
#: shapes of the default pipeline: a training-time trajectory and a depth trajectory
DEFAULT_SHAPES = [(50, 256, 16, "euclidean"), (50, 256, 16, "sphere"), (5, 256, 32, "sphere"), (5, 256, 32, "euclidean")]


def run_calibration(*, shapes=None, n_replicates: int = 50, rng=0, alpha: float = 0.05, processes=None,
                    n_resamples: int = 199, margins: dict | None = None) -> pd.DataFrame:
    """Simulate every process at every shape and record rejection rates of the battery.

    Args:
        shapes: list of (T, N, d, kind); default DEFAULT_SHAPES.
        n_replicates: trajectories per (shape, process).
        rng: seed; replicate r of a cell uses an independent child seed.
        alpha: nominal level of every test.
        processes: subset of PROCESSES (default all).
        n_resamples: walker-bootstrap resamples inside each analysis.
        margins: equivalence margins passed to analyze_trajectory.

    Returns:
        DataFrame with columns process, kind, T, N, d, test, rejection_rate, n_replicates,
        brownian_rate, mean_estimate, role ("size" for the null, "power" otherwise), goal_met.
    """
    shapes = shapes or DEFAULT_SHAPES
    processes = list(processes or PROCESSES)
    seeds = np.random.SeedSequence(rng)
    rows = []
    for T, N, d, kind in shapes:
        for process in processes:
            cell = seeds.spawn(1)[0]
            rejects: dict[str, list] = {}
            estimates: dict[str, list] = {}
            brown = []
            for child in cell.spawn(n_replicates):
                g = np.random.default_rng(child)
                X = simulate(process, T, N, d, kind=kind, rng=g)
                out = analyze_trajectory(X, kind=kind, alpha=alpha, n_resamples=n_resamples, rng=g, supplements=False,
                                         margins=margins, max_walkers=N)
                brown.append(out["brownian"])
                for t in out["tests"]:
                    rejects.setdefault(t["name"], []).append(bool(t["reject"]))
                    estimates.setdefault(t["name"], []).append(np.nan if t["estimate"] is None else t["estimate"])
            rejects["classification"] = [not b for b in brown]
            estimates["classification"] = [float(b) for b in brown]
            role = "size" if process == "brownian" else "power"
            for test, r in rejects.items():
                rate = float(np.mean(r))
                goal = (SIZE_GOAL[0] <= rate <= SIZE_GOAL[1]) if role == "size" else rate >= POWER_GOAL
                if test == "classification" and role == "size":
                    goal = rate <= SIZE_GOAL[1]
                rows.append({"process": process, "kind": kind, "T": T, "N": N, "d": d, "test": test,
                             "rejection_rate": rate, "n_replicates": n_replicates, "brownian_rate": float(np.mean(brown)),
                             "mean_estimate": float(np.nanmean(estimates[test])) if np.isfinite(estimates[test]).any() else np.nan,
                             "role": role, "goal_met": bool(goal)})
            log.info("calibration %s %s T=%d N=%d d=%d: brownian rate %.2f", process, kind, T, N, d, np.mean(brown))
    return pd.DataFrame(rows)


def calibration_for(table: pd.DataFrame, *, kind: str, T: int, N: int, d: int) -> dict | None:
    """Rows of the calibration table for the simulated shape nearest to (T, N, d) of the same kind.

    Distance: |log T ratio| + |log N ratio| + |log d ratio|. Returns size per test, power per
    process and test, the classification's size and minimum power, and the matched shape.
    """
    if table is None or len(table) == 0:
        return None
    sub = table[table["kind"] == kind]
    if sub.empty:
        return None
    shapes = sub[["T", "N", "d"]].drop_duplicates()
    dist = (np.abs(np.log(shapes["T"] / T)) + np.abs(np.log(shapes["N"] / N)) + np.abs(np.log(shapes["d"] / d)))
    best = shapes.iloc[int(np.argmin(dist.to_numpy()))]
    cell = sub[(sub["T"] == best["T"]) & (sub["N"] == best["N"]) & (sub["d"] == best["d"])]
    size = cell[cell["role"] == "size"].set_index("test")["rejection_rate"].to_dict()
    power = {p: g.set_index("test")["rejection_rate"].to_dict() for p, g in cell[cell["role"] == "power"].groupby("process")}
    cls_power = [v.get("classification", np.nan) for v in power.values()]
    return {"shape": {"T": int(best["T"]), "N": int(best["N"]), "d": int(best["d"]), "kind": kind},
            "exact_match": bool(best["T"] == T and best["N"] == N and best["d"] == d),
            "size": size, "power": power,
            "classification_size": size.get("classification"),
            "classification_min_power": float(np.nanmin(cls_power)) if cls_power else None,
            "n_replicates": int(cell["n_replicates"].iloc[0])}
