"""benchmarks/claim4_tables.py and benchmarks/time_to_target.py's tables on a claims.json written by the project's
writer from claim 4's own function on simulated curves (nothing trained), read back through the typed reader: the
AFT estimate as the headline, the ratio of KM medians in its own column, seconds with their unit."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from brownformer.config import ReportConfig, StatsConfig
from brownformer.stats.claims import optimizer_claim
from brownformer.stats.claims.details import parse_details
from brownformer.verdicts import SCHEMA_VERSION, ClaimsFile, read_claims

ROOT = Path(__file__).resolve().parents[2]
#: reach step of seed 0 and seconds per step per optimizer: K-FAC fastest in steps, dearest per step
SHAPE = {"kfac-iterative": (100, 0.03), "adamw": (200, 0.01), "muon": (150, 0.015)}
REPORT = ReportConfig(proposed="kfac-iterative", baselines=("adamw", "muon"), scope=("m",), targets={"m": 0.8})


def _curve(reach: int, cost: float) -> pd.DataFrame:
    """Accuracy rising linearly to 0.9 at step `reach`, evaluated every 5 steps of a 400-step budget, `cost` s/step."""
    step = np.arange(5, 401, 5)
    return pd.DataFrame({"step": step, "val_accuracy": 0.1 + 0.8 * np.minimum(step / reach, 1.0),
                         "wall_time": step * cost})


@pytest.fixture(scope="module")
def claim4():
    runs = {f"m__{o}__s{s}": _curve(reach + 7 * s, cost) for o, (reach, cost) in SHAPE.items() for s in range(8)}
    return optimizer_claim(runs, StatsConfig(n_resamples=199, calibration_replicates=60), REPORT)


@pytest.fixture()
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import claim4_tables
    import time_to_target

    return claim4_tables, time_to_target


def test_claim4_tables_reads_the_current_records_with_the_aft_estimate_first(bench, claim4, tmp_path):
    claim4_tables, time_to_target = bench
    path = time_to_target.write_claims(claim4, tmp_path / "claims.json", runs=[])
    out = tmp_path / "tables.md"
    assert claim4_tables.main(["--claims", f"offset_0={path}", f"offset_1000={path}", "--out", str(out)]) == 0
    text = out.read_text()
    d = read_claims(path, parse_details=parse_details).claims["4"].per_model["m"].details
    steps, seconds = d.ratios["muon"]["steps"], d.ratios["muon"]["seconds"]
    assert text.count("#### m:") == 2
    assert f"steps ratio (AFT estimate) {steps.text}" in text
    assert f"ratio of KM medians {steps.km_median_ratio_text}" in text
    assert f"KM median training seconds {seconds.medians[0].text} s vs {seconds.medians[1].text} s" in text
    header = next(line for line in text.splitlines() if line.startswith("| target level"))
    assert header.index("/ muon: AFT estimate") < header.index("/ muon: ratio of KM medians")
    level = d.levels["0.9"].steps_ratios["muon"]
    row = next(line for line in text.splitlines() if line.startswith("| 0.9 ")).split(" | ")
    heads = header.split(" | ")
    assert row[heads.index("kfac-iterative / muon: ratio of KM medians")] == level.km_median_ratio_text
    assert row[heads.index("kfac-iterative / muon: AFT estimate [95% CI], p(ratio >= margin)")].startswith(level.text)


def test_time_to_target_tables_come_from_the_typed_reader(bench, claim4, tmp_path):
    _, time_to_target = bench
    path = time_to_target.write_claims(claim4, tmp_path / "run.claims.json", runs=["m__adamw__s0"])
    assert json.loads(path.read_text())["schema"] == SCHEMA_VERSION
    claims = read_claims(path, parse_details=parse_details)
    lines = time_to_target.claim_tables(claims.claims["4"], ["m"], REPORT.baselines)
    text = "\n".join(lines)
    d = claims.claims["4"].per_model["m"].details
    assert f"**{claim4.verdict}**" in text and "## m: verdict" in text
    clocks = d.ratios["muon"]
    for opt, m_steps, m_seconds in zip(("kfac-iterative", "muon"), clocks["steps"].medians, clocks["seconds"].medians):
        row = next(line for line in text.splitlines() if line.startswith(f"| {opt} "))  # the medians table
        assert f"| {m_seconds.text} s " in row
        assert float(m_seconds.text) == pytest.approx(m_steps.estimate * SHAPE[opt][1], rel=1e-3)
    assert "steps ratio (AFT estimate) [95% CI]" in text and "ratio of KM medians" in text
    assert isinstance(ClaimsFile.from_dict(json.loads(path.read_text()), parse_details=parse_details), ClaimsFile)
