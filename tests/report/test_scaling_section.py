"""The report's Scaling section: how to produce the study without one; trends and flips with one."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.section_scaling import scaling_text
from brownformer.stats.claims.scaling import STUDY_COMMAND
from brownformer.verdicts import ClaimsFile

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_study_the_section_says_how_to_run_it(tmp_path):
    ctx = ReportContext.load(ROOT / "config" / "config.yaml", tmp_path, tmp_path)
    text = scaling_text(ctx)
    assert STUDY_COMMAND in text and "no scaling study" in text


def _write_results(root: Path, estimates: dict[str, tuple[float, str]]) -> None:
    per_run = {run: {"verdict": v, "estimate": {"name": "MSD exponent", "value": x,
                                                "confidence_interval": [x - 0.05, x + 0.05],
                                                "confidence_level": 0.95}} for run, (x, v) in estimates.items()}
    claims = ClaimsFile.from_dict({"claims": {"3b": {"verdict": "inconclusive", "margin": [0.9, 1.1],
                                                     "per_run": per_run}}})
    (root / "stats").mkdir(parents=True)
    (root / "stats" / "claims.json").write_text(json.dumps(claims.to_dict()))
    steps = np.arange(0, 101, 20)
    for run in estimates:
        (root / "runs" / run).mkdir(parents=True)
        metrics = pd.DataFrame({"step": steps, "train_loss": 1.0, "val_loss": 1.0,
                                "val_accuracy": [0.1, 0.5, 0.7, 0.8, 0.8, 0.8]})  # flat over the last 20%
        metrics.to_parquet(root / "runs" / run / "metrics.parquet")


def test_with_a_study_the_section_states_trend_flip_and_plateaus(tmp_path):
    _write_results(tmp_path, {"vit-L1-w16__adamw__s0": (0.7, "not supported"),
                              "vit-L2-w16__adamw__s0": (1.0, "supported"),
                              "vit-L2-w32__adamw__s0": (1.02, "supported")})
    ctx = ReportContext.load(ROOT / "config" / "scaling_ci.yaml", tmp_path, tmp_path)
    text = scaling_text(ctx)
    assert "digits vit pre-LN, depth: MSD exponent rises from the smallest to the largest depth" in text
    assert "flips to supported at depth 2" in text
    assert "3 of 3 runs reached a plateau" in text
