"""claims.json details as typed records: what the rules write is read back as the same record types and the same JSON,
and a record that breaks its layout is refused with the claim, level and key named."""
from __future__ import annotations

import dataclasses

import json
import math

import numpy as np
import pandas as pd
import pytest

from brownformer.config import ReportConfig, StatsConfig
from brownformer.io import to_jsonable
from brownformer.stats.claims import optimizer_claim, sphere_claim
from brownformer.stats.claims.details import (Claim1ConfigurationDetails, Claim1Details, Claim1FixedModelDetails,
                                              Claim1SeedDetails, Claim3Details, Claim3OptimizerDetails,
                                              Claim3RunDetails, Claim4Details, Claim4EstimatedModelDetails,
                                              ClaimPooling, FileRow, RunPooling, SeedCriterion, UndecidedCriterion,
                                              parse_criterion, parse_details)
from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary
from brownformer.statsfile import EffectResult
from brownformer.verdicts import ClaimRecord, ClaimsFile, NoDetails

STATS = StatsConfig(n_resamples=99)


def _through_json(rec: ClaimRecord) -> ClaimRecord:
    """The record as a reader gets it: written to JSON text, read back with the claims' parser."""
    text = json.dumps({"claims": {rec.claim: to_jsonable(rec.to_dict())}}, allow_nan=False)
    return ClaimsFile.from_dict(json.loads(text), parse_details=parse_details).claims[rec.claim]


def _types(rec: ClaimRecord) -> dict:
    """The details type of the record and of every record below it."""
    out = {"": type(rec.details)}
    for level in ("per_run", "per_optimizer", "per_model"):
        for key, sub in getattr(rec, level).items():
            out.update({f"{level}.{key}{k}": t for k, t in _types(sub).items()})
    return out


def _assert_round_trip(rec: ClaimRecord) -> ClaimRecord:
    back = _through_json(rec)
    assert to_jsonable(back.to_dict()) == to_jsonable(rec.to_dict())
    assert _types(back) == _types(rec)
    return back


def _sphere_files(ln: str, seeds: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8 * 6, 12))
    z = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    files = []
    for seed in range(seeds):
        for tensor, arr in (("ln_raw", z), ("ln_affine", z * np.exp(rng.uniform(0, np.log(100), 12)))):
            s = tensor_sphere_summary(arr, tensor=tensor, z_raw=z, n_inputs=8, n_tokens=6, n_resamples=99)
            s = dataclasses.replace(s, ln=ln, step=100)
            files.append({"run": f"vit-{ln}__adamw__s{seed}", "capture": 1, "path": f"depth/{tensor}_c1.npy",
                          "sphere": s})
    return files


@pytest.mark.parametrize("ln", ["pre", "post"])
def test_claim1_records_round_trip_with_their_types(ln):
    rec = sphere_claim(_sphere_files(ln, seeds=3), STATS, excluded={"vit-x__adamw__s9": "diverged"})
    back = _assert_round_trip(rec)
    assert isinstance(back.details, Claim1Details)
    conf = back.per_model[f"vit-{ln}__adamw"].details
    assert isinstance(conf, Claim1ConfigurationDetails) and isinstance(conf.criteria["offset"], SeedCriterion)
    seed = back.per_run[f"vit-{ln}__adamw__s0"].details
    assert isinstance(seed, Claim1SeedDetails) and (seed.gauge_dependent is not None) == (ln == "pre")
    # a key that does not apply is left out of the JSON, not written as null
    assert ("gauge_dependent" in rec.per_run[f"vit-{ln}__adamw__s0"].to_dict()["details"]) == (ln == "pre")


def test_claim1_on_a_fixed_model_round_trips():
    rec = sphere_claim(_sphere_files("post", seeds=1), STATS, unit="inputs")
    back = _assert_round_trip(rec)
    fixed = back.per_model["vit-post__adamw__s0"].details
    assert isinstance(fixed, Claim1FixedModelDetails) and isinstance(fixed.description, Claim1SeedDetails)
    assert isinstance(back.per_run["vit-post__adamw__s0"].details, Claim1FixedModelDetails)


def test_one_seed_leaves_the_criteria_undecided_and_they_round_trip():
    rec = sphere_claim(_sphere_files("post", seeds=1), STATS)
    crit = _assert_round_trip(rec).per_model["vit-post__adamw"].details.criteria
    assert all(isinstance(c, SeedCriterion) for c in crit.values())
    empty = sphere_claim([], STATS)
    assert _assert_round_trip(empty).per_model == {}


