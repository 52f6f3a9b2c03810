"""The claims.json contract (brownformer.verdicts): scipy's names, checked at any depth; the schema version."""
from __future__ import annotations

import json
import math

import pytest

from brownformer.verdicts import SCHEMA_VERSION, ClaimRecord, ClaimsFile, UntypedDetails, read_claims
from brownformer.statsfile import EffectResult


def _file() -> ClaimsFile:
    run = ClaimRecord("1", "t", "not supported", "r", estimate=EffectResult.headline("x", 0.5, (0.25, math.inf), 0.95),
                      tests=[{"name": "tost", "statistic": 0.5, "pvalue": 0.2, "rejected": False}],
                      details=UntypedDetails({"pvalue": 0.2, "criteria": {"offset": {"confidence_interval": [0.1, 0.3]}}}))
    head = ClaimRecord("1", "t", "not supported", "r", estimate=run.estimate, pvalue_holm=0.4,
                       per_run={"m__adamw__s0": run}, details=UntypedDetails({"pvalue": 0.2}))
    return ClaimsFile({"1": head}, runs=["m__adamw__s0"])


def test_round_trip_through_the_file_keeps_every_field(tmp_path):
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(_file().to_dict()))
    back = read_claims(path)
    rec = back.claims["1"]
    assert json.loads(path.read_text())["schema"] == SCHEMA_VERSION
    assert rec.pvalue_holm == 0.4 and rec.estimate.confidence_interval[0] == 0.25
    assert math.isnan(rec.estimate.confidence_interval[1])  # a non-finite bound is written as null, read as NaN
    assert rec.per_run["m__adamw__s0"].tests == _file().claims["1"].per_run["m__adamw__s0"].tests
    assert back.to_dict() == read_claims(path).to_dict()


@pytest.mark.parametrize("where,old", [("details", "p_value"), ("tests", "reject"), ("nested", "ci")])
def test_schema_2_spellings_are_refused_at_any_depth(where, old):
    details = {"criteria": {"offset": {old: [0.1, 0.3]}}} if where == "nested" else (
        {old: 0.2} if where == "details" else {})
    tests = [{"name": "tost", old: True}] if where == "tests" else []
    with pytest.raises(ValueError, match=rf"claim '3a'.*{old}"):
        ClaimRecord("3a", "t", "inconclusive", tests=tests, details=UntypedDetails(details))


def test_a_file_of_another_schema_is_refused(tmp_path):
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({**_file().to_dict(), "schema": SCHEMA_VERSION - 1}))
    with pytest.raises(ValueError, match=rf"schema {SCHEMA_VERSION - 1}.*reads {SCHEMA_VERSION}"):
        read_claims(path)


def test_a_schema_3_file_is_named_and_must_be_regenerated(tmp_path):
    """Schema 3's seconds ratios held steps as seconds medians (and before issue 31 lacked the KM ratio's keys): the
    error names the schema found, what it lacks, and that the file must be regenerated."""
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({**_file().to_dict(), "schema": 3}))
    with pytest.raises(ValueError, match=r"claims.json schema 3; this version reads 4 only \(schema 3: claim 4's "
                                         r"time ratios .*seconds medians\); regenerate it"):
        read_claims(path)


def test_seed_unit_round_trips_and_names_the_decided_configurations(tmp_path):
    from brownformer.verdicts import SeedUnit
    seeds = SeedUnit({"vit-pre__adamw": 5, "lm-pre__adamw": 1}, 3, "inputs averaged inside each seed", "t over seeds")
    rec = ClaimRecord("1", "t", "inconclusive", "r", seeds=seeds)
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(ClaimsFile({"1": rec}).to_dict()))
    back = read_claims(path).claims["1"].seeds
    assert back == seeds and back.decided == ["vit-pre__adamw"]
    assert json.loads(path.read_text())["claims"]["1"]["seeds"]["decided"] == ["vit-pre__adamw"]
    assert ClaimRecord.from_dict({"verdict": "supported"}).seeds is None  # optional: older writers omit it
