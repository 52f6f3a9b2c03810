"""What decided each headline claim: the deciding estimate with its interval and margin, the size and power of
the rule that issued it, the seeds it rests on, and one line of why.

claims.json states a claim's verdict and one estimate; when a claim needs several criteria (claim 1: the radius
spread and the centre offset; claim 2: head isotropy, vMF error, reversibility), the one shown is the criterion
that decided it (the failing one when the claim fails), read from the deciding run's record. Claim 4's medians
and ratios are the record's typed values (a bound when a median is not reached), printed with the record's own
text, K-FAC against each baseline, the best first. This module formats, it never decides (nor recomputes).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from brownformer.config import ConfigError, RunSpec
from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, fmt_ci
from brownformer.report.phrases import rate_text, tidy
from brownformer.report.section_claims12 import CRITERION_LABELS, bound_text
from brownformer.results import calibration_fields
from brownformer.stats.claims.comparison_records import STEPS, KMMedian, MedianRatio, RuleErrorSummary
from brownformer.stats.claims.details import Claim4Details, Claim4ModelDetails, criteria_of
from brownformer.verdicts import DID_NOT_TRAIN, INCONCLUSIVE, NOT_SUPPORTED, ClaimDetails, ClaimRecord

__all__ = ["Deciding", "deciding", "claim4_groups", "claim4_estimate", "claim4_baselines", "ratio_cell",
           "km_ratio_cell", "typed_text", "NOT_SIMULATED", "claim4_details", "model_details"]


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


def claim4_details(rec: ClaimRecord | None) -> Claim4Details | None:
    """Claim 4's headline details (None for a record without them, e.g. a claim not measured)."""
    return rec.details if rec is not None and isinstance(rec.details, Claim4Details) else None


def model_details(sub: ClaimRecord | None) -> Claim4ModelDetails | None:
    """One claim-4 model variant's details (None for a record without them)."""
    return sub.details if sub is not None and isinstance(sub.details, Claim4ModelDetails) else None


def _deciding_criterion(rec: ClaimRecord) -> tuple[str, str, ClaimDetails] | None:
    """(run, criterion name, criterion) that decided a claim judged on several criteria, when it was not
    supported: the first criterion, whose verdict is the claim's, of the first run record with the claim's verdict
    (a run record carries criteria when it is decided on its own: a fixed model, unit "inputs")."""
    if rec.verdict not in (NOT_SUPPORTED, INCONCLUSIVE):
        return None
    sub_runs = [(r, s) for r, s in sorted(rec.per_run.items()) if s.verdict == rec.verdict]
    run, sub = sub_runs[0] if sub_runs else (None, None)
    for name, c in (criteria_of(sub.details) if sub else ()):
        if c.verdict == rec.verdict:
            return run, name, c
    return None


def _criterion_text(name: str, c: ClaimDetails) -> str:
    est = _num(c.estimate)
    if not math.isfinite(est):
        return f"{CRITERION_LABELS.get(name, name)} undefined ({getattr(c, 'why_undefined', None) or 'no value'})"
    ci = c.confidence_interval or [None, None]
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
    if not math.isfinite(_num(est.estimate)):
        return f"{name} undefined"
    interval = fmt_ci(*est.confidence_interval)
    return f"{name} {fmt(est.estimate)}" + ("" if interval == "n/a" else f" {interval}{_level(est)}")


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


# claim 4 simulates its rule's error rates only for a decisive verdict (stats/claims/claim4_optimizer.py)
NOT_SIMULATED = "not simulated (no decisive comparison)"


def typed_text(value: KMMedian | MedianRatio | None) -> str:
    """A typed claims.json number (a Kaplan-Meier median or a time ratio) as its record prints it: "175",
    "> 200" for a median not reached, "< 0.537" for a ratio the data bound on one side only, "undefined" (a space
    after the bound sign)."""
    return _spaced(str((value.text if value is not None else None) or "n/a"))


def _spaced(text: str) -> str:
    """A bound's sign followed by one space: "<0.25" -> "< 0.25"."""
    return re.sub(r"^([<>])\s*", r"\1 ", text)


def claim4_groups(details: Claim4ModelDetails | None) -> dict[str, dict]:
    """Per optimizer of one claim-4 model record: n runs, censored (never reached) and the record's KM median
    (comparison_records.KMMedian per optimizer)."""
    return {o: {"n": int(m.n or 0), "censored": int(m.n_censored or 0), "median": typed_text(m), "reached": m.reached}
            for o, m in sorted((details.km_median_steps if details else {}).items())}


def ratio_cell(r: MedianRatio | None) -> str:
    """One typed time ratio (its AFT point estimate) with its interval: "2.05 [1.8, 2.4]"; a bound with the
    interval's end that bounds it ("< 0.537, 95% CI upper bound 0.61"), or no interval where the data cannot bound
    it."""
    if not r:
        return "n/a"
    lo, hi = (_num(c) for c in (r.confidence_interval or [None, None]))
    level = _num(r.confidence_level)
    level = f"{level if math.isfinite(level) else 0.95:.0%} CI"
    bound = r.bound
    if bound == "<":
        return typed_text(r) + (f", {level} upper bound {fmt(hi)}" if math.isfinite(hi) and hi > 0 else "")
    if bound == ">":
        return typed_text(r) + (f", {level} lower bound {fmt(lo)}" if math.isfinite(lo) and lo > 0 else "")
    if not math.isfinite(_num(r.estimate)):
        return "undefined (neither median reached)"
    ends = [fmt(c) if math.isfinite(c) and c > 0 else None for c in (lo, hi)]
    interval = ("" if ends == [None, None] else f" [{ends[0] or '0'}, {ends[1] or 'unbounded'}]")
    return typed_text(r) + interval


