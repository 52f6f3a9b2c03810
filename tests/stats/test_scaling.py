"""Claims across scale: series membership, seed pooling, trends, verdict flips, training status counts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from brownformer.config import load_config
from brownformer.stats.claims.scaling import (claim_points, pooled_by_model, series_of, training_table, trends,
                                       verdict_flips)
from brownformer.verdicts import ClaimsFile

ROOT = Path(__file__).resolve().parents[2]
Z95 = stats.norm.ppf(0.975)


@pytest.fixture(scope="module")
def tiny_study():
    return load_config(ROOT / "config" / "scaling_ci.yaml")


def _claims(estimates: dict[str, tuple[float, float, str]], claim: str = "3a") -> ClaimsFile:
    """A claims.json with per-run estimates (value, CI half-width, verdict) for one claim."""
    per_run = {run: {"verdict": verdict, "estimate": {"name": "msd_exponent", "value": v,
                                                      "confidence_interval": [v - h, v + h],
                                                      "confidence_level": 0.95}}
               for run, (v, h, verdict) in estimates.items()}
    return ClaimsFile.from_dict({"claims": {claim: {"verdict": "inconclusive", "margin": [0.9, 1.1],
                                                    "per_run": per_run}}})


def test_series_of_splits_depth_and_width(tiny_study):
    points = series_of(tiny_study)
    depth = [(p.size, p.model) for p in points if p.series == "depth"]
    width = [(p.size, p.model) for p in points if p.series == "width"]
    assert depth == [(1, "vit-L1-w16"), (2, "vit-L2-w16")]
    assert width == [(16, "vit-L2-w16"), (32, "vit-L2-w32")]
    assert {p.group for p in points} == {"digits vit pre-LN"}


def test_a_config_without_scaling_has_no_series():
    assert series_of(load_config(ROOT / "config" / "config.yaml")) == []


def test_pooled_ci_adds_run_uncertainty_and_seed_spread(tiny_study):
    # two seeds of one model: 1.0 and 1.2, each with its own 95% CI of half-width Z95 * 0.1 (se 0.1)
    raw = load_config(ROOT / "config" / "scaling_ci.yaml", overrides=["seeds=[0, 1]"])
    claims = _claims({"vit-L1-w16__adamw__s0": (1.0, Z95 * 0.1, "supported"),
                      "vit-L1-w16__adamw__s1": (1.2, Z95 * 0.1, "supported")})
    pooled = pooled_by_model(claim_points(raw, claims))
    row = pooled[(pooled["model"] == "vit-L1-w16")].iloc[0]
    se = np.sqrt((0.1 ** 2 + 0.1 ** 2) / 4 + np.var([1.0, 1.2], ddof=1) / 2)
    assert row["value"] == pytest.approx(1.1)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((1.1 - Z95 * se, 1.1 + Z95 * se))
    assert row["n_runs"] == 2


def test_a_run_that_did_not_train_is_left_out_of_the_point_not_turned_into_nan(tiny_study):
    raw = load_config(ROOT / "config" / "scaling_ci.yaml", overrides=["seeds=[0, 1]"])
    claims = _claims({"vit-L1-w16__adamw__s0": (1.0, Z95 * 0.1, "supported")})
    claims.claims["3a"].per_run["vit-L1-w16__adamw__s1"] = ClaimsFile.from_dict({"claims": {"x": {
        "verdict": "did not train", "reason": "at chance"}}}).claims["x"]
    points = claim_points(raw, claims)
    assert "did not train" not in set(points["verdict"])
    row = pooled_by_model(points).query("model == 'vit-L1-w16'").iloc[0]
    assert row["value"] == pytest.approx(1.0) and row["n_runs"] == 1 and row["name"] == "msd_exponent"


def test_pooled_ci_covers_the_true_value_when_runs_differ_only_by_their_noise(tiny_study):
    raw = load_config(ROOT / "config" / "scaling_ci.yaml", overrides=["seeds=[0, 1, 2, 3]"])
    rng = np.random.default_rng(0)
    truth, se, covered, n_rep = 0.8, 0.05, 0, 300
    for _ in range(n_rep):
        x = rng.normal(truth, se, size=4)
        claims = _claims({f"vit-L1-w16__adamw__s{i}": (x[i], Z95 * se, "supported") for i in range(4)})
        row = pooled_by_model(claim_points(raw, claims)).query("model == 'vit-L1-w16'").iloc[0]
        covered += row["ci_low"] <= truth <= row["ci_high"]
    assert covered / n_rep >= 0.93  # nominal 95%; the seed-spread term makes it conservative, never liberal


def test_trend_and_flip_along_depth(tiny_study):
    # the exponent rises with depth and the verdict turns from "not supported" to "supported" at depth 2
    claims = _claims({"vit-L1-w16__adamw__s0": (0.5, 0.05, "not supported"),
                      "vit-L2-w16__adamw__s0": (1.0, 0.05, "supported"),
                      "vit-L2-w32__adamw__s0": (0.7, 0.05, "not supported")})
    points = claim_points(tiny_study, claims)
    tr = trends(points).set_index("series")
    assert tr.loc["depth", "rho"] == pytest.approx(1.0)
    assert tr.loc["width", "rho"] == pytest.approx(-1.0)
    flips = verdict_flips(points)
    depth = flips[flips["series"] == "depth"]
    assert depth["flip"].tolist() == [False, True]
    assert depth["verdict"].tolist() == ["not supported", "supported"]


def test_missing_claims_give_empty_tables(tiny_study):
    points = claim_points(tiny_study, None)
    assert points.empty and pooled_by_model(points).empty and trends(points).empty


def _metrics(final_gain: float) -> pd.DataFrame:
    """Val accuracy rising to 0.8, then gaining `final_gain` (relative) over the last 20% of the steps."""
    steps = np.arange(0, 101, 10)
    acc = np.where(steps <= 80, np.minimum(0.1 + steps / 100, 0.8), 0.8 * (1 + final_gain * (steps - 80) / 20))
    return pd.DataFrame({"step": steps, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": acc})


def test_training_table_counts_plateaus_with_training_status(tiny_study):
    metrics = {"vit-L1-w16__adamw__s0": _metrics(0.0), "vit-L2-w16__adamw__s0": _metrics(0.05),
               "vit-L2-w32__adamw__s0": _metrics(0.001)}
    table = training_table(tiny_study, metrics, {}).set_index("model")
    assert table["reached_plateau"].to_dict() == {"vit-L1-w16": 1, "vit-L2-w16": 0, "vit-L2-w32": 1}
    assert table["did_not_train"].sum() == 0
    assert table.loc["vit-L2-w16", "final_median"] == pytest.approx(0.84)
