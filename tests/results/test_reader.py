"""The results reader: typed access, claims.json only through the verdicts contract, and the tables
that a figure and the report both quote."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from brownformer.metrics import val_metric
from brownformer.results import (Results, calibration_fields, calibration_matrix, claims_frame, did_not_train_frame,
                                 time_to_target_table)
from brownformer.stats.claims.details import Claim4ModelDetails
from brownformer.verdicts import ClaimRecord, ClaimsFile, read_claims
from brownformer.statsfile import EffectResult

_spec = importlib.util.spec_from_file_location("fake_results", Path(__file__).parents[1] / "plots" / "fake_results.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)


@pytest.fixture()
def tree(tmp_path):
    return fake.build_fake_results(tmp_path / "results")


def test_claims_frame_has_one_row_per_verdict_of_the_file(tree):
    claims = Results(fake.fake_config(), tree).claims
    frame = claims_frame(claims)
    expected = sum(1 + len(r.per_run) + len(r.per_optimizer) + len(r.per_model) for r in claims.claims.values())
    assert len(frame) == expected
    head = frame[frame["scope"] == "headline"].set_index("claim")
    for cid, rec in claims.claims.items():
        assert head.loc[cid, "verdict"] == rec.verdict
        assert head.loc[cid, "calibrated"] == bool(rec.calibration)
    runs = frame[frame["scope"] == "run"]
    assert set(runs["model"]) <= set(fake.RAW_CONFIG["models"])  # run ids are split into their parts


def test_a_verdict_outside_the_contract_is_a_note_not_a_guess(tree):
    path = tree / "stats" / "claims.json"
    path.write_text(path.read_text().replace('"verdict": "not supported"', '"verdict": "pass"'))
    res = Results(fake.fake_config(), tree)
    assert res.claims is None
    assert any("verdicts contract" in n and "pass" in n for n in res.notes)


def test_missing_inputs_give_empty_results_and_notes(tmp_path):
    res = Results(fake.fake_config(), tmp_path / "nothing")
    assert res.claims is None and res.metrics.empty and res.calibration.empty and res.manifests == {}
    assert time_to_target_table(res).empty and did_not_train_frame(res.claims).empty
    assert "claims.json missing" in res.notes


def test_manifests_are_typed(tree):
    res = Results(fake.fake_config(), tree)
    m = res.manifests["vit-pre__adamw__s1"]
    assert (m.git_sha, m.git_dirty, m.seeds["torch"], m.wall_time_s) == ("0123456789abcdef", True, 1, 1.5)


def test_did_not_train_runs_come_from_claims_json(tree):
    frame = did_not_train_frame(Results(fake.fake_config(), tree).claims)
    assert frame.to_dict("records") == [{"run": fake.DID_NOT_TRAIN_RUN, "reason": "diverged: loss NaN at step 20"}]


@pytest.mark.parametrize("cal,size,power", [
    (None, math.nan, math.nan),
    ({"size": 0.04, "size_se": 0.01, "power": {"iid": 0.95, "edge": 0.7}, "n_replicates": 400}, 0.04, 0.7),
    # per-test rates (an earlier calibration layout): the whole rule's row is "classification"
    ({"size": {"classification": 0.06, "msd": 0.01}, "power": {"ou": {"classification": 0.8}}}, 0.06, 0.8),
])
def test_calibration_fields_quote_the_rule_not_a_single_test(cal, size, power):
    f = calibration_fields(cal)
    assert f["calibrated"] == (cal is not None)
    for got, want in ((f["size"], size), (f["power"], power)):
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want)


def _first_hit(metrics, target) -> float:
    """Independent reference: the first evaluation whose running median of 3 is at least as good as the target."""
    metric = val_metric(metrics)
    ev = metrics.dropna(subset=[metric.column]).sort_values("step")
    value = ev[metric.column].rolling(3, min_periods=1).median()
    hit = ev[value >= target] if metric.higher_is_better else ev[value <= target]
    return float(hit["step"].iat[0]) if len(hit) else math.nan


def test_time_to_target_without_claims_applies_the_rule_to_the_metrics(tree):
    (tree / "stats" / "claims.json").unlink()
    res = Results(fake.fake_config(), tree)
    tt = time_to_target_table(res)
    assert set(tt["run"]) == set(res.metrics["run"])
    by_run = res.metrics_by_run()
    for _, row in tt.iterrows():
        want = _first_hit(by_run[row["run"]], row["target"])
        assert (math.isnan(want) and not row["reached"]) or row["steps"] == want, row["run"]
    assert (tt["total_seconds"] > 0).all()


def test_time_to_target_quotes_the_times_claim_4_used(tree):
    path = tree / "stats" / "claims.json"
    claims = read_claims(path)
    runs = [{"optimizer": "adamw", "seed": 0, "run": "vit-pre__adamw__s0", "steps": 30.0, "seconds": 1.0,
             "reached": True, "final": 0.9},
            {"optimizer": "kfac-iterative", "seed": 0, "run": "vit-pre__kfac-iterative__s0", "steps": None,
             "seconds": None, "reached": False, "final": 0.5}]
    details = Claim4ModelDetails(pvalue=None, rule_error_rates=None, levels={}, model="vit-pre", metric="val_accuracy",
                                 higher_is_better=True, target=0.77, proposed="kfac-iterative", baseline="adamw",
                                 baselines=["adamw"], runs=runs, km_median_steps={}, ratios={}, verdicts={},
                                 final_at_budget={}, verdict="inconclusive", reason="", protocol_met=True)
    model = ClaimRecord("4", "t", "inconclusive", estimate=EffectResult.headline("ratio", 1.0, (0.5, 2.0)),
                        details=details)
    four = dataclasses.replace(claims.claims["4"], per_model={"vit-pre": model})
    path.write_text(json.dumps(ClaimsFile({**claims.claims, "4": four}, claims.did_not_train).to_dict()))
    tt = time_to_target_table(Results(fake.fake_config(), tree)).set_index("run")
    assert tt.loc["vit-pre__adamw__s0", "steps"] == 30 and tt.loc["vit-pre__adamw__s0", "target"] == 0.77
    assert not tt.loc["vit-pre__kfac-iterative__s0", "reached"]
    assert np.isnan(tt.loc["vit-pre__kfac-iterative__s0", "steps"])  # never: missing, not a number


def test_calibration_matrix_puts_the_rule_first_with_its_size_on_the_null(tree):
    res = Results(fake.fake_config(), tree)
    mat = calibration_matrix(res)
    assert mat.index[0] == "verdict"
    cal = res.calibration
    null = cal[(cal["test"] == "verdict") & (cal["process"] == "brownian")]
    assert mat.loc["verdict", "brownian"] == pytest.approx(null["rate_not_brownian"].mean())
    ou = cal[(cal["test"] == "verdict") & (cal["process"] == "ou")]
    assert mat.loc["verdict", "ou"] == pytest.approx(1 - ou["rate_brownian"].mean())


def test_metrics_only_runs_have_metrics_and_manifests_but_no_statistics_or_trajectories(tree):
    """The fake tree has every file for every run; a config that probes only seed 0 of vit-pre must not read them."""
    import copy

    from brownformer.config import from_dict

    raw = copy.deepcopy(fake.RAW_CONFIG)
    raw["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"], "probes": False},
                   {"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"], "seeds": [0]},
                   {"models": ["lm-pre"], "optimizers": ["adamw"]}]
    res = Results(from_dict(raw), tree)
    every = {r.run_id for r in res.runs}
    metrics_only = {"vit-pre__adamw__s1", "vit-pre__kfac-iterative__s1"}
    assert {r.run_id for r in res.probed_runs} == every - metrics_only
    assert set(res.metrics["run"]) == every and set(res.manifests) == every
    assert set(res.all_run_stats) == every - metrics_only
    for run in every:
        assert bool(res.trajectory_index(run)) == (run not in metrics_only)
