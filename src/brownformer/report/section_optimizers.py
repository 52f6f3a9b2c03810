"""Section 4 of the report: the optimizer comparison behind claim 4 (steps and seconds to a target).

Times to the target are censored at the budget (a run that never gets there). Every median, ratio,
interval, p-value, verdict and simulated error rate is claim 4's record in claims.json, printed with the
record's own text (a median not reached is the bound "> budget"): this module formats, it never decides
and never recomputes a median.
"""
from __future__ import annotations

import math

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.deciding import (NOT_SIMULATED, claim4_baselines, claim4_details, claim4_groups, model_details,
                                        km_ratio_cell, ratio_cell, typed_text)
from brownformer.stats.claims.comparison_records import SECONDS, STEPS, KMMedian, RuleErrorSummary
from brownformer.stats.claims.details import Claim4ModelDetails
from brownformer.report.markdown import fmt, md_table
from brownformer.report.phrases import count_noun, rate_text
from brownformer.report.section_claims import claim_lines, scope_table
from brownformer.verdicts import ClaimRecord

__all__ = ["comparison_table", "kfac_sentences", "optimizer_comparison", "proposed_optimizers", "claim4_inference"]


def proposed_optimizers(ctx: ReportContext) -> list[str]:
    """The optimizer claim 4 is about: its role in the config, `report.proposed`."""
    return [ctx.cfg.report.proposed]


def _claim4(ctx: ReportContext) -> ClaimRecord | None:
    claims = ctx.results.claims
    rec = claims.claims.get("4") if claims else None
    return rec if rec is not None and rec.per_model else None


def _median_cell(g: dict) -> str:
    """A group's KM median as the record prints it, with its censoring: "not reached: > 200 (6 of 8 censored)"."""
    censored = f" ({g['censored']} of {g['n']} censored)" if g["censored"] else ""
    return (g["median"] if g["reached"] else f"not reached: {g['median']}") + censored


def _seconds_cell(m: KMMedian) -> str:
    """A KM median of training seconds as the record prints it, with its unit: "8.6 s", "> 10 s"; "n/a (no wall
    clock)" where the runs carry none."""
    if not m.bound and not (isinstance(m.estimate, (int, float)) and math.isfinite(m.estimate)):
        return "n/a (no wall clock)"
    return f"{typed_text(m)} s"


def _seconds_medians(d: Claim4ModelDetails) -> dict[str, str]:
    """optimizer -> its KM median training seconds to the target with the unit (each seconds ratio carries the
    medians of its two optimizers, in seconds: KM median steps x that optimizer's measured seconds per step)."""
    out = {}
    for b, clocks in (d.ratios or {}).items():
        seconds = clocks.get(SECONDS)
        medians = seconds.medians if seconds else []
        if len(medians) == 2:
            out.setdefault(d.proposed, _seconds_cell(medians[0]))
            out[b] = _seconds_cell(medians[1])
    return out


def _role(d: Claim4ModelDetails, opt: str) -> str:
    if opt == d.proposed:
        return "proposed"
    if opt == d.baseline:
        return "best baseline"
    return "baseline" if opt in (d.baselines or []) else "reported"


def comparison_table(ctx: ReportContext) -> pd.DataFrame:
    """Per model and optimizer, claim 4's record as text: seeds, Kaplan-Meier median steps and training seconds to
    the target (the record's typed values: a bound with its censoring where a median is not reached; seconds with
    their unit, as the seconds ratio's record holds them: KM median steps x measured seconds per step), K-FAC's steps
    and seconds ratios to it, the final metric at the budget (median over the runs that trained in full) and the
    runs stopped at the target. Empty without a claim-4 record."""
    rec = _claim4(ctx)
    if rec is None:
        return pd.DataFrame()
    rows = []
    for model, sub in sorted(rec.per_model.items()):
        d = model_details(sub)
        if d is None:  # a record without a comparison has no group to show
            continue
        prop = d.proposed
        seconds = _seconds_medians(d)
        runs = [r for r in d.runs or [] if isinstance(r, dict)]
        for opt, g in claim4_groups(d).items():
            ratio = (d.ratios or {}).get(opt) or {}  # clock -> MedianRatio
            final = (d.final_at_budget or {}).get(opt) or {}
            rows.append({
                "model": model, "optimizer": opt, "role": _role(d, opt), "target": fmt(d.target),
                "seeds": g["n"], "steps to target": _median_cell(g), "seconds to target": seconds.get(opt, "n/a"),
                f"steps ratio {prop} / this": "—" if opt == prop else ratio_cell(ratio.get(STEPS)),
                f"seconds ratio {prop} / this": "—" if opt == prop else ratio_cell(ratio.get(SECONDS)),
                "final at budget (median)": (f"{fmt(final.get('median'))} ({count_noun(int(final['n']), 'run')})"
                                             if final.get("n") else "none trained the whole budget"),
                "stopped at target": sum(bool(r.get("stopped")) for r in runs if r.get("optimizer") == opt)})
    return pd.DataFrame(rows)


