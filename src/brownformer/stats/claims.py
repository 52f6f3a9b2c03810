"""Verdicts per claim ("supported", "not supported", "inconclusive") from per-file stats outputs.

Rules (stated in the report's Methods):
- Claim 1 (sphere): a run supports it when every depth LN file (LN output before the affine) has
  >= 99% of tokens inside the radius and hyperplane margins; the claim when all runs with data do.
  Runs without LayerNorm (ln "none") are "not applicable" and left out. After-affine output and the
  residual stream are reported beside it (radius CV, mean offset, fraction on the sphere, with CIs).
- Claim 2 (Markov): the testable content is an isotropic (vMF) and reversible kernel. Per run:
  mean vMF "explained" >= margin AND mean reversibility residual <= margin -> supported; either
  clearly outside (95% CI) -> not supported. Causal models: reversibility is undefined -> inconclusive.
- Claims 3a/3b/3c (Brownian over depth / training / weights): all tests of a family get
  Benjamini-Hochberg adjustment; a file counts as non-Brownian when a test rejects after
  adjustment AND its effect lies outside its margin. Fraction of Brownian files >= 0.9 ->
  supported (only when the calibration's minimum power >= 0.9 at that shape, else
  inconclusive); <= 0.5 -> not supported. The same rule on one run's files gives its per-run
  verdict; per optimizer: verdict counts over runs and the median MSD exponent. Family p-value = min BH-adjusted p (Simes), then Holm
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


_TENSOR_LABELS = {"ln_raw": "before_affine", "ln_affine": "after_affine", "resid": "residual"}
_CONTRAST_QUANTITIES = ("fraction_on_sphere", "radius_mean", "radius_cv", "mean_offset", "sum_abs_mean")


def _verdict_from_fraction(frac: float) -> str:
    return "supported" if frac >= 0.99 else ("not supported" if frac <= 0.5 else "inconclusive")


def _ln_placement(run: str, files: list[dict]) -> str | None:
    """LN placement from the trajectory sidecars ("ln"), else from the run id's model name (vit-pre, lm-none...)."""
    for f in files:
        ln = f["sphere"].get("ln") or f.get("ln")
        if ln:
            return ln
    model = run.split("__")[0]
    return next((p for p in ("none", "post", "pre") if p in model.split("-")), None)


def _layer_rows(geom: dict) -> list[dict]:
    per = geom.get("per_layer") or {}
    n = len(next(iter(per.values()))["estimate"]) if per else 0
    return [{q: {"estimate": v["estimate"][i], "ci": [v["ci_low"][i], v["ci_high"][i]]} for q, v in per.items()}
            for i in range(n)]


def _run_captures(files: list[dict]) -> list[dict]:
    """Per capture: step and, per layer, the before-affine / after-affine / residual statistics with CIs."""
    caps: dict = {}
    for f in files:
        sph = f["sphere"]
        geom = sph.get("geometry")
        if not geom:
            continue
        c = caps.setdefault(f.get("capture", sph.get("capture")), {"capture": f.get("capture", sph.get("capture")),
                                                                     "step": sph.get("step"), "tensors": {}})
        c["tensors"][_TENSOR_LABELS[sph.get("tensor", "ln_raw")]] = {"layers": _layer_rows(geom), "pooled": geom["pooled"]}
    out = []
    for key in sorted(caps, key=lambda k: (k is None, k if k is not None else 0)):
        c = caps[key]
        L = max(len(t["layers"]) for t in c["tensors"].values())
        layers = [{"layer": i, **{lab: t["layers"][i] for lab, t in c["tensors"].items() if i < len(t["layers"])}}
                  for i in range(L)]
        out.append({"capture": c["capture"], "step": c["step"], "per_layer": layers,
                    "pooled": {lab: t["pooled"] for lab, t in c["tensors"].items()}})
    return out


