"""The one effect type (statsfile.EffectResult): each JSON layout holds exactly the keys the contract documents
(docs/ARTIFACTS.md), survives a JSON round trip, and a layout's unknown key is an error naming it."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from brownformer.io import to_jsonable
from brownformer.statsfile import EffectResult, EffectExtra, WindowRuleNull

NAN = math.nan


def _json(x):
    """What a file holds: the one converter, then JSON text and back."""
    return json.loads(json.dumps(to_jsonable(x), allow_nan=False))


def test_test_layout_writes_every_key_with_scipys_defaults():
    res = EffectResult("hurst", np.float64(0.3), 0.04, n=np.int64(12))
    assert _json(res) == {"name": "hurst", "statistic": 0.3, "pvalue": 0.04, "estimate": None,
                          "confidence_interval": [None, None], "confidence_level": 0.95, "method": "", "n": 12,
                          "null_value": None, "tost_interval": [None, None], "why_undefined": "", "extra": {},
                          "rejected": None}
    assert res.decided(0.05).rejected is True and res.decided(0.01).rejected is False
    assert EffectResult("x", NAN, NAN).decided(0.05).rejected is False  # an undefined p-value rejects nothing


def test_effect_layout_leaves_out_what_is_unknown_or_undefined():
    res = EffectResult.effect(0.9, (0.8, 1.0), pvalue=NAN, margin=(0.7, 1.3), key=True)
    assert _json(res) == {"estimate": 0.9, "confidence_interval": [0.8, 1.0], "margin": [0.7, 1.3], "key": True}
    assert _json(EffectResult.effect(None)) == {"estimate": None}  # the estimate is always written


def test_headline_layout_is_claims_json_estimate():
    res = EffectResult.headline("window exponent", 1.02, (0.9, math.inf), 0.9)
    assert _json(res) == {"name": "window exponent", "value": 1.02, "confidence_interval": [0.9, None],
                          "confidence_level": 0.9}
    assert EffectResult.from_dict(None, form="headline") is None


@pytest.mark.parametrize("res", [
    EffectResult("variance_ratio", 1.1, 0.2, 1.05, (0.9, 1.2), 0.9, "cluster bootstrap", 8, 1.0, (0.95, 1.15), "",
                 EffectExtra(n_time_points=7), False),
    EffectResult.effect(0.5, (0.4, 0.6), (0.42, 0.58), 0.01, why_undefined="", margin=(0.8, 1.2), key=False,
                        method="window", null=WindowRuleNull(0.05, 0.9, 40, [0.4, 0.5, 0.6], "the window rule on BM"),
                        bias_correction=0.02),
    EffectResult.headline("steps ratio", 0.75, (0.5, 1.1), 0.95),
], ids=["test", "effect", "headline"])
def test_every_layout_survives_its_json(res):
    back = EffectResult.from_dict(_json(res), form=res.form)
    assert back == res and _json(back) == _json(res)


@pytest.mark.parametrize("form,d,named", [
    ("test", {"name": "x", "statistic": 1.0, "pvalue": 0.5, "p_value": 0.5}, "p_value"),
    ("test", {"name": "x", "statistic": 1.0}, "pvalue"),
    ("effect", {"estimate": 1.0, "ci": [0, 1]}, "ci"),
    ("effect", {"confidence_interval": [0, 1]}, "estimate"),
])
def test_a_key_the_layout_lacks_or_needs_is_named(form, d, named):
    with pytest.raises(ValueError, match=named):
        EffectResult.from_dict(d, "here", form=form)


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="form"):
        EffectResult(form="estimate")