def _rule_rates_text(rates: RuleErrorSummary | None) -> str:
    if rates is None or rates.size is None:
        return NOT_SIMULATED
    nan = math.nan if rates.size_not_supported is None else rates.size_not_supported
    return f"{rate_text(float(rates.size))} / {rate_text(float(nan))} (gate ≤ {fmt(rates.max_size)})"


def claim4_inference(ctx: ReportContext) -> list[str]:
    """Claim 4's scope and, per model variant, K-FAC's steps ratio against each baseline with its interval, the
    one-sided p and verdict, and the rule's simulated error rates (from claims.json)."""
    rec = _claim4(ctx)
    if rec is None:
        return []
    head = claim4_details(rec)
    proposed = head.proposed if head else "the proposed optimizer"
    scope = (head.scope if head else None) or []
    baselines = (head.baselines if head else None) or []
    rows = []
    for model, m in sorted(rec.per_model.items()):
        d = model_details(m)
        row = {"model": model, "in scope": "yes" if model in scope else "no (reported, not deciding)",
               "protocol met": "yes" if d and d.protocol_met else "no", "verdict": m.verdict,
               "best baseline": (d.baseline if d else None) or "none"}
        for b in claim4_baselines(d):
            steps = ((d.ratios or {}).get(b) or {}).get(STEPS)
            verdict = (d.verdicts or {}).get(b)
            row[f"vs {b}: steps ratio [CI]"] = ratio_cell(steps)
            row[f"vs {b}: ratio of KM medians"] = km_ratio_cell(steps)
            row[f"vs {b}: p, verdict"] = (f"{fmt(steps.pvalue if steps else None)}, "
                                           f"{verdict.verdict if verdict else 'n/a'}")
        row["P(supported) / P(not supported) on the margin"] = _rule_rates_text(d.rule_error_rates if d else None)
        rows.append(row)
    runs = [r for m in rec.per_model.values() if (d := model_details(m)) for r in d.runs or []]
    steps = sorted({int(r["censored_at"]) for r in runs
                    if isinstance(r.get("censored_at"), (int, float)) and math.isfinite(r["censored_at"])})
    return ["**Claim 4's scope and inference.** Decided on " + (", ".join(f"`{m}`" for m in scope) or "no model")
            + f" (`report.scope`), `{proposed}` against every baseline (" + (", ".join(f"`{b}`" for b in baselines)
            or "none") + "), so against the best of them; budget " + (", ".join(map(str, steps)) or "n/a")
            + " steps. A ratio is the time ratio of the accelerated-failure-time model, K-FAC's steps to the target "
            "over the baseline's (a run that never reaches it is censored at its budget): its estimate is the point "
            "estimate of the AFT log-rank test (the ratio at which the test's statistic crosses 0, a bound where the "
            "data cannot bound it), so it lies inside that test's interval, inverted over the ratio; the one-sided "
            "test at the margin decides. The ratio of Kaplan-Meier medians is shown beside it as a description only "
            "(a second estimator: on the 5-step evaluation grid it can fall outside the interval). The error rates "
            "are the rule's, "
            "simulated at each comparison's seeds, censoring and evaluation grid with the true ratio on the margin "
            "(docs/methods/claim4.md). The tuning that set every optimizer's settings is in the config's `tuned:` "
            "block (written by `brownformer tune`).", "", md_table(pd.DataFrame(rows)), ""]


