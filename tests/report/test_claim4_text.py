"""Claim 4's numbers as the report prints them: the record's typed texts (never recomputed), and reasons without
Python reprs. The record comes from claim 4's own function (realistic_claims.claim4)."""
from __future__ import annotations

import re

from brownformer.report.deciding import claim4_baselines, claim4_estimate, claim4_groups, ratio_cell, typed_text
from brownformer.report.phrases import tidy

from . import realistic_claims as rc


def test_a_ratio_over_a_median_not_reached_is_the_records_bound_with_the_end_that_bounds_it():
    d = rc.claim4().per_model["vit-post"].details
    ratio = d.ratios["adamw"]["steps"]
    assert ratio.bound == "<"
    cell = ratio_cell(ratio)
    assert cell.startswith("< " + ratio.text.lstrip("<"))
    hi = ratio.confidence_interval[1]
    assert ("upper bound" in cell) == (hi is not None and 0 < hi < float("inf"))
    assert not re.search(r"(?<![\d.])(0|inf)\s?[x×]", cell)


def test_medians_are_the_records_texts_and_the_best_baseline_comes_first():
    d = rc.claim4().per_model["vit-post"].details
    groups = claim4_groups(d)
    assert {o: g["median"] for o, g in groups.items()} == {
        o: typed_text(m) for o, m in d.km_median_steps.items()}
    assert groups["adamw"]["median"] == f"> {rc.BUDGET}" and not groups["adamw"]["reached"]
    assert claim4_baselines(d)[0] == d.baseline == "muon"
    text = claim4_estimate(rc.claim4().per_model["vit-post"], "vit-post")
    assert text.index("muon (best baseline)") < text.index("/ adamw")


def test_reasons_read_without_python_reprs():
    reason = ("fewer than 8 seeds per compared optimizer ({'kfac-iterative': 1, 'adamw': 1}); needs runs of "
              "'kfac-iterative' and every baseline ['adamw', 'muon']")
    assert tidy(reason) == ("fewer than 8 seeds per compared optimizer (kfac-iterative 1, adamw 1); needs runs of "
                            "kfac-iterative and every baseline adamw, muon")
