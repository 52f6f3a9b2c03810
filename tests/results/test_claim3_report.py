"""Claim 3 in the report: the replica-contrast files that decide 3b/3c are read, drawn and counted as deciding, and
the claim's calibration text cites the rule's size under both the idealised and the fitted null."""
from __future__ import annotations

import importlib.util
import math
import shutil
from pathlib import Path

import pandas as pd

from brownformer.config import from_dict
from brownformer.plots.fig_local_slopes import _deciding, window_rows
from brownformer.report.section_claims import calibration_text
from brownformer.results import Results, calibration_fields, window_table

_spec = importlib.util.spec_from_file_location("fake_results", Path(__file__).parents[1] / "plots" / "fake_results.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

BASE = "vit-pre__adamw__s0"


def _with_replicas(tmp_path) -> Results:
    root = fake.build_fake_results(tmp_path / "results")
    src = root / "runs" / BASE / "stats" / "training" / "ln_l0.json"
    dst = root / "replicas" / BASE / "stats" / "training" / "ln_l0.json"
    dst.parent.mkdir(parents=True)
    shutil.copy(src, dst)
    raw = {**fake.RAW_CONFIG, "replicas": [{"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0],
                                            "count": 6}]}
    return Results(from_dict(raw, source="fake"), root)


def test_replica_files_enter_the_window_table_and_figure_as_the_deciding_files(tmp_path):
    res = _with_replicas(tmp_path)
    assert list(res.replica_stats) == [BASE]
    t = window_table(res)
    rep = t[t["unit"] == "replica"]
    assert rep[["run", "claim", "file"]].values.tolist() == [[BASE, "3b", "training/ln_l0"]]
    assert (t["unit"] == "path").sum() == len(window_table(Results(fake.fake_config(), res.root)))
    rows = window_rows(res)
    kept = _deciding(rows)
    # 3b: only the replica file decides; 3a and 3c (no replica files here) keep every run's own files
    assert [r["unit"] for r in kept if r["family"] == "training"] == ["replica"]
    assert sum(r["family"] == "weights" for r in kept) == sum(r["family"] == "weights" for r in rows) > 0


def test_claim_calibration_text_cites_both_nulls():
    cal = {"shape": {"kind": "euclidean", "T": 25, "N": 510, "G": 5, "d": 32}, "size": 0.0, "size_se": 0.02,
           "size_fitted": 0.025, "n_fitted": 16, "n_files": 16, "power": {}, "n_replicates": 40}
    text = calibration_text(pd.Series(calibration_fields(cal)))
    assert ("size 0 of 40 (95% upper bound 0.075) under the idealised null, 0.025 under the fitted null (16 of 16 "
            "files fitted)") in text
    missing = calibration_fields({**cal, "size_fitted": None, "n_fitted": 0})
    assert math.isnan(missing["size_fitted"])
    assert "fitted null not simulated (0 of 16 files fitted)" in calibration_text(pd.Series(missing))
    # claims 1, 2, 4 have no fitted null: their text is unchanged
    assert "fitted" not in calibration_text(pd.Series(calibration_fields({"size": 0.05, "power": {"a": 0.9}})))
