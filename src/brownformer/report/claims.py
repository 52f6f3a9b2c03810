"""Verdicts of the statistics stage (claims.json) as one flat table for the figures and the report.

claims.json is read leniently: a list of claim records, or a mapping holding such lists
("claims" for the headline verdicts, "per_run"/"runs" for verdicts per run). A record needs
at least a claim name and a verdict; effect size, CI, tests and p-value are carried when present.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = ["claims_table", "normalize_verdict", "VERDICT_LABELS"]

VERDICT_LABELS = ("supported", "not supported", "inconclusive")

COLUMNS = ["claim", "title", "scope", "run", "model", "optimizer", "seed", "verdict", "estimate_name",
           "effect_size", "ci_low", "ci_high", "p_value", "tests", "reason"]


def normalize_verdict(v: Any) -> str:
    """Map spellings ("not_supported", "Supported", True/False) onto VERDICT_LABELS."""
    if isinstance(v, bool):
        return "supported" if v else "not supported"
    s = str(v or "").strip().lower().replace("_", " ").replace("-", " ")
    if s in ("supported", "yes", "true", "pass"):
        return "supported"
    if s in ("not supported", "unsupported", "rejected", "no", "false", "refuted", "fail"):
        return "not supported"
    return "inconclusive"


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _tests_text(t: Any) -> str:
    if isinstance(t, str):
        return t
    if isinstance(t, dict):
        return ", ".join(str(k) for k in t)
    if isinstance(t, (list, tuple)):
        return ", ".join(str(x.get("name", x)) if isinstance(x, dict) else str(x) for x in t)
    return ""


def _record(rec: dict, scope: str, key: str | None = None) -> dict | None:
    claim = rec.get("claim", rec.get("name", rec.get("id", key)))
    if claim is None or not any(k in rec for k in ("verdict", "supported", "status")):
        return None
    verdict = rec.get("verdict", rec.get("status", rec.get("supported")))
    effect = rec.get("effect_size", rec.get("estimate"))
    if isinstance(effect, dict):
        ci = effect.get("ci", effect.get("confidence_interval"))
        name = effect.get("name")
        effect = effect.get("estimate", effect.get("value"))
    else:
        ci, name = None, None
    ci = ci or rec.get("ci") or rec.get("confidence_interval") or [None, None]
    return {"claim": str(claim), "title": str(rec.get("title", rec.get("statement", claim))), "scope": scope,
            "run": rec.get("run"), "model": rec.get("model"), "optimizer": rec.get("optimizer"),
            "seed": rec.get("seed"), "verdict": normalize_verdict(verdict),
            "estimate_name": str(rec.get("estimate_name", name or rec.get("effect", "")) or ""),
            "effect_size": _num(effect), "ci_low": _num(ci[0]) if len(ci) > 0 else math.nan,
            "ci_high": _num(ci[1]) if len(ci) > 1 else math.nan,
            "p_value": _num(next((rec[k] for k in ("p_value_holm", "p_value", "pvalue", "p_adjusted")
                                  if rec.get(k) is not None), None)),
            "tests": _tests_text(rec.get("tests", rec.get("test", ""))), "reason": str(rec.get("reason", "") or "")}


def _records(obj: Any, scope: str) -> list[dict]:
    """Records of a list of claims, or of a mapping key -> claim (the key names the claim if it has no name)."""
    items = obj.items() if isinstance(obj, dict) else ((None, rec) for rec in obj or []) if isinstance(obj, list) else ()
    out = []
    for key, rec in items:
        if not isinstance(rec, dict):
            continue
        r = _record(rec, "run" if rec.get("run") else scope, key)
        if r:
            out.append(r)
            if r["scope"] == "headline":
                out += _children(rec, r)
    return out


def _children(rec: dict, parent: dict) -> list[dict]:
    """Verdicts nested under a headline claim: per_run {run_id: {...}} or per_model {model: {...}}."""
    from brownformer.config import ConfigError, RunSpec

    out = []
    for sub, scope in (("per_run", "run"), ("per_model", "model")):
        nested = rec.get(sub)
        items = nested.items() if isinstance(nested, dict) else \
            ((c.get("run") or c.get("model"), c) for c in nested or [] if isinstance(c, dict))
        for key, child in items:
            if not isinstance(child, dict) or "verdict" not in child:
                continue
            row = _record({**child, "claim": parent["claim"], "title": parent["title"]}, scope)
            if scope == "run":
                row["run"] = child.get("run", key)
                try:
                    spec = RunSpec.parse(str(row["run"]))
                    row.update(model=spec.model, optimizer=spec.optimizer, seed=spec.seed)
                except ConfigError:
                    pass
            else:
                row["model"] = key
            out.append(row)
    return out


def claims_table(claims: Any, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Flatten claims.json (and, if it holds no per-run verdicts, summary.parquet) into COLUMNS.

    scope is "headline" for a claim's overall verdict and "run" for a verdict on one run.
    """
    rows: list[dict] = []
    if isinstance(claims, dict) and not any(isinstance(v, dict) and "verdict" in v for v in claims.values()):
        for key in ("claims", "headline", "headlines"):
            rows += _records(claims.get(key), "headline")
        for key in ("per_run", "per_optimizer"):
            rows += _records(claims.get(key), "run")
    else:
        rows += _records(claims, "headline")
    if summary is not None and not summary.empty and not any(r["scope"] == "run" for r in rows):
        rows += _records(summary.to_dict("records"), "run")
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df
