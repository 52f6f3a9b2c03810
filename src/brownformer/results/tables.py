"""Derived tables that a figure and the report both quote, computed once so that they cannot disagree."""
from __future__ import annotations

import numpy as np
import pandas as pd

from brownformer.results.reader import Results
from brownformer.stats.claims.details import Claim4ModelDetails

__all__ = ["time_to_target_table", "calibration_matrix", "goal_text", "replicates_text"]

#: the calibration table's row for the whole decision rule (stats/core/calibration.py)
RULE_ROW = "verdict"


def _times_from_claims(res: Results) -> pd.DataFrame:
    """The per-run times claim 4's verdict used, from claims.json (per_model details "runs")."""
    claim = res.claims.claims.get("4") if res.claims else None
    rows = []
    for model, rec in sorted(getattr(claim, "per_model", {}).items()):
        d = rec.details
        if not isinstance(d, Claim4ModelDetails):  # a record without the comparison's runs
            continue
        for run in d.runs or []:
            if isinstance(run, dict):
                rows.append({**run, "model": model, "metric": d.metric, "target": d.target,
                             "higher_is_better": d.higher_is_better})
    return pd.DataFrame(rows)


def _times_from_rule(res: Results) -> pd.DataFrame:
    """Claim 4's rule applied to the runs' metrics (when claims.json does not carry the times)."""
    from brownformer.stats.claims.claim4_optimizer import claim4_targets
    from brownformer.stats.comparison.time_to_target import time_to_target as time_to_target_rule

    by_run = res.metrics_by_run()
    if not by_run:
        return pd.DataFrame()
    cfg = res.cfg
    targets = {t.model: t.value for t in claim4_targets(by_run, cfg.report)}
    outcome = time_to_target_rule(by_run, targets, stats=cfg.stats, report=cfg.report)
    return pd.concat([r.runs.assign(model=r.model, metric=r.metric, target=r.target, higher_is_better=r.higher_is_better)
                      for r in outcome], ignore_index=True) if outcome else pd.DataFrame()


def time_to_target_table(res: Results) -> pd.DataFrame:
    """Steps and seconds each run needs to reach its model's claim-4 target.

    The numbers are the ones claim 4's verdict used (claims.json, per model variant); without them
    in claims.json, claim 4's own rule (brownformer.stats.comparison.time_to_target) applied to the metrics.
    The figure and the report's optimizer comparison both quote this table.

    Returns:
        One row per run: model, optimizer, seed, run, metric, target, final, reached, steps, seconds
        (NaN when the run never reaches the target), stopped, and total_seconds (its last wall-clock).
        A run stopped at the target (brownformer.target_stop) has no final value or total time (NaN).
        Empty without metrics.
    """
    table = _times_from_claims(res)
    if table.empty:
        table = _times_from_rule(res)
    if table.empty:
        return table
    last_wall = res.metrics.groupby("run")["wall_time"].last() if "wall_time" in res.metrics else pd.Series(dtype=float)
    table["total_seconds"] = table["run"].map(last_wall)
    if "stopped" not in table:  # claims.json written before runs could stop at the target
        table["stopped"] = False
    table["stopped"] = table["stopped"].fillna(False).astype(bool)
    table.loc[table["stopped"], ["final", "total_seconds"]] = np.nan  # not a final value, not a whole run
    for col in ("steps", "seconds", "target", "final", "total_seconds"):
        table[col] = pd.to_numeric(table[col], errors="coerce")  # claims.json writes "never" (inf) as null
    table = table.replace([np.inf, -np.inf], np.nan)  # "never reached" plots and prints as missing
    table["reached"] = table["steps"].notna()
    return table.sort_values(["model", "optimizer", "seed"], ignore_index=True)


def goal_text() -> str:
    """The calibration goals of the decision rule, as the statistics stage defines them, in words."""
    from brownformer.stats.core.calibration import GATE_CONFIDENCE, POWER_GOAL, SIZE_GOAL

    lo, hi = SIZE_GOAL
    size = f"size at most {hi:.0%}" if lo <= 0 else f"size within [{lo:.0%}, {hi:.0%}]"
    return (f"{size} under the idealised and the fitted null, power above {POWER_GOAL:.0%} at every margin edge "
            f"(read on one-sided {GATE_CONFIDENCE:.0%} Clopper–Pearson bounds)")


def replicates_text(n_null: int) -> str:
    """How many replicates the calibration simulates per shape, as the statistics stage decides it, in words."""
    from brownformer.stats.core.calibration import CHUNK, POWER_GOAL, SIZE_GOAL, max_power_replicates

    return (f"each null and each alternative stops after {CHUNK}, {2 * CHUNK}, ... replicates (at most {n_null} for a "
            f"null, {max_power_replicates(n_null)} for an alternative) once the Clopper–Pearson bounds decide its gate "
            f"(size against {SIZE_GOAL[1]:.0%}, power against {POWER_GOAL:.0%})")


def _first(df: pd.DataFrame, *names: str) -> str | None:
    return next((n for n in names if n in df.columns), None)


def calibration_matrix(res: Results) -> pd.DataFrame:
    """Rejection rate pivoted to rows = test, columns = simulated process (mean over kinds and shapes).

    The decision rule's own row ("verdict", first) shows on Brownian motion its size (the rate of
    "not brownian") and on the alternatives its power (the rate of anything but "brownian").

    Returns:
        An empty frame when calibration.parquet is missing or lacks test/process/rate columns.
    """
    cal = res.calibration
    if cal.empty:
        return pd.DataFrame()
    test, proc = _first(cal, "test", "rule", "test_name", "name"), _first(cal, "process", "alternative", "simulated")
    rate = _first(cal, "rejection_rate", "rate")
    if not (test and proc and rate):
        return pd.DataFrame()
    cal = cal.copy()
    if {"rate_not_brownian", "role"} <= set(cal.columns):
        null_rule = (cal[test] == RULE_ROW) & (cal["role"] == "size")
        cal.loc[null_rule, rate] = cal.loc[null_rule, "rate_not_brownian"]
    mat = cal.pivot_table(index=test, columns=proc, values=rate, aggfunc="mean").sort_index()
    order = [RULE_ROW] * (RULE_ROW in mat.index) + [t for t in mat.index if t != RULE_ROW]
    return mat.loc[order]
