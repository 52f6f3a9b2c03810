"""claims.json (a typed ClaimsFile) as flat tables for the overview figure and the report.

Nothing here decides a verdict or re-reads a spelling: the verdicts are the four strings of
brownformer.verdicts, written by the statistics stage. A field the file does not carry is NaN
or empty, and the report shows it as "n/a" or "not calibrated".
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from brownformer.config import ConfigError, RunSpec
from brownformer.verdicts import ClaimRecord, ClaimsFile

__all__ = ["claims_frame", "did_not_train_frame", "calibration_fields", "CLAIM_COLUMNS"]

CLAIM_COLUMNS = ["claim", "title", "scope", "key", "model", "optimizer", "seed", "verdict", "estimate_name",
                 "estimate", "ci_low", "ci_high", "confidence_level", "margin_low", "margin_high", "calibrated",
                 "calibration_shape", "size", "size_se", "size_fitted", "fitted_files", "power", "power_by_alternative",
                 "equivalence_power", "n_replicates", "pvalue_holm", "reason"]


#: the fields of a calibration shape worth a reader's attention (times, walkers, groups, dims)
_SHAPE_FIELDS = ("kind", "T", "N", "G", "d")


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else math.nan


def _rate(v: Any) -> float:
    """A rejection rate: a number, or the rate of the whole rule ("classification") in a per-test mapping."""
    if isinstance(v, dict):
        v = v.get("classification", v.get("rule"))
    return _num(v)


def calibration_fields(cal: dict | None) -> dict:
    """Size and power of a claim's exact rule at its shape, from ClaimRecord.calibration.

    Returns:
        calibrated (bool), calibration_shape (text), size, size_se, power (the smallest over the
        alternatives), power_by_alternative (text), equivalence_power (how often the rule certifies
        true Brownian motion), n_replicates; size_fitted: the largest size under the files' fitted nulls and
        fitted_files "n of m" files with one (claim 3); NaN/empty where absent.
    """
    out = {"calibrated": False, "calibration_shape": "", "size": math.nan, "size_se": math.nan,
           "size_fitted": math.nan, "fitted_files": "", "power": math.nan,
           "power_by_alternative": "", "equivalence_power": math.nan, "n_replicates": math.nan}
    if not isinstance(cal, dict) or not cal:
        return out
    shape = cal.get("shape")
    if isinstance(shape, dict):
        shown = [k for k in _SHAPE_FIELDS if k in shape] or [k for k, v in shape.items() if not isinstance(v, list)]
        shape = ", ".join(f"{k}={shape[k]}" for k in shown)
    elif isinstance(shape, (list, tuple)):
        shape = "×".join(str(s) for s in shape)
    powers = {str(k): _rate(v) for k, v in (cal.get("power") or {}).items()} if isinstance(cal.get("power"), dict) \
        else {"all": _rate(cal.get("power"))}
    finite = [p for p in powers.values() if math.isfinite(p)]
    out.update(calibrated=True, calibration_shape=str(shape or ""), size=_rate(cal.get("size")),
               size_se=_num(cal.get("size_se")), power=min(finite) if finite else math.nan,
               power_by_alternative=", ".join(f"{k} {v:.2f}" for k, v in sorted(powers.items()) if math.isfinite(v)),
               equivalence_power=_num(cal.get("equivalence_power")), n_replicates=_num(cal.get("n_replicates")),
               size_fitted=_num(cal.get("size_fitted")),
               fitted_files=f"{cal['n_fitted']} of {cal['n_files']}" if "n_fitted" in cal and "n_files" in cal else "")
    return out


def _row(rec: ClaimRecord, scope: str, key: str | None) -> dict:
    est = rec.estimate
    row = {"claim": rec.claim, "title": rec.title, "scope": scope, "key": key, "model": None, "optimizer": None,
           "seed": None, "verdict": rec.verdict, "estimate_name": est.name if est else "",
           "estimate": est.estimate if est else math.nan, "ci_low": est.confidence_interval[0] if est else math.nan,
           "ci_high": est.confidence_interval[1] if est else math.nan,
           "confidence_level": _num(est.confidence_level) if est else math.nan,
           "margin_low": rec.margin[0] if rec.margin else math.nan,
           "margin_high": rec.margin[1] if rec.margin else math.nan,
           "pvalue_holm": _num(rec.pvalue_holm), "reason": rec.reason, **calibration_fields(rec.calibration)}
    if scope == "run" and key:
        try:
            spec = RunSpec.parse(key)
            row.update(model=spec.model, optimizer=spec.optimizer, seed=spec.seed)
        except ConfigError:
            pass
    elif scope == "optimizer":
        row["optimizer"] = key
    elif scope == "model":
        row["model"] = key
    return row


def claims_frame(claims: ClaimsFile | None) -> pd.DataFrame:
    """One row per verdict: each claim's headline ("headline"), and its verdicts per run ("run"), per
    optimizer ("optimizer") and per model variant ("model").

    Returns:
        A frame with CLAIM_COLUMNS (empty when claims is None), claims in file order.
    """
    rows = []
    for rec in (claims.claims.values() if claims else ()):
        rows.append(_row(rec, "headline", None))
        rows += [_row(sub, "run", run) for run, sub in sorted(rec.per_run.items())]
        rows += [_row(sub, "optimizer", opt) for opt, sub in sorted(rec.per_optimizer.items())]
        rows += [_row(sub, "model", model) for model, sub in sorted(getattr(rec, "per_model", {}).items())]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def did_not_train_frame(claims: ClaimsFile | None) -> pd.DataFrame:
    """The runs the statistics stage left out of every claim because they did not train: run, reason."""
    rows = [{"run": str(d.get("run", "?")), "reason": str(d.get("reason", ""))}
            for d in (claims.did_not_train if claims else []) if isinstance(d, dict)]
    return pd.DataFrame(rows, columns=["run", "reason"])
