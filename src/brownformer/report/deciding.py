"""What decided each headline claim: the deciding estimate with its interval and margin, the size and power of
the rule that issued it, the seeds it rests on, and one line of why.

claims.json states a claim's verdict and one estimate; when a claim needs several criteria (claim 1: the radius
spread and the centre offset; claim 2: head isotropy, vMF error, reversibility), the one shown is the criterion
that decided it (the failing one when the claim fails), read from the deciding run's record. Claim 4's ratio of
medians is a bound when a median is not reached within the budget. This module formats, it never decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from brownformer.config import ConfigError, RunSpec
from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, fmt_ci
from brownformer.report.phrases import rate_text, ratio_text, tidy
from brownformer.report.section_claims12 import CRITERION_LABELS, bound_text
from brownformer.results import calibration_fields
from brownformer.verdicts import DID_NOT_TRAIN, INCONCLUSIVE, NOT_SUPPORTED, ClaimRecord

__all__ = ["Deciding", "deciding", "claim4_groups", "claim4_estimate"]


@dataclass(frozen=True)
class Deciding:
    """One headline claim as the reader first sees it (every cell already text)."""
    claim: str
    title: str
    verdict: str
    estimate: str  # the deciding estimate with its CI
    margin: str
    size_power: str
    seeds: str
    why: str


def _num(x) -> float:
    """A claims.json number; "inf" (a median not reached) as inf, anything undefined as NaN."""
    if x == "inf":
        return math.inf
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def _deciding_criterion(rec: ClaimRecord) -> tuple[str, str, dict] | None:
    """(run, criterion name, criterion) that decided a claim judged on several criteria, when it was not
    supported: the first criterion of the deciding run whose verdict is the claim's."""
    if rec.verdict not in (NOT_SUPPORTED, INCONCLUSIVE):
        return None
    run = rec.details.get("deciding_run")
    sub = rec.per_run.get(run) if run else None
    if sub is None:  # inconclusive pools name no deciding run: the first run with that verdict
        sub_runs = [(r, s) for r, s in sorted(rec.per_run.items()) if s.verdict == rec.verdict]
        run, sub = sub_runs[0] if sub_runs else (None, None)
    for name, c in ((sub.details.get("criteria") or {}) if sub else {}).items():
        if isinstance(c, dict) and c.get("verdict") == rec.verdict:
            return run, name, c
    return None


def _criterion_text(name: str, c: dict) -> str:
    est = _num(c.get("estimate"))
    if not math.isfinite(est):
        return f"{CRITERION_LABELS.get(name, name)} undefined ({c.get('why_undefined', 'no value')})"
    ci = c.get("confidence_interval") or [None, None]
    interval = fmt_ci(_num(ci[0]), _num(ci[1]))
    return f"{CRITERION_LABELS.get(name, name)} {fmt(est)}" + ("" if interval == "n/a" else f" {interval}")


def _level(est) -> str:
    """' (90% CI)' for an interval at another level than the table's 95% (claim 3 reads (1 - 2 alpha) intervals)."""
    level = _num(est.confidence_level) if est is not None else math.nan
    return f" ({level:.0%} CI)" if math.isfinite(level) and abs(level - 0.95) > 1e-9 else ""


def _estimate_text(rec: ClaimRecord) -> str:
    est = rec.estimate
    if est is None:
        return "n/a"
    name = est.name.split(" (")[0]  # the quantity; how it was pooled is in Section 3
    if not math.isfinite(_num(est.value)):
        return f"{name} undefined"
    interval = fmt_ci(*est.confidence_interval)
    return f"{name} {fmt(est.value)}" + ("" if interval == "n/a" else f" {interval}{_level(est)}")


def _margin_text(rec: ClaimRecord) -> str:
    """The equivalence margin: '[0.9, 1.1]', or '≤ 0.75' for a margin that only bounds from above."""
    if not rec.margin:
        return "n/a"
    lo, hi = rec.margin
    return f"≤ {fmt(hi)}" if lo <= 0 < hi else fmt_ci(lo, hi)


def _calibration_text(rec: ClaimRecord) -> str:
    cal = calibration_fields(rec.calibration)
    if not cal["calibrated"] or not math.isfinite(cal["size"]):
        return "not calibrated"
    size = rate_text(cal["size"], cal["size_se"], cal["n_replicates"])
    power = f"power ≥ {fmt(cal['power'])}" if math.isfinite(cal["power"]) else "power not simulated"
    return f"size {size}; {power}"


def _seeds(rec: ClaimRecord) -> str:
    seeds = set()
    for run, sub in rec.per_run.items():
        if sub.verdict == DID_NOT_TRAIN:
            continue
        try:
            seeds.add(RunSpec.parse(run).seed)
        except ConfigError:
            continue
    return str(len(seeds))


def _first_clause(reason: str) -> str:
    return tidy(reason.split("; ")[0]) if reason else ""