def _key(x) -> float:
    """A true ratio as claims.json keys it ("0.5")."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def claim4_baselines(details: Claim4ModelDetails | None) -> list[str]:
    """The baselines of one model record, the best (the comparator, smallest KM median) first."""
    if details is None:
        return []
    names = [b for b in details.baselines or sorted(details.ratios or {})]
    return sorted(names, key=lambda b: b != details.baseline)


def km_ratio_cell(r: MedianRatio | None) -> str:
    """The ratio of Kaplan-Meier medians a time ratio's record keeps beside its AFT estimate, as the record prints
    it ("0.412", "< 0.25", "undefined")."""
    return _spaced(r.km_median_ratio_text) if r else "n/a"


def claim4_estimate(sub: ClaimRecord, model: str) -> str:
    """One claim-4 model record's steps ratios (AFT log-rank point estimates), K-FAC against each baseline (the best
    one first and named), as the record prints them; which medians were not reached."""
    d = model_details(sub)
    prop, best = (d.proposed, d.baseline) if d else (None, None)
    ratios = (d.ratios if d else None) or {}
    if not (prop and ratios):
        return f"{model}: no ratio ({_first_clause(sub.reason) or 'no comparison'})"
    parts = [f"{prop} / {b}" + (" (best baseline)" if b == best else "") + " "
             + ratio_cell(ratios[b].get(STEPS)) for b in claim4_baselines(d) if b in ratios]
    censored = [f"{o}'s median not reached: {g['censored']} of {g['n']} censored, {g['median']} steps"
                for o, g in claim4_groups(d).items() if not g["reached"]]
    return (f"{model}: steps ratio (AFT estimate) " + "; ".join(parts)
            + (f" ({'; '.join(censored)})" if censored else ""))


def _rates_text(rates: RuleErrorSummary | None, best: str | None, margin: float) -> str:
    """The size gate's simulated rates of the rule (rule_error_rates of a model record), and its power against
    the best baseline."""
    if rates is None or rates.size is None:
        return NOT_SIMULATED
    per = rates.per_baseline.get(best)
    n = _num(per.replicates if per else None)
    size, size_not = (rate_text(_num(x), n=n) for x in (rates.size, rates.size_not_supported))
    text = (f"size: P(supported) {size}, P(not supported) {size_not} at a true ratio of {fmt(margin)} "
            f"(gate ≤ {fmt(_num(rates.max_size))})")
    power = {_key(r): v for r, v in (per.rates if per else {}).items() if isinstance(v, dict)}
    lo = [r for r in power if math.isfinite(r) and r < margin]
    hi = [r for r in power if math.isfinite(r) and r > margin]
    said = ([f"P(supported) {fmt(power[min(lo)].get('supported'))} at {fmt(min(lo))}"] if lo else []) + (
        [f"P(not supported) {fmt(power[max(hi)].get('not supported'))} at {fmt(max(hi))}"] if hi else [])
    return text + (f"; power vs {best}: " + ", ".join(said) if said else "")


def _claim4(rec: ClaimRecord) -> Deciding:
    head = claim4_details(rec)
    scope = (head.scope if head else None) or []
    in_scope = [m for m in scope if m in rec.per_model]
    pick = next((m for m in in_scope if rec.per_model[m].estimate == rec.estimate), in_scope[0] if in_scope else None)
    sub = rec.per_model.get(pick) if pick else None
    if sub is None:
        estimate = _estimate_text(rec) if rec.estimate is not None else "none (no model variant in scope)"
        return Deciding(rec.claim, rec.title, rec.verdict, estimate, _margin_text(rec), NOT_SIMULATED, "0",
                        _first_clause(rec.reason))
    # every model in scope, the deciding one first: the claim needs K-FAC ahead of the best baseline on each
    models = [pick] + [m for m in in_scope if m != pick]
    estimate = " | ".join(claim4_estimate(rec.per_model[m], m) for m in models)
    d = model_details(sub)
    margin = _num(sub.margin[1]) if sub.margin else math.nan
    best = d.baseline if d else None
    size_power = f"{pick}: " + _rates_text(d.rule_error_rates if d else None, best, margin)
    seeds = ", ".join(f"{o} {g['n']}" for o, g in claim4_groups(d).items()) or "n/a"
    why = (f"deciding model {pick}, best first-order baseline {best or 'none'}: "
           + _first_clause(sub.reason or rec.reason))
    return Deciding(rec.claim, rec.title, rec.verdict, estimate, _margin_text(sub), size_power, seeds, why)


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
        return Deciding(rec.claim, rec.title, rec.verdict, _criterion_text(name, c), bound_text(name, c.margin),
                        _calibration_text(rec.per_run.get(run, rec)), _seeds(rec),
                        f"{CRITERION_LABELS.get(name, name)} {outside} on {run}; {why}")
    return Deciding(rec.claim, rec.title, rec.verdict, _estimate_text(rec), _margin_text(rec), _calibration_text(rec),
                    _seeds(rec), why)