def _contrast(runs: dict, names: list[str]) -> dict:
    """Median over runs (bootstrap CI over runs) of each tensor's pooled statistics at the final capture."""
    out = {}
    for lab in _TENSOR_LABELS.values():
        for q in _CONTRAST_QUANTITIES:
            vals = [runs[r]["final"].get(lab, {}).get(q, {}).get("estimate") for r in names if runs[r].get("final")]
            vals = [v for v in vals if v is not None]
            if vals:
                est, ci = _bootstrap_ci(vals)
                out.setdefault(lab, {})[q] = {"estimate": est, "ci": ci, "n_runs": len(vals)}
    for lab in ("after_affine", "residual"):  # per-run differences to the LN output before the affine
        for q in ("radius_cv", "mean_offset", "fraction_on_sphere"):
            diffs = []
            for r in names:
                fin = runs[r].get("final") or {}
                a = fin.get(lab, {}).get(q, {}).get("estimate")
                b = fin.get("before_affine", {}).get(q, {}).get("estimate")
                if a is not None and b is not None:
                    diffs.append(a - b)
            if diffs:
                est, ci = _bootstrap_ci(diffs)
                out.setdefault(f"{lab}_minus_before_affine", {})[q] = {"estimate": est, "ci": ci, "n_runs": len(diffs)}
    return out


def sphere_claim(files: list[dict]) -> dict:
    """Claim 1: are LayerNorm outputs (before the affine) on the sphere of radius sqrt(d) in 1^T z = 0?

    files: [{"run", "sphere": tensor_sphere_summary (or sphere_summary) output, "capture"?}] for the depth
    files of each run: "ln_raw" (LN output before the affine, the claim), "ln_affine" (after gamma, beta)
    and "resid" (residual stream entering each block, contrast). Per run: verdict from the worst capture's
    fraction of tokens inside the margins over the captures after initialisation (>= 0.99 supported, <= 0.5 not supported); "not applicable" for
    ln "none" models (no LayerNorm, the claim does not apply). Per run and capture, per layer: the three
    tensors' fraction on the sphere, mean radius |z|/sqrt(d), radius CV sd|z|/E|z| and mean offset
    |E z|/sqrt(d), with bootstrap CIs over probe inputs; "contrast": the final capture's pooled values,
    median over runs with a bootstrap CI over runs (all runs with a LayerNorm, and "by_ln" placement).
    """
    by_run: dict[str, list] = {}
    for f in files:
        by_run.setdefault(f["run"], []).append(f)
    runs = {}
    for run, fs in sorted(by_run.items()):
        ln = _ln_placement(run, fs)
        raw = [f for f in fs if f["sphere"].get("tensor", "ln_raw") == "ln_raw"]
        caps = _run_captures(fs)
        rec = {"ln": ln, "n_files": len(fs), "captures": caps, "final": caps[-1]["pooled"] if caps else {},
               "final_step": caps[-1]["step"] if caps else None}
        # At initialisation (step 0) activations are tiny and LayerNorm's eps visibly shrinks the
        # radius (sqrt(var / (var + eps)) < 0.99 for low-variance tokens): reported, but the verdict is
        # about the model being trained, so it uses the captures after step 0 when there are any.
        init = [f for f in raw if f["sphere"].get("step") == 0]
        trained = [f for f in raw if f["sphere"].get("step") != 0] or raw
        if init:
            rec["init_fraction_on_sphere"] = min(f["sphere"]["ln_raw"]["fraction_on_sphere"] for f in init)
        raw = trained
        if raw:
            fr = [f["sphere"]["ln_raw"]["fraction_on_sphere"] for f in raw]
            worst = raw[int(np.argmin(fr))]["sphere"]
            ci = (worst.get("geometry") or {}).get("pooled", {}).get("fraction_on_sphere", {}).get("ci", [None, None])
            rec.update({"min_fraction_on_sphere": min(fr), "verdict": _verdict_from_fraction(min(fr)),
                        "effect_size": {"name": "fraction of LN outputs (before affine) inside the margins, worst capture",
                                        "estimate": min(fr), "ci": ci}})
        else:
            rec.update({"min_fraction_on_sphere": None, "verdict": "inconclusive", "reason": "no LN output files"})
        if ln == "none":
            rec.update({"verdict": "not applicable", "reason": "ln 'none' (no LayerNorm): the claim does not apply; "
                        "its 'LN output' is the stream rescaled to radius sqrt(d), on the sphere by construction"})
        runs[run] = rec
    applicable = [r for r, v in runs.items() if v["verdict"] != "not applicable"]
    verdicts = [runs[r]["verdict"] for r in applicable]
    verdict = ("inconclusive" if not verdicts else "supported" if all(v == "supported" for v in verdicts)
               else "not supported" if sum(v == "not supported" for v in verdicts) > len(verdicts) / 2 else "inconclusive")
    est, ci = _bootstrap_ci([runs[r]["min_fraction_on_sphere"] for r in applicable])
    by_ln = {}
    for ln in sorted({v["ln"] for v in runs.values()}, key=str):
        names = [r for r, v in runs.items() if v["ln"] == ln]
        counts: dict[str, int] = {}
        for r in names:
            counts[runs[r]["verdict"]] = counts.get(runs[r]["verdict"], 0) + 1
        by_ln[str(ln)] = {"runs": names, "verdicts": counts, "contrast": _contrast(runs, names)}
    out = {"claim": "1 sphere", "verdict": verdict,
           "effect_size": {"name": "fraction of tokens on the sphere (min per run, median over runs)",
                           "estimate": est, "ci": ci},
           "contrast": _contrast(runs, applicable),
           "contrast_definition": "final capture, mean over layers of each statistic; median over runs with a "
                                  "percentile bootstrap CI over runs. before_affine is the claim; after_affine shows "
                                  "the affine distortion (radius_cv > 0; mean_offset grows with beta); residual is the "
                                  "contrast; *_minus_before_affine: median of per-run differences (the affine's and "
                                  "the unnormalised stream's effect net of token clustering, which raises mean_offset "
                                  "even on the sphere)",
           "by_ln": by_ln, "not_applicable": [r for r in runs if r not in applicable],
           "tests": ["equivalence margins on |z|/sqrt(d) and 1^T z/sqrt(d)"], "per_run": runs}
    if not applicable and runs:
        out["reason"] = "no run has a LayerNorm (ln 'none' only): the claim does not apply"
    return out


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
    per_run = _brownian_per_run(files, is_brown, min_power, df)
    return {"claim": name, "verdict": verdict, "fraction_brownian": frac, "n_files": len(files),
            "effect_size": {"name": "MSD exponent (median over files)", "estimate": est, "ci": ci},
            "p_value": float(np.nanmin(df["p_bh"])) if np.isfinite(df["p_bh"]).any() else None,
            "p_value_method": "min BH-adjusted p over the family (Simes global test of 'all Brownian')",
            "calibrated": calibrated, "calibration_min_power": float(np.min(min_power)) if min_power else None,
            "tests": sorted(df["test"].unique().tolist()), "per_run": per_run,
            "per_optimizer": _brownian_per_optimizer(files, per_run)}


