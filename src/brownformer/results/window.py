"""Claim 3's window readings as one table, quoted by the report (the figure draws the same blocks)."""
from __future__ import annotations

import pandas as pd

from brownformer.results.reader import Results
from brownformer.statsfile import BatteryStats

__all__ = ["FAMILIES", "window_table"]

#: battery file family -> claim
FAMILIES = {"depth": "3a", "training": "3b", "weights": "3c"}


def window_table(res: Results) -> pd.DataFrame:
    """One row per battery file with a window block (stats/diffusion/window_reading.py): run, optimizer, claim, file,
    clock, window start step and minimum lag, reading, window / ensemble / full-range exponents, walkers; unit:
    "replica" for a replica set's contrast files (they decide 3b/3c where present), "path" for a run's own files."""
    rows = []
    sources = [(spec, "path", res.all_run_stats.get(spec.run_id, {})) for spec in res.runs]
    sources += [(spec, "replica", res.replica_stats.get(spec.run_id, {})) for spec in res.runs
                if spec.run_id in res.replica_stats]
    for spec, unit, files in sources:
        for key, data in sorted(files.items()):
            fam = key.split("/")[0]
            if fam not in FAMILIES or not isinstance(data, BatteryStats) or data.local_slopes is None:
                continue
            b = data.local_slopes
            rows.append({"run": spec.run_id, "optimizer": spec.optimizer, "claim": FAMILIES[fam], "unit": unit,
                         "file": key, "clock": data.time, "start_step": b.window.start_step if b.window else None,
                         "min_lag_steps": b.window.min_lag_steps if b.window else None,
                         "n_lags": b.window.n_points if b.window else None,
                         "reading": b.classification, "description": b.description,
                         "window_exponent": b.effect.estimate, "window_null_size": b.effect.null.size if b.effect.null else None,
                         "ensemble_exponent": b.ensemble_exponent.estimate if b.ensemble_exponent else None,
                         "full_range_exponent": data.msd_exponent.estimate,
                         "walkers": data.walkers.reading if data.walkers else None,
                         "rates": data.walkers.rates if data.walkers else None,
                         "verdict": data.verdict})
    return pd.DataFrame(rows)
