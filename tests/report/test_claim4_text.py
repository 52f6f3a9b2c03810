"""Claim 4's numbers as the report prints them: the record's typed texts (never recomputed), and reasons without
Python reprs. The record comes from claim 4's own function (realistic_claims.claim4)."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from brownformer.config import DEFAULT_STATS, ReportConfig
from brownformer.report.deciding import (claim4_baselines, claim4_estimate, claim4_groups, km_ratio_cell, ratio_cell,
                                        typed_text)
from brownformer.report.markdown import fmt
from brownformer.report.phrases import tidy
from brownformer.report.section_optimizers import comparison_table
from brownformer.stats.claims.comparison_records import MedianRatio
from brownformer.stats.claims.details import Claim4ModelDetails, parse_details
from brownformer.stats.comparison.survival import median_ratio
from brownformer.stats.comparison.time_to_target import time_to_target
from brownformer.verdicts import ClaimRecord, ClaimsFile

from . import realistic_claims as rc


def test_a_ratio_over_a_median_not_reached_is_the_records_text_with_its_interval():
    """AdamW's median is not reached on vit-post: the ratio of KM medians is the bound "< x"; the AFT estimate, which
    uses AdamW's events too, is the record's number, printed with its interval (unbounded below), never "0x"."""
    d = rc.claim4().per_model["vit-post"].details
    ratio = d.ratios["adamw"]["steps"]
    assert ratio.km_median_ratio_bound == "<" and km_ratio_cell(ratio) == "< " + ratio.km_median_ratio_text[1:]
    cell = ratio_cell(ratio)
    assert cell.startswith(typed_text(ratio))
    lo, hi = ratio.confidence_interval
    assert ratio.bound is None and lo == 0 and cell.endswith(f"[0, {fmt(hi)}]")
    assert not re.search(r"(?<![\d.])(0|inf)\s?[x×]", cell)


def test_an_estimate_the_data_cannot_bound_is_printed_as_the_bound_with_the_end_that_bounds_it():
    """No baseline run reaches the target: the AFT estimate is "< x" (never 0), its interval's upper end beside it."""
    fast, never = ([100] * 8, [True] * 8), ([400] * 8, [False] * 8)
    ratio = MedianRatio.of(median_ratio(fast, never, margin=0.75, confidence_level=0.95))
    assert ratio.bound == "<" and ratio_cell(ratio) == "< 0.25, 95% CI upper bound 0.25"
    ratio = MedianRatio.of(median_ratio(never, fast, margin=0.75, confidence_level=0.95))
    assert ratio.bound == ">" and ratio_cell(ratio) == "> 4, 95% CI lower bound 4"


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


#: seconds per step of each optimizer in the seconds fixture: K-FAC's steps cost four times AdamW's
STEP_COST = {"kfac-iterative": 0.08, "adamw": 0.02}


def _linear_curve(reach: int, cost: float) -> pd.DataFrame:
    """Accuracy rising linearly to 0.9 at step `reach`, evaluated every 5 steps of a 400-step budget, `cost` s/step."""
    step = np.arange(5, 401, 5)
    acc = 0.1 + 0.8 * np.minimum(step / reach, 1.0)
    return pd.DataFrame({"step": step, "val_accuracy": acc, "wall_time": step * cost})


def _seconds_claims() -> ClaimsFile:
    """Claim 4's record on one model whose optimizers differ in step cost, written and read back as claims.json."""
    runs = {f"m__{o}__s{s}": _linear_curve(reach + 5 * s, STEP_COST[o])
            for o, reach in (("kfac-iterative", 100), ("adamw", 200)) for s in range(8)}
    res = time_to_target(runs, {"m": 0.8}, stats=DEFAULT_STATS,
                         report=ReportConfig(proposed="kfac-iterative", baselines=("adamw",)))["m"]
    details = Claim4ModelDetails.of(res, pvalue=None, rule_error_rates=None, levels={})
    rec = ClaimRecord("4", "t", res.verdict, per_model={"m": ClaimRecord("4", "t", res.verdict, details=details)})
    return ClaimsFile.from_dict(json.loads(json.dumps(ClaimsFile({"4": rec}).to_dict())), parse_details=parse_details)


def test_seconds_to_target_are_each_optimizers_seconds_with_the_unit():
    """The "seconds to target" column is training seconds with their unit: each optimizer's KM median steps (as the
    ratios read them) times its own seconds per step, never the steps medians (the defect before claims.json schema
    4, invisible where a step costs 1 s)."""
    claims = _seconds_claims()
    d = claims.claims["4"].per_model["m"].details
    steps = d.ratios["adamw"]["steps"].medians  # (kfac-iterative, adamw), in steps
    table = comparison_table(SimpleNamespace(results=SimpleNamespace(claims=claims))).set_index("optimizer")
    for opt, m in zip(("kfac-iterative", "adamw"), steps):
        cell = table.loc[opt, "seconds to target"]
        assert cell.endswith(" s") and float(cell.removesuffix(" s")) == pytest.approx(
            m.estimate * STEP_COST[opt], rel=1e-3), (opt, cell, m.text)
    seconds = d.ratios["adamw"]["seconds"]
    assert seconds.medians[0].estimate / seconds.medians[1].estimate == pytest.approx(seconds.km_median_ratio)
