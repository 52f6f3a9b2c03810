"""claims.json for the fake results tree with the shapes the default run's file has (the traps of issue 35).

- claim 1 fails on its second criterion (the centre offset) while its headline estimate, the radius spread, passes;
- claim 3a's calibrated size is 0 of 400 (no "0 ± ..." may follow it);
- claim 4's baseline median is not reached (5 of 8 seeds censored at the budget), so the ratio of medians is 0
  with interval [0, 0.515] in the file: the report must show a bound, never "0x".

Written with the contract's constructors (brownformer.verdicts), like the fake tree itself.
"""
from __future__ import annotations

import json
from pathlib import Path

from brownformer.verdicts import ClaimRecord, ClaimsFile, Estimate

RUN = "vit-pre__adamw__s0"
BUDGET = 400
PROPOSED, BASELINE = "kfac-iterative", "adamw"
N_SEEDS, N_CENSORED = 8, 5
PROPOSED_MEDIAN = 120.0
KM_MEDIAN = PROPOSED_MEDIAN + 5 * 3  # the Kaplan-Meier median of the 8 times 120, 125, ..., 155
OFFSET = {"estimate": 0.256, "confidence_interval": [0.253, 0.259], "margin": [0.0, 0.25], "verdict": "not supported"}
SPREAD = {"estimate": 0.44, "confidence_interval": [0.425, 0.455], "margin": [0.0, 0.5], "verdict": "supported"}


def _claim1() -> ClaimRecord:
    spread = Estimate("radius spread / Gaussian-cloud null after the affine map (worst capture and layer)", 0.44,
                      (0.425, 0.455), 0.95)
    run = ClaimRecord("1", "tokens on the sphere", "not supported", "offset outside", estimate=spread,
                      margin=(0.0, 0.5), details={"criteria": {"radius_spread_ratio": SPREAD, "offset": OFFSET}})
    return ClaimRecord("1", "tokens on the sphere", "not supported",
                       f"1 of 1 runs not supported (1 not supported); deciding run {RUN}", estimate=spread,
                       margin=(0.0, 0.5), per_run={RUN: run}, details={"deciding_run": RUN})


def _claim3(cid: str, verdict: str, size: float) -> ClaimRecord:
    cal = {"shape": {"T": 7, "N": 6, "d": 8, "kind": "sphere"}, "size": size, "size_se": 0.0241,
           "power": {"ou": 0.82}, "equivalence_power": 0.144, "n_replicates": 400}
    est = Estimate("window exponent", 1.02, (0.9, 1.2), 0.9)
    runs = {RUN: ClaimRecord(cid, f"Brownian ({cid})", verdict, estimate=est, calibration=cal)}
    return ClaimRecord(cid, f"Brownian ({cid})", verdict, "power 0.82 < 0.9; a rejection needs 1 runs not supported",
                       estimate=est, margin=(0.9, 1.1), calibration=cal, per_run=runs)


def _claim4() -> ClaimRecord:
    runs = [{"optimizer": PROPOSED, "seed": s, "run": f"vit-pre__{PROPOSED}__s{s}", "steps": PROPOSED_MEDIAN + 5 * s,
             "seconds": 10.0 + s, "reached": True, "final": 0.9, "censored_at": BUDGET, "stopped": False}
            for s in range(N_SEEDS)]
    runs += [{"optimizer": BASELINE, "seed": s, "run": f"vit-pre__{BASELINE}__s{s}",
              "steps": None if s < N_CENSORED else 340.0, "seconds": None if s < N_CENSORED else 20.0,
              "reached": s >= N_CENSORED, "final": 0.8, "censored_at": BUDGET, "stopped": False}
             for s in range(N_SEEDS)]
    ratio = {"estimate": 0.0, "confidence_interval": [0.0, 0.515], "confidence_level": 0.95,
             "medians": [PROPOSED_MEDIAN, "inf"], "n": [N_SEEDS, N_SEEDS], "method": "percentile bootstrap"}
    est = Estimate(f"steps to target, {PROPOSED} / {BASELINE} (ratio of Kaplan-Meier medians)", 0.0, (0.0, 0.515),
                   0.95)
    rates = {"n": [N_SEEDS, N_SEEDS], "budget": BUDGET, "eval_every": 5, "log_mu": 6.0, "log_sigma": 0.15,
             "margin": 0.75, "replicates": 400, "size": 0.152,
             "rates": {"0.75": {"supported": 0.152}, "0.5": {"supported": 0.93}}}
    model = ClaimRecord("4", "iterative K-FAC trains faster", "supported",
                        "steps ratio CI inside the margin; simulated size of the rule at this shape 15.2%",
                        estimate=est, margin=(0.0, 0.75),
                        details={"proposed": PROPOSED, "baseline": BASELINE, "metric": "val_accuracy", "target": 0.8,
                                 "higher_is_better": True, "runs": runs, "rule_error_rates": rates,
                                 "km_median_steps": {PROPOSED: KM_MEDIAN, BASELINE: "inf"},
                                 "ratios": {BASELINE: {"steps": ratio, "seconds": ratio}},
                                 "logrank": {BASELINE: {"statistic": 3.0, "pvalue": 0.01}}, "protocol_met": True})
    return ClaimRecord("4", "iterative K-FAC trains faster", "supported",
                       "all 1 model variants supported; scope: vit-pre; deciding model vit-pre", estimate=est,
                       margin=(0.0, 0.75), per_model={"vit-pre": model},
                       details={"proposed": PROPOSED, "target_optimizer": BASELINE, "scope": ["vit-pre"]})


def write_realistic_claims(results: Path) -> Path:
    """Replace the fake tree's claims.json by the realistic one; returns its path."""
    claims = {"1": _claim1(), "3a": _claim3("3a", "supported", 0.0), "3b": _claim3("3b", "inconclusive", 0.05),
              "4": _claim4()}
    path = results / "stats" / "claims.json"
    path.write_text(json.dumps(ClaimsFile(claims, runs=[RUN]).to_dict(), indent=1))
    return path
