"""Each claim's verdict on one pretrained model, with the project's own claim functions.

The model is one "run": claim 1 (stats/claims/claim1_sphere.py) on the pretrained depth files; claim 2
(stats/claims/claim2_markov.py) on the pretrained attention, with the random-init model of the same config as
its step-0 null; claim 3a (depth) always; 3b and 3c only with a checkpoint series. The Brownian claims
are "supported" only where a calibration table simulated each file's shape (the default; `--no-calibration`
skips it); without one they stay "inconclusive" and say so. RMSNorm models: the output is on the sphere of radius
sqrt(d) but not in the hyperplane 1^T z = 0, so claim 1 reads the radius only (the sum margin is widened
to |1^T z| / sqrt(d) <= r_max sqrt(d), which every vector with radius r <= r_max meets).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from brownformer.stats.claims import BROWNIAN_FAMILIES, brownian_family_claim, markov_claim, sphere_claim
from brownformer.stats_stage.summary import collect_run_outputs
from brownformer.stats_stage.trajectory_io import load_calibration
from brownformer.verdicts import INCONCLUSIVE, ClaimRecord

__all__ = ["pretrained_claims", "stats_for_norm", "CALIBRATION_STATUS"]

CALIBRATION_STATUS = {
    "1": "equivalence of the radius spread and the centre offset, each on its interval over the probe inputs of this "
         "one model (fixed-model unit); power at a true value halfway to the margin",
    "2": "equivalence on margins fixed before the data (output error of the head-subspace isotropic kernel, "
         "reversibility residual), intervals over the probe inputs of this one model; the nulls (row-shuffled, "
         "shuffled-key attention, the random-init model of the same config) are reported beside the margins",
}


def stats_for_norm(stats, norm_kind: str, d: int):
    """The StatsConfig claim 1 uses: RMSNorm gets a sum margin that every vector within the radius margin meets."""
    if norm_kind != "rmsnorm":
        return stats
    r_max = float(stats.margins["sphere_radius"][1])
    margins = {**stats.margins, "sphere_sum": (-r_max * math.sqrt(d), r_max * math.sqrt(d))}
    return dataclasses.replace(stats, margins=margins)


def _brownian_status(records: list[dict] | None, calibration, calibrated: bool) -> str:
    if not records:
        return "not measured"
    if calibration is not None:
        return f"calibrated at each file's exact shape ({calibration})"
    if calibrated:
        return "nothing to calibrate: no file's rule decided (too few time points or an undefined key test)"
    return "not calibrated (--no-calibration): no verdict can be 'supported'"


def pretrained_claims(name: str, stats_dir: Path, stats, *, calibration: Path | None,
                      replicates: int, calibrated: bool = True) -> dict[str, dict]:
    """claim id -> {ClaimRecord fields, "calibration_status"} for one model's per-run statistics."""
    out = collect_run_outputs({name: stats_dir})
    records: dict[str, ClaimRecord] = {"1": sphere_claim(out.sphere, stats, unit="inputs"),  # one fixed model
                                       "2": markov_claim(out.attention, stats, unit="inputs")}
    status = dict(CALIBRATION_STATUS)
    table = str(calibration) if calibration is not None and calibration.exists() else None
    for cat, key in BROWNIAN_FAMILIES.items():
        files = out.trajectories[cat]
        if files:
            records[key] = brownian_family_claim(key, files, stats, calibration=load_calibration(table))
        else:
            why = ("no checkpoint series given (--checkpoints GLOB)" if cat != "depth"
                   else "fewer layers than the battery needs")
            records[key] = ClaimRecord(key, f"claim {key}", INCONCLUSIVE, f"not measured: {why}")
        status[key] = _brownian_status(files, f"{replicates} replicates per shape and process" if table else None,
                                       calibrated)
    result = {}
    for key, rec in records.items():
        d = rec.to_dict()
        d.pop("per_optimizer", None)  # one model, no optimizers
        d["calibration_status"] = status[key]
        result[key] = d
    return result