def kfac_sentences(ctx: ReportContext) -> list[str]:
    """One sentence per model variant of claim 4's record: K-FAC's median steps to the target, then its steps and
    seconds ratios against each baseline, the best (the comparator) first, as the record prints them."""
    rec = _claim4(ctx)
    out = []
    for model, sub in sorted(rec.per_model.items()) if rec else []:
        d = model_details(sub)
        if d is None:
            continue
        prop, groups = d.proposed, claim4_groups(d)
        g = groups.get(prop)
        if g is None:
            continue
        if g["censored"] == g["n"]:
            head = (f"On `{model}`, `{prop}` never reached the target {d.metric} ({fmt(d.target)}) in "
                    f"{count_noun(g['n'], 'seed')}")
        else:
            head = (f"On `{model}`, `{prop}` reached the target {d.metric} ({fmt(d.target)}) in "
                    f"{g['n'] - g['censored']} of {count_noun(g['n'], 'seed')}, median {_median_cell(g)} steps")
        against = []
        for b in claim4_baselines(d):
            r = (d.ratios or {}).get(b) or {}
            gb = groups.get(b)
            median = f", median {_median_cell(gb)} steps" if gb else ""
            role = (f" (the best first-order baseline{median})" if b == d.baseline
                    else (f" ({median[2:]})" if median else ""))
            against.append(f"against `{b}`{role}"
                           + f" steps ratio {ratio_cell(r.get(STEPS))}, seconds ratio {ratio_cell(r.get(SECONDS))}")
        out.append(head + ("; " + "; ".join(against) if against else "") + f" ({sub.verdict} on this model).")
    return out


def optimizer_comparison(ctx: ReportContext) -> str:
    """Section 4: the table, claim 4's verdict with its evidence, and a conclusion per model."""
    comp = comparison_table(ctx)
    target_opt = ctx.cfg.report.target_optimizer
    figs = " and ".join(ctx.ref(s) for s in ctx.figures_of("training"))
    parts = ["## 4. Optimizer comparison (claim 4)", "",
             "Target: claim 4's fixed target of each model variant's validation metric (accuracy for images, "
             "bits per character for text): the config's `report.targets`, else a fixed share of the improvement "
             f"of {target_opt}'s mean curve (brownformer.stats.comparison.time_to_target.reference_target). {figs} show the "
             "curves, the steps and seconds to the target and K-FAC's time per step.", ""]
    parts += claim_lines(ctx, ("4",)) + [""]
    parts += claim4_inference(ctx)
    per_model = scope_table(ctx, "4", "model")
    if not per_model.empty:
        parts += ["Claim 4 per model variant:", "", md_table(per_model), ""]
    if comp.empty:
        parts.append("Optimizer comparison: not available (no claim-4 record in claims.json).")
        return "\n".join(parts)
    parts += ["Seconds to the target are training seconds (wall-clock less evaluation and probe time), steps x "
              "measured step cost: the optimizer's KM median steps, read at the middle of their evaluation interval "
              "as the ratios read them, times its median training seconds per step over its runs "
              "(docs/methods/claim4.md, sec. 3).", "", md_table(comp), ""]
    if comp["stopped at target"].any():
        n_stopped = count_noun(int(comp["stopped at target"].sum()), "metrics-only run")
        parts += [f"{n_stopped} stopped at their first evaluation on the "
                  "target (grid blocks with `stop_at_target`): they count in the steps and seconds to the target; the "
                  "final metric is the median over the runs that trained their whole budget.", ""]
    sentences = kfac_sentences(ctx)
    if sentences:
        parts += ["**Conclusion.** " + " ".join(sentences)]
    else:
        in_grid = sorted({r.optimizer for r in ctx.cfg.runs()} & set(proposed_optimizers(ctx)))
        parts.append(f"No run of {', '.join(f'`{o}`' for o in in_grid)} enters claim 4's comparison (it did not "
                     "train or has no metrics; Section 3.2 lists the runs left out), so claim 4 has no evidence here."
                     if in_grid else
                     f"The proposed optimizer `{ctx.cfg.report.proposed}` is not in the grid, so claim 4 is not "
                     "tested here.")
    return "\n".join(parts)
