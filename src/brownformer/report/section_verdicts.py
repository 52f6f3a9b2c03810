"""Results first: right after the abstract, one table of every headline claim and how far to trust its verdict,
then the key figure (the verdict of every claim on every run)."""
from __future__ import annotations

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.deciding import deciding
from brownformer.report.markdown import md_table
from brownformer.stats.claims.scaling import SCALING_CLAIMS

__all__ = ["HEADLINE_CLAIMS", "KEY_FIGURE", "verdict_table", "results_first"]

#: the claims every report states, in order (claims.json may add others; a missing one is shown as missing)
HEADLINE_CLAIMS = (*SCALING_CLAIMS, "4")
#: the figure shown right under the verdict table (and not again in its own section)
KEY_FIGURE = "claims_overview"

COLUMNS = ("claim", "verdict", "deciding estimate [95% CI]", "margin", "size / power of the rule", "seeds", "why")


def _nowrap(text: str) -> str:
    """Short cells kept on one line (non-breaking spaces), so the table stays one screen high."""
    return text.replace(" ", "\u00a0")


def verdict_table(ctx: ReportContext) -> pd.DataFrame:
    """One row per headline claim: verdict, deciding estimate with CI, margin, size and power, seeds, why."""
    claims = ctx.results.claims
    ids = list(HEADLINE_CLAIMS) + [c for c in (claims.claims if claims else {}) if c not in HEADLINE_CLAIMS]
    rows = []
    for cid in ids:
        d = deciding(ctx, cid)
        if d is None:
            rows.append((cid, "not available", "", "", "", "", "no entry in claims.json"))
            continue
        rows.append((cid, _nowrap(d.verdict.upper()), d.estimate, _nowrap(d.margin), d.size_power, d.seeds, d.why))
    return pd.DataFrame(rows, columns=COLUMNS)


def results_first(ctx: ReportContext) -> str:
    """The verdict table under its heading, with one line on how to read it."""
    why = "; ".join(n for n in ctx.results.notes if "claims.json" in n)
    if ctx.results.claims is None:
        return f"## Results at a glance\n\nVerdicts: not available ({why or 'claims.json missing or unreadable'})."
    return "\n".join([
        "## Results at a glance", "",
        "A claim is supported when every deciding interval lies inside its equivalence margin, not supported when "
        "one lies outside (for claims 1 and 2 also at the Bonferroni level over the claim's components, since one "
        "is enough to refute it), inconclusive otherwise. The estimate shown is the one that decided the verdict (for a "
        "claim judged on several criteria, the one that failed). Size: how often the rule wrongly issues its "
        "verdict on simulated data of the claim's shape; power: how often it gets a true effect right. Details per "
        "claim in Section 3, claim 4 in Section 4.", "",
        md_table(verdict_table(ctx))])