def claim4_groups(details: dict) -> dict[str, dict]:
    """Per optimizer of one claim-4 model record: n runs, censored (never reached), budget, KM median steps."""
    runs = [r for r in details.get("runs") or [] if isinstance(r, dict)]
    medians = details.get("km_median_steps") or {}
    out = {}
    for opt in sorted({str(r.get("optimizer")) for r in runs}):
        rs = [r for r in runs if str(r.get("optimizer")) == opt]
        budgets = [_num(r.get("censored_at")) for r in rs]
        budgets = [b for b in budgets if math.isfinite(b)]
        median = _num(medians.get(opt))
        n_censored = sum(not r.get("reached") for r in rs)
        if math.isnan(median) and 2 * n_censored >= len(rs):  # the writer stores "not reached" as inf or null
            median = math.inf
        out[opt] = {"n": len(rs), "censored": n_censored, "budget": max(budgets) if budgets else math.nan,
                    "median": median}
    return out


def _key(x) -> float:
    """A true ratio as claims.json keys it ("0.5")."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def claim4_estimate(sub: ClaimRecord, model: str) -> str:
    """A claim-4 model record's ratio of median steps with its interval; a bound where a median is not reached."""
    d = sub.details
    prop, base = d.get("proposed"), d.get("baseline")
    groups = claim4_groups(d)
    gp, gb = groups.get(prop), groups.get(base)
    if not (gp and gb and sub.estimate):
        return _estimate_text(sub)
    ratio = ratio_text(gp["median"], gb["median"], num_budget=gp["budget"], den_budget=gb["budget"])
    lo, hi = sub.estimate.confidence_interval
    bound = ratio.startswith(("<", ">", "undefined"))
    level = _num(sub.estimate.confidence_level)
    ci = (f"{level if math.isfinite(level) else 0.95:.0%} CI upper bound {fmt(hi)}" if bound and math.isfinite(hi)
          else fmt_ci(lo, hi) + _level(sub.estimate))
    censored = "; ".join(f"{o}'s median not reached: {g['censored']} of {g['n']} censored at {fmt(g['budget'])} "
                         "steps" for o, g in ((prop, gp), (base, gb)) if math.isinf(g["median"]))
    return f"steps {prop} / {base} {ratio}, {ci}" + (f" ({censored})" if censored else "") + f" on {model}"


def _claim4(rec: ClaimRecord) -> Deciding:
    scope = rec.details.get("scope") or []
    in_scope = [m for m in scope if m in rec.per_model]
    pick = next((m for m in in_scope if rec.per_model[m].estimate == rec.estimate), in_scope[0] if in_scope else None)
    sub = rec.per_model.get(pick) if pick else None
    if sub is None:
        estimate = _estimate_text(rec) if rec.estimate is not None else "none (no model variant in scope)"
        return Deciding(rec.claim, rec.title, rec.verdict, estimate, _margin_text(rec), "not calibrated", "0",
                        _first_clause(rec.reason))
    d = sub.details
    groups = claim4_groups(d)
    gp, gb = groups.get(d.get("proposed")), groups.get(d.get("baseline"))
    estimate = claim4_estimate(sub, pick)
    rates = d.get("rule_error_rates") or {}
    size_power = "not calibrated"
    if rates.get("size") is not None:
        size_power = f"size {rate_text(float(rates['size']), n=_num(rates.get('replicates')))}"
        margin = _num(rates.get("margin"))
        power = {_key(r): v.get("supported") for r, v in (rates.get("rates") or {}).items() if isinstance(v, dict)}
        power = {r: p for r, p in power.items() if math.isfinite(r) and r < margin and p is not None}
        if power:
            r = min(power)
            size_power += f"; power {fmt(power[r])} at a true ratio of {fmt(r)}"
    seeds = " + ".join(str(g["n"]) for g in (gp, gb) if g) or "n/a"
    return Deciding(rec.claim, rec.title, rec.verdict, estimate, _margin_text(sub), size_power, seeds,
                    _first_clause(sub.reason or rec.reason))


def deciding(ctx: ReportContext, claim_id: str) -> Deciding | None:
    """The deciding numbers of one headline claim of claims.json (None when the file has no such claim)."""
    claims = ctx.results.claims
    rec = claims.claims.get(claim_id) if claims else None
    if rec is None:
        return None
    if claim_id == "4":
        return _claim4(rec)
    crit = _deciding_criterion(rec)
    why = _first_clause(rec.reason)
    if crit is not None:
        run, name, c = crit
        outside = "outside its margin" if rec.verdict == NOT_SUPPORTED else "not decided"
        return Deciding(rec.claim, rec.title, rec.verdict, _criterion_text(name, c), bound_text(name, c.get("margin")),
                        _calibration_text(rec.per_run.get(run, rec)), _seeds(rec),
                        f"{CRITERION_LABELS.get(name, name)} {outside} on {run}; {why}")
    return Deciding(rec.claim, rec.title, rec.verdict, _estimate_text(rec), _margin_text(rec), _calibration_text(rec),
                    _seeds(rec), why)
