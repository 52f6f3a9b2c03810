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
            "p_value": _num(rec.get("p_value", rec.get("pvalue", rec.get("p_adjusted")))),
            "tests": _tests_text(rec.get("tests", rec.get("test", ""))), "reason": str(rec.get("reason", "") or "")}


def _records(obj: Any, scope: str) -> list[dict]:
    out = []
    if isinstance(obj, list):
        for rec in obj:
            if isinstance(rec, dict):
                r = _record(rec, "run" if rec.get("run") else scope)
                if r:
                    out.append(r)
    elif isinstance(obj, dict):
        for key, rec in obj.items():
            if isinstance(rec, dict):
                r = _record(rec, "run" if rec.get("run") else scope, key)
                if r:
                    out.append(r)
                    # nested per-run/per-optimizer verdicts under a headline claim
                    for sub in ("per_run", "runs", "per_optimizer", "by_optimizer"):
                        for child in _records(rec.get(sub), "run"):
                            child["claim"] = child["claim"] if child["claim"] != "None" else r["claim"]
                            out.append(child)
    return out


def claims_table(claims: Any, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Flatten claims.json (and, if it holds no per-run verdicts, summary.parquet) into COLUMNS.

    scope is "headline" for a claim's overall verdict and "run" for a verdict on one run.
    """
    rows: list[dict] = []
    if isinstance(claims, dict) and not any(isinstance(v, dict) and "verdict" in v for v in claims.values()):
        for key in ("claims", "headline", "headlines"):
            rows += _records(claims.get(key), "headline")
        for key in ("per_run", "runs", "per_optimizer"):
            rows += _records(claims.get(key), "run")
    else:
        rows += _records(claims, "headline")
    if summary is not None and not summary.empty and not any(r["scope"] == "run" for r in rows):
        rows += _records(summary.to_dict("records"), "run")
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df