def _fraction_verdict(frac: float, powers: list) -> str:
    """The family rule applied to a set of files: <= 0.5 Brownian -> not supported; >= 0.9 -> supported
    unless the calibration measured power < 0.9 at these shapes; else inconclusive."""
    lo, hi = CLAIM_MARGINS["brownian_fraction"]
    powerful = not powers or float(np.min(powers)) >= 0.9
    return "not supported" if frac <= lo else "supported" if frac >= hi and powerful else "inconclusive"


def _brownian_per_run(files: list[dict], is_brown: np.ndarray, min_power: list, df: pd.DataFrame) -> dict:
    """Per run: file counts, classes, the family rule on the run's files (BH over the whole family),
    the median MSD exponent (bootstrap CI over the run's files) and the run's min BH-adjusted p."""
    per_run: dict = {}
    for i, (f, b) in enumerate(zip(files, is_brown)):
        r = per_run.setdefault(f["run"], {"n_files": 0, "n_brownian": 0, "classes": {}, "_exp": [], "_pow": [], "_i": []})
        r["n_files"] += 1
        r["n_brownian"] += int(b)
        c = f["result"]["classification"]
        r["classes"][c] = r["classes"].get(c, 0) + 1
        r["_exp"].append(f["result"]["msd_exponent"]["estimate"])
        r["_i"].append(i)
        p = (f["result"].get("calibration") or {}).get("classification_min_power")
        if p is not None:
            r["_pow"].append(p)
    for run, r in per_run.items():
        exps, pows, idx = r.pop("_exp"), r.pop("_pow"), r.pop("_i")
        frac = r["n_brownian"] / r["n_files"]
        est, ci = _bootstrap_ci(exps)
        p = df.loc[df["file"].isin(idx), "p_bh"].astype(float)
        r.update({"fraction_brownian": frac, "verdict": _fraction_verdict(frac, pows),
                  "effect_size": {"name": "MSD exponent (median over the run's files)", "estimate": est, "ci": ci},
                  "median_msd_exponent": est, "p_value": float(np.nanmin(p)) if np.isfinite(p).any() else None,
                  "calibration_min_power": float(np.min(pows)) if pows else None})
    return per_run


