"""Verdicts per claim ("supported", "not supported", "inconclusive") from per-file stats outputs.

Rules (stated in the report's Methods):
- Claim 1 (sphere): a run supports it when every depth LN file has >= 99% of tokens inside the
  radius and hyperplane margins; the claim when all runs with data do.
- Claim 2 (Markov): the testable content is an isotropic (vMF) and reversible kernel. Per run:
  mean vMF "explained" >= margin AND mean reversibility residual <= margin -> supported; either
  clearly outside (95% CI) -> not supported. Causal models: reversibility is undefined -> inconclusive.
- Claims 3a/3b/3c (Brownian over depth / training / weights): all tests of a family get
  Benjamini-Hochberg adjustment; a file counts as non-Brownian when a test rejects after
  adjustment AND its effect lies outside its margin. Fraction of Brownian files >= 0.9 ->
  supported (only when the calibration's minimum power >= 0.9 at that shape, else
  inconclusive); <= 0.5 -> not supported. Family p-value = min BH-adjusted p (Simes), then Holm
  across the headline claims.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from .multiple import bh_adjust, holm_adjust
from .results import to_jsonable

log = logging.getLogger(__name__)

__all__ = ["sphere_claim", "markov_claim", "brownian_claim", "optimizer_claim", "headline_holm",
           "CLAIM_MARGINS"]

CLAIM_MARGINS = {"vmf_explained": (0.5, 1.0), "reversibility_residual": (0.0, 0.1), "brownian_fraction": (0.5, 0.9)}


def _bootstrap_ci(values, stat=np.median, *, confidence_level=0.95, rng=0, n_resamples=999):
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
    if v.size == 0:
        return np.nan, [np.nan, np.nan]
    if v.size < 2 or np.ptp(v) == 0:
        return float(stat(v)), [float(stat(v))] * 2
    from scipy.stats import bootstrap
    r = bootstrap((v,), stat, n_resamples=n_resamples, confidence_level=confidence_level, method="percentile",
                  rng=np.random.default_rng(rng), vectorized=False)
    return float(stat(v)), [float(r.confidence_interval.low), float(r.confidence_interval.high)]


def sphere_claim(files: list[dict]) -> dict:
    """files: [{"run", "sphere": sphere_summary output}] for depth LN files."""
    per_run: dict[str, list] = {}
    for f in files:
        per_run.setdefault(f["run"], []).append(f["sphere"]["ln_raw"]["fraction_on_sphere"])
    runs = {r: {"min_fraction_on_sphere": min(v), "verdict": "supported" if min(v) >= 0.99 else
                ("not supported" if min(v) <= 0.5 else "inconclusive")} for r, v in per_run.items()}
    verdicts = [x["verdict"] for x in runs.values()]
    verdict = ("inconclusive" if not verdicts else "supported" if all(v == "supported" for v in verdicts)
               else "not supported" if sum(v == "not supported" for v in verdicts) > len(verdicts) / 2 else "inconclusive")
    est, ci = _bootstrap_ci([x["min_fraction_on_sphere"] for x in runs.values()])
    return {"claim": "1 sphere", "verdict": verdict, "effect_size": {"name": "fraction of tokens on the sphere (min per run, median over runs)",
            "estimate": est, "ci": ci}, "tests": ["equivalence margins on |z|/sqrt(d) and 1^T z/sqrt(d)"], "per_run": runs}


def markov_claim(files: list[dict], *, margins: dict | None = None) -> dict:
    """files: [{"run", "attention": analyze_attention output}]."""
    m = {**CLAIM_MARGINS, **(margins or {})}
    per_run = {}
    for run in sorted({f["run"] for f in files}):
        aggs = [f["attention"]["aggregate"] for f in files if f["run"] == run]
        causal = any(f["attention"]["causal"] for f in files if f["run"] == run)
        expl = [a.get("vmf_explained", {}).get("mean") for a in aggs]
        rev = [a.get("reversibility_residual", {}).get("mean") for a in aggs]
        e_est, e_ci = _bootstrap_ci(expl, np.mean)
        r_est, r_ci = _bootstrap_ci(rev, np.mean)
        if causal or not np.isfinite(r_est) or not np.isfinite(e_est):
            v = "inconclusive"
        elif e_est >= m["vmf_explained"][0] and r_est <= m["reversibility_residual"][1]:
            v = "supported"
        elif e_ci[1] < m["vmf_explained"][0] or r_ci[0] > m["reversibility_residual"][1]:
            v = "not supported"
        else:
            v = "inconclusive"
        per_run[run] = {"vmf_explained": e_est, "vmf_explained_ci": e_ci, "reversibility_residual": r_est,
                        "reversibility_residual_ci": r_ci, "causal": causal, "verdict": v}
    verdicts = [x["verdict"] for x in per_run.values()]
    verdict = ("inconclusive" if not verdicts or all(v == "inconclusive" for v in verdicts) else
               "supported" if all(v == "supported" for v in verdicts if v != "inconclusive") else
               "not supported" if all(v == "not supported" for v in verdicts if v != "inconclusive") else "inconclusive")
    est, ci = _bootstrap_ci([x["reversibility_residual"] for x in per_run.values()])
    return {"claim": "2 markov", "verdict": verdict,
            "effect_size": {"name": "reversibility residual (median over runs)", "estimate": est, "ci": ci},
            "tests": ["vMF kernel fit (KL explained)", "detailed-balance residual"], "margins": m, "per_run": per_run}


def brownian_claim(name: str, files: list[dict], *, alpha: float = 0.05) -> dict:
    """files: [{"run", "path", "result": analyze_trajectory output}] of one family (depth/training/weights)."""
    rows = []
    for i, f in enumerate(files):
        eff = f["result"].get("effect_sizes", {})
        for t in f["result"]["tests"]:
            key = next((k for k, v in eff.items() if k in (t["name"], {"gaussianity": "excess_kurtosis",
                        "tail_index": "tail_index_ratio", "volatility_clustering": "volatility_autocorrelation",
                        "drift": "drift_fraction"}.get(t["name"]))), None)
            outside = False
            if key is not None and eff[key]["estimate"] is not None:
                lo, hi = eff[key]["margin"]
                outside = not (lo <= eff[key]["estimate"] <= hi)
            rows.append({"file": i, "test": t["name"], "p": t["p_value"], "outside": outside})
    if not rows:
        return {"claim": name, "verdict": "inconclusive", "reason": "no files", "effect_size": None, "p_value": None}
    df = pd.DataFrame(rows)
    df["p_bh"] = bh_adjust(df["p"].astype(float).to_numpy())
    bad = df[(df["p_bh"] < alpha) & df["outside"]].groupby("file").size()
    is_brown = np.array([i not in bad.index for i in range(len(files))])
    frac = float(is_brown.mean())
    powers = [f["result"].get("calibration", {}) or {} for f in files]
    min_power = [p.get("classification_min_power") for p in powers if p.get("classification_min_power") is not None]
    calibrated = bool(min_power)
    powerful = calibrated and float(np.min(min_power)) >= 0.9
    lo, hi = CLAIM_MARGINS["brownian_fraction"]
    verdict = ("not supported" if frac <= lo else
               "supported" if frac >= hi and (powerful or not calibrated) else "inconclusive")
    est, ci = _bootstrap_ci([f["result"]["msd_exponent"]["estimate"] for f in files])
    per_run = {}
    for f, b in zip(files, is_brown):
        r = per_run.setdefault(f["run"], {"n_files": 0, "n_brownian": 0, "classes": {}})
        r["n_files"] += 1
        r["n_brownian"] += int(b)
        c = f["result"]["classification"]
        r["classes"][c] = r["classes"].get(c, 0) + 1
    return {"claim": name, "verdict": verdict, "fraction_brownian": frac, "n_files": len(files),
            "effect_size": {"name": "MSD exponent (median over files)", "estimate": est, "ci": ci},
            "p_value": float(np.nanmin(df["p_bh"])) if np.isfinite(df["p_bh"]).any() else None,
            "p_value_method": "min BH-adjusted p over the family (Simes global test of 'all Brownian')",
            "calibrated": calibrated, "calibration_min_power": float(np.min(min_power)) if min_power else None,
            "tests": sorted(df["test"].unique().tolist()), "per_run": per_run}


def headline_holm(claims: dict) -> dict:
    """Holm-adjust the family p-values of the headline claims in place; returns claims."""
    keys = [k for k, c in claims.items() if c.get("p_value") is not None]
    adj = holm_adjust([claims[k]["p_value"] for k in keys])
    for k, a in zip(keys, adj):
        claims[k]["p_value_holm"] = float(a)
    return claims


def _metric(df: pd.DataFrame) -> tuple[str, bool]:
    for col, higher in (("val_accuracy", True), ("val_bpc", False), ("val_loss", False)):
        if col in df and df[col].notna().any():
            return col, higher
    raise ValueError("metrics need one of val_accuracy, val_bpc, val_loss")


def _time_to_target(df, col, higher, target):
    d = df[df[col].notna()].sort_values("step")
    hit = d[d[col] >= target] if higher else d[d[col] <= target]
    if hit.empty:
        return np.inf, np.inf
    row = hit.iloc[0]
    return float(row["step"]), float(row["wall_time"]) if "wall_time" in row and pd.notna(row["wall_time"]) else np.nan


def optimizer_claim(metrics_by_run: dict, *, target_optimizer: str = "adamw", proposed: str = "kfac-iterative",
                    confidence_level: float = 0.95, rng=0) -> dict:
    """Claim 4: does the proposed optimizer reach the target's final validation metric sooner?

    Per model: target = median over seeds of the target optimizer's final val metric; for every
    run, steps and seconds until the metric first reaches it (inf if never); median over seeds
    with a bootstrap CI over seeds. Supported when the proposed optimizer's CI lies entirely
    below every baseline's (steps AND seconds); not supported when some baseline's CI lies
    entirely below the proposed's or the proposed never reaches the target; else inconclusive.

    Args:
        metrics_by_run: run_id -> DataFrame with columns step, wall_time and val_accuracy | val_bpc | val_loss.
    """
    from brownformer.config import RunSpec
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    per_model = {}
    for model in sorted({s.model for s in specs.values()}):
        runs = {r: df for r, df in metrics_by_run.items() if specs[r].model == model}
        col, higher = _metric(next(iter(runs.values())))
        finals = [df[col].dropna().iloc[-1] for r, df in runs.items() if specs[r].optimizer == target_optimizer
                  and df[col].notna().any()]
        if not finals:
            per_model[model] = {"verdict": "inconclusive", "reason": f"no {target_optimizer} runs"}
            continue
        target = float(np.median(finals))
        opts = {}
        for r, df in runs.items():
            s, w = _time_to_target(df, col, higher, target)
            o = opts.setdefault(specs[r].optimizer, {"steps": [], "seconds": []})
            o["steps"].append(s)
            o["seconds"].append(w)
        summary = {}
        for o, v in opts.items():
            summary[o] = {}
            for unit in ("steps", "seconds"):
                x = np.asarray(v[unit], float)
                if np.isinf(x).any() and np.isinf(np.median(x)):
                    summary[o][unit] = {"median": np.inf, "ci": [np.inf, np.inf], "values": x.tolist()}
                else:
                    fin = np.where(np.isinf(x), np.nanmax(x[np.isfinite(x)]) * 10 if np.isfinite(x).any() else np.nan, x)
                    est, ci = _bootstrap_ci(fin, confidence_level=confidence_level, rng=rng)
                    summary[o][unit] = {"median": est, "ci": ci, "values": x.tolist()}
        verdicts = {}
        if proposed in summary:
            for unit in ("steps", "seconds"):
                p = summary[proposed][unit]
                others = [summary[o][unit] for o in summary if o != proposed]
                if not np.isfinite(p["median"]):
                    verdicts[unit] = "not supported"
                elif others and all(p["ci"][1] < b["ci"][0] for b in others):
                    verdicts[unit] = "supported"
                elif any(b["ci"][1] < p["ci"][0] for b in others):
                    verdicts[unit] = "not supported"
                else:
                    verdicts[unit] = "inconclusive"
        v = list(verdicts.values())
        verdict = ("inconclusive" if not v else "supported" if all(x == "supported" for x in v)
                   else "not supported" if "not supported" in v else "inconclusive")
        per_model[model] = {"metric": col, "higher_is_better": higher, "target": target, "per_optimizer": summary,
                            "verdict_by_unit": verdicts, "verdict": verdict}
    vs = [m["verdict"] for m in per_model.values()]
    verdict = ("inconclusive" if not vs else "supported" if all(x == "supported" for x in vs)
               else "not supported" if all(x == "not supported" for x in vs) else "inconclusive")
    return to_jsonable({"claim": "4 optimizer", "verdict": verdict, "proposed": proposed, "target_optimizer": target_optimizer,
                        "tests": ["steps and seconds to the target's final val metric; median over seeds, percentile bootstrap CI"],
                        "per_model": per_model})
