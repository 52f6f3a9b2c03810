"""Keyed tuples: records that carry their own key, written as the JSON object by key the files have always held."""
from __future__ import annotations

import pytest

from brownformer.io import to_jsonable
from brownformer.statsfile import (BatterySettings, EffectResult, Keyed, KeyedValue, MomentumBias, ProcessRates,
                                   ShapeCalibration, WalkerReading)

BY_EFFECT = {"variance_ratio": {"bias": 0.1, "null_value": 1.0}, "hurst": {"bias": -0.02, "null_value": 0.5}}


def test_a_json_object_by_key_reads_as_records_carrying_their_key_and_writes_back_unchanged():
    records = Keyed.parser(MomentumBias.from_dict)(BY_EFFECT, "momentum_bias")
    assert [(r.effect, r.bias) for r in records] == [("variance_ratio", 0.1), ("hurst", -0.02)]  # the order written
    assert records.keys() == ["variance_ratio", "hurst"] and "hurst" in records and "msd_exponent" not in records
    assert records["hurst"].null_value == 0.5 and records.get("msd_exponent") is None and records[0].effect == "variance_ratio"
    assert records.to_dict() == BY_EFFECT  # the key is the object's key, not a field inside it
    with pytest.raises(KeyError):
        records["msd_exponent"]


def test_a_key_given_twice_and_a_value_that_is_no_object_are_errors():
    with pytest.raises(ValueError, match=r"keys given twice: \['hurst'\]"):
        Keyed.of([MomentumBias(0.1, 1.0, effect="hurst"), MomentumBias(0.2, 1.0, effect="hurst")])
    with pytest.raises(ValueError, match="momentum_bias: expected a JSON object by key, got list"):
        Keyed.parser(MomentumBias.from_dict)([1, 2], "momentum_bias")


def test_plain_values_and_verdict_rates_keep_their_layout():
    d = {"clock_0.9": 0.95, "iid": 1.0}
    power = Keyed.parser(KeyedValue.from_dict)(d, "power")
    assert [(p.key, p.value) for p in power] == list(d.items()) and power.to_dict() == d
    assert KeyedValue.mapping(d) == power
    rates = {"brownian": {"brownian": 0.9, "not brownian": 0.04, "inconclusive": 0.06}}
    parsed = Keyed.parser(ProcessRates.from_dict)(rates, "rates")
    assert parsed["brownian"].not_brownian == 0.04 and parsed.to_dict() == rates
    with pytest.raises(ValueError, match="rates.iid: expected the rate of each of"):
        Keyed.parser(ProcessRates.from_dict)({"iid": {"brownian": 1.0}}, "rates")


def test_a_file_block_round_trips_through_its_record():
    """A calibration, settings and walkers' block as a file holds them: parsed once, written back identically."""
    shape = {"id": "x", "kind": "euclidean", "geometry": "euclidean", "T": 2, "N": 1, "d": 2, "G": 1,
             "hyperplane": False, "drift": "none", "rho": 0.0, "decay": 0.0, "window": None}
    cal = {"shape": shape, "size": 0.03, "size_upper": 0.05, "size_se": 0.01, "equivalence_power": 0.9,
           "power": {"iid": 1.0}, "power_lower": {"iid": 0.99},
           "rates": {"brownian": {"brownian": 0.9, "not brownian": 0.03, "inconclusive": 0.07},
                     "iid": {"brownian": 0.0, "not brownian": 1.0, "inconclusive": 0.0}},
           "n_replicates": 400, "power_n_replicates": 400}
    assert to_jsonable(ShapeCalibration.from_dict(cal)) == cal
    settings = {"confidence_level": 0.95, "alpha": 0.05, "tost_level": 0.9, "n_resamples": 99, "max_walkers": 64,
                "margins": {"msd_exponent": [0.9, 1.1], "hurst": [0.4, 0.6]}, "interval": "t"}
    parsed = BatterySettings.from_dict(settings)
    assert parsed.margins["hurst"].value == [0.4, 0.6] and to_jsonable(parsed) == settings
    walkers = {"reading": "undefined", "why": "too few", "diagnostics": {"eb": {"estimate": 0.1, "null": None}}}
    read = WalkerReading.from_dict(walkers)
    assert read.diagnostics["eb"].name == "eb" and to_jsonable(read) == walkers


def test_effects_by_test_name_keep_the_effect_layout():
    d = {"msd_exponent": {"estimate": 1.0, "confidence_interval": [0.9, 1.1], "margin": [0.9, 1.1], "key": True}}
    effects = Keyed.parser(EffectResult.effect_from_dict)(d, "effects")
    assert effects["msd_exponent"].name == "msd_exponent" and to_jsonable(effects) == d
