"""Claims across scale: each claim's key statistic against depth and against width.

A scaling study (config key `scaling: {width, depth}`) groups the grid's models by (dataset,
arch, ln). Within a group the *depth series* is the models of width `width` (size = n_layers)
and the *width series* the models of depth `depth` (size = d_model); the model at (depth, width)
belongs to both. Every number comes from claims.json's per-run records (the estimate and CI the
claim rule itself reported) and from the runs' metrics (brownformer.stats.core.training_status), so the
scaling figure and the report's Scaling section quote one table.

Per (model, optimizer) the seeds are pooled: the estimate is their mean m = (1/n) sum x_i; its
standard error combines each run's own uncertainty, se_i = (hi_i - lo_i) / (2 z), with the spread
between seeds, se^2 = (1/n^2) sum se_i^2 + s^2 / n (s^2 the sample variance of the x_i, 0 when
n = 1), and the CI is m +- z se at the claim's confidence level. When a run reported no CI only
the spread between seeds counts (no CI at all for a single such run). A trend is Spearman's rank
correlation of the per-run estimates with size (scipy.stats.spearmanr); a verdict "flips" where
the majority verdict of a model's runs differs from the previous size's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from brownformer.config import ExperimentConfig, RunSpec
from brownformer.stats.core.training_status import ChanceBaseline, training_status
from brownformer.verdicts import DID_NOT_TRAIN, ClaimsFile

__all__ = ["STUDY_COMMAND", "SCALING_CLAIMS", "ScalingPoint", "series_of", "claim_points", "pooled_by_model", "trends",
           "verdict_flips", "training_table"]

#: the command that runs the study shipped with the project
STUDY_COMMAND = "snakemake --cores all --configfile config/scaling.yaml"
#: claims whose key statistic is followed across scale (claim 4 is a ratio between optimizers)
SCALING_CLAIMS = ("1", "2", "3a", "3b", "3c")


@dataclass(frozen=True)
class ScalingPoint:
    """Where one model sits in the study: its group, series and size along that series."""
    group: str
    series: str  # "depth" | "width"
    size: int
    model: str


def _group_name(cfg: ExperimentConfig, model: str) -> str:
    m = cfg.models[model]
    return f"{m.dataset} {m.arch} {m.ln}-LN"


def series_of(cfg: ExperimentConfig) -> list[ScalingPoint]:
    """Every (group, series, size, model) of the study, sorted; [] when the config has no `scaling` key."""
    if not cfg.scaling:
        return []
    models = dict.fromkeys(r.model for r in cfg.runs())
    points = []
    for name in models:
        m = cfg.models[name]
        if m.d_model == cfg.scaling["width"]:
            points.append(ScalingPoint(_group_name(cfg, name), "depth", m.n_layers, name))
        if m.n_layers == cfg.scaling["depth"]:
            points.append(ScalingPoint(_group_name(cfg, name), "width", m.d_model, name))
    return sorted(points, key=lambda p: (p.group, p.series, p.size, p.model))


def claim_points(cfg: ExperimentConfig, claims: ClaimsFile | None) -> pd.DataFrame:
    """One row per (series point, claim, run): estimate, CI, confidence level, verdict, margin.

    Columns: group, series, size, model, optimizer, seed, run, claim, name, value, ci_low, ci_high,
    confidence_level, verdict, margin_low, margin_high. Empty when claims.json is missing.
    """
    cols = ["group", "series", "size", "model", "optimizer", "seed", "run", "claim", "name", "value",
            "ci_low", "ci_high", "confidence_level", "verdict", "margin_low", "margin_high"]
    if claims is None:
        return pd.DataFrame(columns=cols)
    by_model: dict[str, list[ScalingPoint]] = {}
    for p in series_of(cfg):
        by_model.setdefault(p.model, []).append(p)
    rows = []
    for cid in SCALING_CLAIMS:
        record = claims.claims.get(cid)
        if record is None:
            continue
        for run_id, rec in sorted(record.per_run.items()):
            if rec.verdict == DID_NOT_TRAIN:  # shown in the training table, never pooled into a point
                continue
            spec = RunSpec.parse(run_id)
            est = rec.estimate
            margin = rec.margin or record.margin or (math.nan, math.nan)
            for p in by_model.get(spec.model, []):
                rows.append({"group": p.group, "series": p.series, "size": p.size, "model": p.model,
                             "optimizer": spec.optimizer, "seed": spec.seed, "run": run_id, "claim": cid,
                             "name": est.name if est else "", "value": est.estimate if est else math.nan,
                             "ci_low": est.confidence_interval[0] if est else math.nan,
                             "ci_high": est.confidence_interval[1] if est else math.nan,
                             "confidence_level": (est.confidence_level if est and est.confidence_level else 0.95),
                             "verdict": rec.verdict, "margin_low": margin[0], "margin_high": margin[1]})
    return pd.DataFrame(rows, columns=cols)


def _pool(g: pd.DataFrame) -> pd.Series:
    """Seed-pooled estimate and CI of one (model, optimizer, claim) (module docstring)."""
    x = g["value"].to_numpy(float)
    ok = np.isfinite(x)
    n = int(ok.sum())
    if n == 0:
        return pd.Series({"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_runs": 0})
    level = float(g["confidence_level"].iloc[0])
    z = float(stats.norm.ppf(0.5 + level / 2))
    se_runs = (g["ci_high"].to_numpy(float) - g["ci_low"].to_numpy(float))[ok] / (2 * z)
    mean = float(x[ok].mean())
    if np.isfinite(se_runs).all():
        within = float(np.sum(se_runs ** 2)) / n ** 2
    elif n > 1:  # a run without a CI: only the spread between seeds measures the uncertainty
        within = 0.0
    else:
        return pd.Series({"value": mean, "ci_low": math.nan, "ci_high": math.nan, "n_runs": n})
    between = float(np.var(x[ok], ddof=1)) / n if n > 1 else 0.0
    se = math.sqrt(within + between)
    return pd.Series({"value": mean, "ci_low": mean - z * se, "ci_high": mean + z * se, "n_runs": n})


def pooled_by_model(points: pd.DataFrame) -> pd.DataFrame:
    """claim_points pooled over seeds: one row per (group, series, size, model, optimizer, claim)."""
    keys = ["group", "series", "size", "model", "optimizer", "claim", "margin_low", "margin_high"]
    if points.empty:
        return pd.DataFrame(columns=keys + ["name", "value", "ci_low", "ci_high", "n_runs"])
    # the statistic's name from the runs that have an estimate (a run without one carries "")
    names = points[points["name"] != ""].groupby(keys, sort=True, dropna=False)["name"].first()
    pooled = points.groupby(keys, sort=True, dropna=False)[["value", "ci_low", "ci_high", "confidence_level"]]
    out = pooled.apply(_pool)
    out.insert(0, "name", names.reindex(out.index).fillna(""))
    return out.reset_index()


def trends(points: pd.DataFrame) -> pd.DataFrame:
    """Spearman's rho (and p-value) of the per-run estimates against size, per (group, series, claim)."""
    rows = []
    for (group, series, cid), g in points.groupby(["group", "series", "claim"], sort=True):
        name = next((n for n in g["name"] if n), "")
        g = g[np.isfinite(g["value"].to_numpy(float))]
        rho, p = (math.nan, math.nan)
        if g["size"].nunique() >= 2 and g["value"].nunique() >= 2:
            res = stats.spearmanr(g["size"], g["value"])
            rho, p = float(res.statistic), float(res.pvalue)
        rows.append({"group": group, "series": series, "claim": cid, "name": name,
                     "rho": rho, "pvalue": p, "n_runs": len(g), "sizes": g["size"].nunique()})
    return pd.DataFrame(rows, columns=["group", "series", "claim", "name", "rho", "pvalue", "n_runs", "sizes"])