def _curve(speed: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = np.arange(0, 201, 5)
    acc = 0.1 + 0.85 * (1 - np.exp(-speed * np.exp(rng.normal(0, 0.15)) * s / 60))
    return pd.DataFrame({"step": s, "wall_time": s * 0.05, "train_loss": np.linspace(2.3, 0.3, s.size),
                         "val_accuracy": acc})


def test_claim4_records_round_trip_with_their_types():
    runs = {f"vit-pre__{opt}__s{s}": _curve(speed, 10 * k + s)
            for k, (opt, speed) in enumerate({"kfac-iterative": 1.0, "adamw": 0.5}.items()) for s in range(4)}
    report = ReportConfig(proposed="kfac-iterative", baselines=("adamw",), scope=("vit-pre",),
                          targets={"vit-pre": 0.8})
    rec = optimizer_claim(runs, StatsConfig(n_resamples=99, calibration_replicates=20), report)
    back = _assert_round_trip(rec)
    assert isinstance(back.details, Claim4Details)
    model = back.per_model["vit-pre"].details
    assert isinstance(model, Claim4EstimatedModelDetails) and model.baseline == "adamw"
    assert model.estimate_text == rec.per_model["vit-pre"].details.estimate_text


def _claim3() -> ClaimRecord:
    est = EffectResult.headline("window MSD exponent", 1.0, (0.9, 1.1), 0.95)
    row = FileRow(path="depth/resid.npy", verdict="inconclusive", reason="no calibration", msd_exponent=1.0,
                  shape_id=None, size=None, size_fitted=None, classification="brownian", window=None,
                  window_description=None, ensemble_exponent=None, full_range_exponent=1.01, window_null_size=None,
                  walkers=None, walker_rates=None)
    run = Claim3RunDetails(files=[row], n_brownian=0, n_not_brownian=0, n_files=1,
                           pooling=RunPooling("Markov", [0.05], None, 0.0, 0, None), pvalue=None,
                           classifications={"brownian": 1}, estimate_se=math.nan, estimate_df=math.nan,
                           estimate_method="m", spread_over_files=est)
    head = Claim3Details(pvalue=None, per_configuration={}, pvalue_note="n", pooling=None, run_q_values_bh={},
                         rule="r", pooling_rule="p", rule_history=[], n_runs=1, unit_of_replication="u",
                         estimate_se=math.nan, estimate_df=math.nan, estimate_method="m")
    opt = Claim3OptimizerDetails(pooling=ClaimPooling("Poisson", [0.0], None, 0.0, 0, None), pvalue=None)
    sub = ClaimRecord("3a", "t", "inconclusive", estimate=est, details=run)
    return ClaimRecord("3a", "t", "inconclusive", estimate=est, details=head,
                       per_run={"vit-pre__adamw__s0": sub, "vit-pre__adamw__s1": ClaimRecord("3a", "t", "did not train")},
                       per_optimizer={"adamw": ClaimRecord("3a", "t", "inconclusive", details=opt)})


def test_claim3_records_round_trip_and_empty_blocks_stay_empty():
    rec = _claim3()
    written = rec.to_dict()["details"]
    assert written["pooling"] == {} and "single_path" not in written  # an empty pooling is {}, a missing block absent
    back = _assert_round_trip(rec)
    assert back.details.pooling is None and isinstance(back.per_run["vit-pre__adamw__s1"].details, NoDetails)
    assert back.per_run["vit-pre__adamw__s0"].details.files[0].full_range_exponent == 1.01


def test_a_details_key_a_writer_renamed_or_dropped_is_refused_with_claim_level_and_key():
    good = to_jsonable(_claim3().to_dict())
    renamed = json.loads(json.dumps(good))
    run = renamed["per_run"]["vit-pre__adamw__s0"]["details"]
    run["n_file"] = run.pop("n_files")
    with pytest.raises(ValueError, match=r"claim 3a per_run details.*unknown keys \['n_file'\].*missing keys \['n_files'\]"):
        ClaimRecord.from_dict(renamed, parse_details=parse_details)
    with pytest.raises(ValueError, match=r"claim '5'.*no details record for level 'claim'"):
        parse_details("5", "claim", {"pvalue": 0.1})
    with pytest.raises(ValueError, match=r"match no claim-1/2 criterion layout"):
        parse_criterion({"verdict": "supported", "estimate": 0.1})
    assert isinstance(parse_criterion({"verdict": "inconclusive", "margin": [0, 1], "why": "no values"}),
                      UndecidedCriterion)


def test_records_without_the_parser_keep_their_json():
    """A reader without the claims' parser (verdicts alone) keeps the JSON as it is (UntypedDetails)."""
    good = to_jsonable(_claim3().to_dict())
    back = ClaimRecord.from_dict(good)
    assert back.to_dict() == good and type(back.details).__name__ == "UntypedDetails"
    with pytest.raises(ValueError, match="details must be a typed record"):
        ClaimRecord("1", "t", "inconclusive", details={"pvalue": 0.1})
