"""The report's appendix "Can the rules say yes?": every positive and negative control through its claim's own rule.

A rule that can never return "supported" makes every "not supported" meaningless, so each claim's rule is run on
data where the claim holds by construction (positive controls: must be "supported") and where it fails (negative
controls: must not be). Claims 1 and 2 come from stats/controls/positive_controls_claims12.py; claims 3a-3c from
`brownformer.stats.controls.positive_controls.claim3_controls` where that module exists in this build (else the appendix
says they are not available).

Cost: the claim-1/2 controls take ~20 s on one core (benchmarks/results/controls_cost.md), so they are computed once
and cached in the report's results folder (CACHE_FILE), keyed by the configured StatsConfig and a hash of the
statistics code: a change to either recomputes them, anything else reads the cache.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
from pathlib import Path

import pandas as pd

from brownformer.io import write_json
from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, md_table
from brownformer.stats.controls import positive_controls_claims12 as controls12

log = logging.getLogger(__name__)

__all__ = ["controls_appendix", "control_rows", "CACHE_FILE", "CLAIM3_MODULE"]

#: where the computed controls are cached, relative to the results folder
CACHE_FILE = Path("report_cache") / "controls.json"
#: the module (and its function `claim3_controls`) with claim 3's controls, when this build has it
CLAIM3_MODULE = "brownformer.stats.controls.positive_controls"
_STATS_CODE = Path(controls12.__file__).resolve().parent  # brownformer/stats: every rule the controls run through
_HEADING = "## Appendix: Can the rules say yes?"


def _code_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(_STATS_CODE.rglob("*.py")):
        h.update(p.relative_to(_STATS_CODE).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _as_row(c) -> dict:
    """A control (ControlResult or any object with to_dict(), or a dict) as the table's fields."""
    d = c.to_dict() if hasattr(c, "to_dict") else dict(c)
    expected = str(d.get("expected", ""))
    kind = str(d.get("kind") or d.get("role") or "")  # claim 3's ControlResult calls it "role"
    ok = d.get("ok")
    if ok is None:  # a negative control passes by any verdict but "supported"
        ok = (d.get("verdict") == expected if kind == "positive" else d.get("verdict") != "supported")
    return {"claim": str(d.get("claim", "")), "control": str(d.get("name", "")), "kind": kind,
            "expected": expected, "verdict": str(d.get("verdict", "")), "value": d.get("value"), "ok": bool(ok),
            "reason": str(d.get("reason", ""))}


def _claim3_rows() -> tuple[list[dict], str | None]:
    """(rows, why none): claim 3's controls where CLAIM3_MODULE exists, else the reason they are missing."""
    try:
        module = importlib.import_module(CLAIM3_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != CLAIM3_MODULE:
            raise
        return [], f"claims 3a-3c: not available in this build (no module {CLAIM3_MODULE})"
    fn = getattr(module, "claim3_controls", None)
    if fn is None:
        return [], f"claims 3a-3c: not available ({CLAIM3_MODULE} has no claim3_controls)"
    return [_as_row(c) for c in fn()], None


def control_rows(ctx: ReportContext) -> tuple[list[dict], list[str]]:
    """(rows of every control, notes), the claim-1/2 controls read from the cache when it is current."""
    stats = dataclasses.replace(ctx.cfg.stats, n_resamples=controls12.CONTROL_RESAMPLES)
    key = {"stats": repr(stats), "code": _code_hash()}
    path = Path(ctx.results.root) / CACHE_FILE
    rows = None
    if path.is_file():
        try:
            cached = json.loads(path.read_text())
            rows = cached["rows"] if cached.get("key") == key else None
        except (json.JSONDecodeError, KeyError, TypeError):
            log.warning("controls cache %s unreadable: recomputing", path)
    notes = []
    if rows is None:
        rows = [_as_row(c) for c in controls12.positive_controls_claims12(stats, rng=stats.seed)]
        if not Path(ctx.results.root).is_dir():  # no results folder: create none just for a cache
            notes.append("controls not cached (no results folder)")
        else:
            try:
                write_json(path, {"key": key, "rows": rows})
            except OSError as exc:  # a read-only results folder: the appendix still renders
                notes.append(f"controls not cached ({exc})")
    else:
        notes.append(f"claims 1-2: read from the cache {CACHE_FILE} (same statistics code and settings)")
    more, why = _claim3_rows()
    return rows + more, notes + ([why] if why else [])


def _alarms(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if r["ok"]:
            continue
        if r["kind"] == "positive":
            out.append(f"**A POSITIVE CONTROL DID NOT COME OUT \"supported\": claim {r['claim']}, {r['control']} gave "
                       f"\"{r['verdict']}\".** Where the claim holds by construction this rule did not say yes, so its "
                       f"\"not supported\" and \"inconclusive\" verdicts on the data carry little weight.")
        elif r["kind"] == "negative":
            out.append(f"**A NEGATIVE CONTROL CAME OUT \"{r['verdict']}\": claim {r['claim']}, {r['control']}.** The "
                       f"rule says yes where the claim is false; its \"supported\" verdicts carry little weight.")
        else:
            out.append(f"**Claim {r['claim']}'s power fell short: {r['control']}: {r['reason']} (goal "
                       f"{r['expected']}).**")
    return out


def controls_appendix(ctx: ReportContext) -> str:
    """Markdown: the table of controls with verdict and expected verdict, loud where one did not come out right."""
    rows, notes = control_rows(ctx)
    table = pd.DataFrame([{"claim": r["claim"], "control": r["control"], "kind": r["kind"], "expected": r["expected"],
                           "verdict": r["verdict"] if r["value"] is None else f"{r['verdict']} ({fmt(r['value'])})",
                           "as expected": "yes" if r["ok"] else "**NO**"} for r in rows])
    alarms = _alarms(rows)
    n_pos = sum(r["kind"] == "positive" for r in rows)
    summary = (f"Every one of the {len(rows)} controls came out as expected ({n_pos} positive controls "
               "\"supported\")." if not alarms else f"{len(alarms)} of {len(rows)} controls did NOT come out as "
               "expected:")
    return "\n".join([
        _HEADING, "",
        "Each claim's own decision rule, on data where the claim holds by construction (positive controls, which must "
        "be \"supported\") and where it fails (negative controls, which must not be), at the configured margins and "
        "the seed minimum. A rule that cannot say yes would make every \"not supported\" uninformative.", "",
        summary, *(f"\n{a}" for a in alarms), "",
        md_table(table) if not table.empty else "Controls: not available.", "",
        *(f"- {n}" for n in notes)])
