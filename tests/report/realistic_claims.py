"""claims.json for the fake results tree with the shapes the default run's file has (the traps of issue 35).

- claim 1 fails on its second criterion (the centre offset) while its headline estimate, the radius spread, passes;
- claim 3a's calibrated size is 0 of 400 (no "0 ± ..." may follow it);
- claim 4 comes from its own function (stats/claims/claim4_optimizer.py) on simulated curves: on both ViTs K-FAC
  against AdamW and Muon, Muon the best baseline; AdamW's median on vit-post not reached (a bound "> 200", a ratio
  of KM medians "< x", an AFT estimate with an interval unbounded below), so the report must print the record's
  texts, never "0x".

Claims 1 and 3 are written with the contract's constructors (brownformer.verdicts), like the fake tree itself.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from brownformer.config import ReportConfig, StatsConfig
from brownformer.stats.claims import optimizer_claim
from brownformer.stats.claims.details import Claim1ConfigurationDetails, Claim1Details, SeedCriterion
from brownformer.verdicts import ClaimRecord, ClaimsFile
from brownformer.statsfile import EffectResult

RUN = "vit-pre__adamw__s0"
BUDGET = 200
PROPOSED = "kfac-iterative"
N_SEEDS = 8
SCOPE = ("vit-pre", "vit-post")
# claim-4 speeds of the simulated curves (accuracy 0.1 + 0.85 (1 - exp(-speed step / 60))): Muon fastest, so the
# best baseline and the comparator; AdamW slow enough that its median is not reached on vit-post (6 of 8 censored)
SPEEDS = {PROPOSED: 1.0, "adamw": 0.5, "muon": 2.0}
TARGET = 0.8
OFFSET = SeedCriterion(verdict="not supported", estimate=0.256, confidence_interval=[0.253, 0.259], layer=0,
                       margin=[0.0, 0.25], n_layers=1, n_seeds=N_SEEDS, why=None, per_layer=[], pvalue=0.9)
SPREAD = SeedCriterion(verdict="supported", estimate=0.44, confidence_interval=[0.425, 0.455], layer=0,
                       margin=[0.0, 0.5], n_layers=1, n_seeds=N_SEEDS, why=None, per_layer=[], pvalue=0.01)


def _claim1() -> ClaimRecord:
    spread = EffectResult.headline("radius spread / Gaussian-cloud null after the affine map (worst capture and layer)", 0.44,
                      (0.425, 0.455), 0.95)
    run = ClaimRecord("1", "tokens on the sphere", "not supported", "offset outside", estimate=spread,
                      margin=(0.0, 0.5), details=Claim1ConfigurationDetails(
                          ln="post", decided_on="ln_affine", criteria={"radius_spread_ratio": SPREAD, "offset": OFFSET},
                          seeds=[RUN], pvalue=0.9))
    head = Claim1Details(pvalue=0.9, not_applicable={}, deciding_configuration=RUN, decided_on={}, margins={},
                         rule="fixture", rule_history=[], did_not_train=[])
    return ClaimRecord("1", "tokens on the sphere", "not supported",
                       f"1 of 1 runs not supported (1 not supported); deciding run {RUN}", estimate=spread,
                       margin=(0.0, 0.5), per_run={RUN: run}, details=head)


def _claim3(cid: str, verdict: str, size: float) -> ClaimRecord:
    cal = {"shape": {"T": 7, "N": 6, "d": 8, "kind": "sphere"}, "size": size, "size_se": 0.0241,
           "power": {"ou": 0.82}, "equivalence_power": 0.144, "n_replicates": 400}
    est = EffectResult.headline("window exponent", 1.02, (0.9, 1.2), 0.9)
    runs = {RUN: ClaimRecord(cid, f"Brownian ({cid})", verdict, estimate=est, calibration=cal)}
    return ClaimRecord(cid, f"Brownian ({cid})", verdict, "power 0.82 < 0.9; a rejection needs 1 runs not supported",
                       estimate=est, margin=(0.9, 1.1), calibration=cal, per_run=runs)


def _curve(speed: float, seed: int, every: int = 5) -> pd.DataFrame:
    """A validation-accuracy curve, the seed's speed off by about 15% (the tuned runs' spread)."""
    rng = np.random.default_rng(seed)
    s = np.arange(0, BUDGET + 1, every)
    acc = 0.1 + 0.85 * (1 - np.exp(-speed * math.exp(rng.normal(0, 0.15)) * s / 60)) + rng.normal(0, 0.003, s.size)
    return pd.DataFrame({"step": s, "wall_time": s * 0.05, "train_loss": np.linspace(2.3, 0.3, s.size),
                         "val_accuracy": acc})


@functools.lru_cache(maxsize=1)
def claim4() -> ClaimRecord:
    """Claim 4 as the statistics stage writes it (its own function on simulated curves of both ViTs and both
    baselines), so the fixture has the record's exact layout: typed medians and ratios, bounds, rule error rates."""
    runs = {f"{model}__{opt}__s{s}": _curve(speed, 100 * k + s + 50 * j)
            for j, model in enumerate(SCOPE) for k, (opt, speed) in enumerate(SPEEDS.items()) for s in range(N_SEEDS)}
    report = ReportConfig(proposed=PROPOSED, baselines=("adamw", "muon"), scope=SCOPE,
                          targets=dict.fromkeys(SCOPE, TARGET))
    return optimizer_claim(runs, StatsConfig(n_resamples=199, calibration_replicates=60), report)


def write_realistic_claims(results: Path) -> Path:
    """Replace the fake tree's claims.json by the realistic one; returns its path."""
    claims = {"1": _claim1(), "3a": _claim3("3a", "supported", 0.0), "3b": _claim3("3b", "inconclusive", 0.05),
              "4": claim4()}
    path = results / "stats" / "claims.json"
    path.write_text(json.dumps(ClaimsFile(claims, runs=[RUN]).to_dict(), indent=1))
    return path