def _majority(verdicts: pd.Series) -> str:
    counts = verdicts.value_counts()
    top = counts[counts == counts.max()].index
    return sorted(top)[0] if len(top) == 1 else "mixed"


def verdict_flips(points: pd.DataFrame) -> pd.DataFrame:
    """Majority verdict per size and where it changes, per (group, series, claim).

    Columns: group, series, claim, size, verdict (the majority of that size's runs, "mixed" on a
    tie), flip (True where it differs from the previous size's).
    """
    rows = []
    for (group, series, cid), g in points.groupby(["group", "series", "claim"], sort=True):
        previous = None
        for size, gs in g.groupby("size", sort=True):
            verdict = _majority(gs["verdict"])
            rows.append({"group": group, "series": series, "claim": cid, "size": int(size), "verdict": verdict,
                         "flip": previous is not None and verdict != previous})
            previous = verdict
    return pd.DataFrame(rows, columns=["group", "series", "claim", "size", "verdict", "flip"])


def training_table(cfg: ExperimentConfig, metrics_by_run: Mapping[str, pd.DataFrame],
                   baselines: Mapping[str, ChanceBaseline | None]) -> pd.DataFrame:
    """Per model of the study: runs, how many did not train, how many reached a plateau, median final metric.

    Args:
        cfg: the study's config.
        metrics_by_run: run id -> that run's metrics table.
        baselines: dataset name -> its chance baseline (None: only the divergence rule applies).
    """
    rows = []
    models = {p.model: p for p in series_of(cfg)}
    for model in models:
        statuses = [training_status(metrics_by_run[r.run_id], baselines.get(cfg.models[model].dataset))
                    for r in cfg.runs() if r.model == model and r.run_id in metrics_by_run]
        finals = [s.final for s in statuses if s.final is not None and math.isfinite(s.final)]
        m = cfg.models[model]
        rows.append({"model": model, "dataset": m.dataset, "n_layers": m.n_layers, "d_model": m.d_model,
                     "runs": len(statuses), "did_not_train": sum(s.did_not_train for s in statuses),
                     "reached_plateau": sum(bool(s.reached_plateau) for s in statuses),
                     "metric": next((s.metric for s in statuses if s.metric), None),
                     "final_median": float(np.median(finals)) if finals else math.nan})
    cols = ["model", "dataset", "n_layers", "d_model", "runs", "did_not_train", "reached_plateau", "metric",
            "final_median"]
    return pd.DataFrame(rows, columns=cols).sort_values(["dataset", "n_layers", "d_model"]).reset_index(drop=True)
