"""Decision: a verdict taken once, in one of the two vocabularies, that survives its JSON round trip."""
import json

import pytest

from brownformer.statsfile import CLAIM_VERDICTS, RULE_VERDICTS, Decision
from brownformer.stats.diffusion import rule
from brownformer import verdicts


def test_round_trip_through_json_keeps_every_field():
    d = Decision("not brownian", "variance ratio 1.4 outside [0.8, 1.25]", rule="window exponent TOST",
                 alpha=0.05, size=0.031, power=0.93)
    back = Decision.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back == d


def test_undefined_fields_are_left_out_of_the_json():
    assert Decision("inconclusive", "6 time points < 8").to_dict() == {"verdict": "inconclusive",
                                                                        "reason": "6 time points < 8"}


@pytest.mark.parametrize("verdict", ["yes", "Brownian", "pass", ""])
def test_a_verdict_outside_both_vocabularies_is_refused(verdict):
    with pytest.raises(ValueError, match="not one of"):
        Decision(verdict)


def test_the_vocabularies_have_one_home():
    assert verdicts.VERDICTS is CLAIM_VERDICTS and rule.VERDICTS is RULE_VERDICTS