def _brownian_per_optimizer(files: list[dict], per_run: dict) -> dict:
    """Per optimizer (from the run id <model>__<optimizer>__s<seed>): verdict counts over runs and the
    median MSD exponent over all of its files (bootstrap CI over files)."""
    out: dict = {}
    for run, r in per_run.items():
        parts = run.split("__")
        opt = parts[1] if len(parts) == 3 else "unknown"
        o = out.setdefault(opt, {"runs": [], "verdicts": {}})
        o["runs"].append(run)
        o["verdicts"][r["verdict"]] = o["verdicts"].get(r["verdict"], 0) + 1
    for opt, o in out.items():
        exps = [f["result"]["msd_exponent"]["estimate"] for f in files if f["run"] in o["runs"]]
        est, ci = _bootstrap_ci(exps)
        o.update({"n_runs": len(o["runs"]), "n_files": len(exps), "median_msd_exponent": est,
                  "median_msd_exponent_ci": ci})
    return out


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


def time_to_target_table(metrics_by_run: dict, *, target_optimizer: str = "adamw") -> pd.DataFrame:
    """Steps and seconds each run needs to reach its model's target (the rule of claim 4).

    Per model: target = the target optimizer's final val metric on its weakest seed, so every
    target seed reaches it by its last step (a median target leaves half its seeds "never").
    A run reaches it at its first evaluation at least as good; runs that never do get inf.

    Args:
        metrics_by_run: run_id -> DataFrame with columns step, wall_time and val_accuracy | val_bpc | val_loss.
    Returns:
        One row per run: model, optimizer, seed, run, metric, higher_is_better, target, final, reached,
        steps, seconds, total_seconds (target is NaN when the model has no target-optimizer run).
    """
    from brownformer.config import RunSpec
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    rows = []
    for model in sorted({s.model for s in specs.values()}):
        runs = {r: df for r, df in sorted(metrics_by_run.items()) if specs[r].model == model}
        col, higher = _metric(next(iter(runs.values())))
        finals = [df[col].dropna().iloc[-1] for r, df in runs.items() if specs[r].optimizer == target_optimizer
                  and df[col].notna().any()]
        target = float(np.min(finals) if higher else np.max(finals)) if finals else np.nan
        for r, df in runs.items():
            s, w = _time_to_target(df, col, higher, target) if finals else (np.inf, np.inf)
            final = df[col].dropna()
            rows.append({"model": model, "optimizer": specs[r].optimizer, "seed": specs[r].seed, "run": r,
                         "metric": col, "higher_is_better": higher, "target": target,
                         "final": float(final.iat[-1]) if len(final) else np.nan, "reached": bool(np.isfinite(s)),
                         "steps": s, "seconds": w,
                         "total_seconds": float(df["wall_time"].iat[-1]) if "wall_time" in df else np.nan})
    return pd.DataFrame(rows)


def optimizer_claim(metrics_by_run: dict, *, target_optimizer: str = "adamw", proposed: str = "kfac-iterative",
                    confidence_level: float = 0.95, rng=0) -> dict:
    """Claim 4: does the proposed optimizer reach the target's final validation metric sooner?

    Per model: steps and seconds to the target of `time_to_target_table` (inf if never); median over seeds
    with a bootstrap CI over seeds. Supported when the proposed optimizer's CI lies entirely
    below every baseline's (steps AND seconds); not supported when some baseline's CI lies
    entirely below the proposed's or the proposed never reaches the target; else inconclusive.

    Args:
        metrics_by_run: run_id -> DataFrame with columns step, wall_time and val_accuracy | val_bpc | val_loss.
    """
    table = time_to_target_table(metrics_by_run, target_optimizer=target_optimizer)
    per_model = {}
    for model, runs in table.groupby("model", sort=True):
        col, higher, target = runs["metric"].iat[0], bool(runs["higher_is_better"].iat[0]), runs["target"].iat[0]
        if not np.isfinite(target):
            per_model[model] = {"verdict": "inconclusive", "reason": f"no {target_optimizer} runs"}
            continue
        opts = {o: {"steps": g["steps"].tolist(), "seconds": g["seconds"].tolist()}
                for o, g in runs.groupby("optimizer", sort=False)}
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
