"""Abstract and results sections of the report.

SECTIONS is the one list of results subsections, in order. Each Section has a key (the `group`
that figure catalog entries name to be shown after it), a heading, the claims.json ids whose
verdicts it states, and optionally a function ctx -> markdown for its own text. To add a
section (e.g. a scaling study), write its text function in a module of this package and add
one Section here; figures join it by naming its key as their catalog group.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from brownformer.report.context import ReportContext
from brownformer.report.counts import run_counts, trained_optimizers
from brownformer.report.markdown import fmt, md_table
from brownformer.report.phrases import count_noun
from brownformer.report.section_claims import claim_lines, claim_table, counts_by_optimizer, did_not_train_text, headline_table
from brownformer.report.section_claims12 import markov_text, sphere_text
from brownformer.report.section_local_slopes import claim3_reading_text
from brownformer.report.section_optimizers import kfac_sentences
from brownformer.report.section_pretrained import pretrained_text
from brownformer.report.section_scaling import scaling_text
from brownformer.report.section_verdicts import KEY_FIGURE
from brownformer.results import calibration_matrix
from brownformer.results.tables import goal_text

__all__ = ["Section", "SECTIONS", "abstract", "results_sections"]


@dataclass(frozen=True)
class Section:
    """One results subsection: key (figure group), heading, claims it states, optional extra text."""
    key: str
    heading: str
    claims: tuple[str, ...] = ()
    text: Callable[[ReportContext], str] | None = None


def _training_text(ctx: ReportContext) -> str:
    figs = " and ".join(ctx.ref(s) for s in ctx.figures_of("training"))
    return (f"Loss and validation metric of every run against steps and wall-clock, and the steps and seconds "
            f"each optimizer needs to reach the target ({figs}); Section 4 compares the optimizers.\n\n"
            + did_not_train_text(ctx))


def _calibration_text(ctx: ReportContext) -> str:
    mat = calibration_matrix(ctx.results)
    intro = ("Rejection rates of each test and of the whole decision rule (row “verdict”) on Brownian motion "
             f"(size) and on each alternative (power), at the shapes of the real trajectories; goals: {goal_text()}.")
    if mat.empty:
        return intro + " Calibration table: not available."
    null_col = next((c for c in mat.columns if str(c) in ("brownian", "null")), None)
    parts = [intro]
    if null_col is not None and "verdict" in mat.index:
        parts.append(f"The rule's size, averaged over shapes: {fmt(mat.loc['verdict', null_col])}.")
    alt = mat.drop(columns=[null_col]) if null_col is not None else mat
    if "verdict" in alt.index and not alt.empty:
        weakest = alt.loc["verdict"].astype(float)
        parts.append(f"Its smallest power: {fmt(weakest.min())} ({weakest.idxmin()}).")
    parts.append("Each verdict in Section 3.1 quotes its rule's size and power at its own shape.")
    return " ".join(parts)


def _overview_text(ctx: ReportContext) -> str:
    return f"The verdict of every claim on every run: {ctx.ref(KEY_FIGURE)}, under the verdict table at the top."


SECTIONS: tuple[Section, ...] = (
    Section("training", "Training runs", text=_training_text),
    Section("1", "Claim 1: tokens on a hypersphere after LayerNorm", claims=("1",), text=sphere_text),
    Section("2", "Claim 2: attention as a Markov transition matrix", claims=("2",), text=markov_text),
    Section("3a", "Claim 3 (depth): token updates across layers", claims=("3a",),
            text=lambda ctx: claim3_reading_text(ctx, ("3a",))),
    Section("3b", "Claim 3 (training): token states and weights over training", claims=("3b", "3c"),
            text=lambda ctx: claim3_reading_text(ctx, ("3b", "3c"))),
    Section("calibration", "Calibration of the test battery", text=_calibration_text),
    Section("overview", "Overview", text=_overview_text),
    Section("scaling", "Scaling: the claims against depth and width", text=scaling_text),
    Section("pretrained", "Pretrained models (descriptive)", text=pretrained_text),
)


def _verdicts_part(ctx: ReportContext) -> str:
    vt = headline_table(ctx)
    counts = counts_by_optimizer(ctx)
    why = "; ".join(n for n in ctx.results.notes if "claims.json" in n) or "claims.json missing or empty"
    return "\n".join([
        "## 3. Results", "", "### 3.1 Verdicts",
        "One row per claim: the verdict (supported, not supported, inconclusive, or did not train), the key "
        "estimate with its confidence interval, the equivalence margin the verdict used, and the size and power "
        "of the exact decision rule, calibrated on simulated data of the claim's shape.", "",
        md_table(vt) if not vt.empty else f"Verdicts: not available ({why}).", "",
        "Per-run verdicts by optimizer (number of runs):", "",
        md_table(counts) if not counts.empty else "Per-run verdicts: not available."])


def results_sections(ctx: ReportContext) -> list[tuple[str, list[str]]]:
    """(markdown, figure stems to show after it) for each results subsection, in order."""
    out = [(_verdicts_part(ctx), [])]
    for number, sec in enumerate(SECTIONS, start=2):
        parts = [f"### 3.{number} {sec.heading}"]
        parts += claim_lines(ctx, sec.claims)
        if sec.text is not None:
            parts.append(sec.text(ctx))
        figs = [f for f in ctx.figures_of(sec.key) if f != KEY_FIGURE]  # the key figure sits under the verdict table
        if figs and sec.text is None:
            parts.append("\nSee " + " and ".join(ctx.ref(f) for f in figs) + ".")
        out.append(("\n".join(parts), figs))
    stated = {c for sec in SECTIONS for c in sec.claims} | {"4"}  # claim 4: Section 4
    table = claim_table(ctx)
    others = [c for c in table.loc[table["scope"] == "headline", "claim"] if c not in stated]
    if others:  # a claim no section names is still shown, never dropped
        out.append(("\n".join([f"### 3.{len(SECTIONS) + 2} Other claims", *claim_lines(ctx, tuple(others))]), []))
    return out


def _runs_sentence(ctx: ReportContext) -> str:
    c = run_counts(ctx)
    text = (f"{c['grid_trained']} of the grid's {count_noun(c['grid'], 'run')} finished"
            + (f" ({c['stopped']} of them metrics-only runs stopped at claim 4's target)" if c["stopped"] else ""))
    if c["replicas"]:
        text += (f", and {c['replicas_trained']} of {count_noun(c['replicas'], 'replica run')} of the training noise "
                 f"(claims 3b and 3c): {c['jobs']} training jobs in all")
    return text


def abstract(ctx: ReportContext) -> str:
    """Title and abstract: what trained (from the run records), every headline verdict, claim 4 in a sentence."""
    cfg = ctx.cfg
    runs = cfg.runs()
    models = list(dict.fromkeys(r.model for r in runs))
    trained = trained_optimizers(ctx)
    t = claim_table(ctx)
    head = t[t["scope"] == "headline"]
    if head.empty:
        verdict_text = "No verdicts were available when this report was built (claims.json missing or unreadable)."
    else:
        counts = head["verdict"].value_counts()
        verdict_text = (f"Of {len(head)} headline claims, supported: {counts.get('supported', 0)}, not supported: "
                        f"{counts.get('not supported', 0)}, inconclusive: {counts.get('inconclusive', 0)}, "
                        f"did not train: {counts.get('did not train', 0)} (the table below).")
    kfac = " ".join(kfac_sentences(ctx)) or "Claim 4 has no record in claims.json."
    optimizers = (f"trained with {count_noun(len(trained), 'optimizer')} ({', '.join(trained)})" if trained
                  else "with no optimizer's run trained yet")
    return "\n".join([
        f"# {cfg.report.title}", "",
        "**Abstract.** We test the claims of “The Brownian motion in the transformer model” (arXiv 2107.05264) "
        f"on {count_noun(len(models), 'model variant')} ({', '.join(models)}) {optimizers} over "
        f"{count_noun(len({r.seed for r in runs}), 'seed')}: {_runs_sentence(ctx)}. {verdict_text} {kfac}"])
