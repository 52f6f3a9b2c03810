"""Typed, read-only access to the results tree, shared by the figures and the report.

`Results` reads runs, metrics, manifests, per-run statistics, summary, calibration and
claims.json (through brownformer.verdicts); `FIGURES` is the figure catalog; `claims_frame`,
`time_to_target_table`, `calibration_matrix` and `window_table` are the tables a figure and the report both quote.
brownformer.plots and brownformer.report import this package and never each other.
"""
from __future__ import annotations

from brownformer.results.catalog import FIGURES, Figure
from brownformer.results.claims_frame import calibration_fields, claims_frame, did_not_train_frame
from brownformer.results.reader import Manifest, Results, dig
from brownformer.results.tables import calibration_matrix, time_to_target_table
from brownformer.results.window import window_table

__all__ = ["Results", "Manifest", "FIGURES", "Figure", "claims_frame", "did_not_train_frame", "calibration_fields",
           "time_to_target_table", "calibration_matrix", "dig", "window_table"]
