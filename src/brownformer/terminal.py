"""What a deciding CLI prints on stdout: one short, aligned verdict table (or the JSON, or nothing).

Every subcommand that decides something (`stats trajectory`, `stats attention`, `pretrained`) hands its rows
to `emit`; the log file keeps the details. A row is one decided thing (a claim, a file); its cells are plain
strings already formatted by the caller, so that the numbers on the terminal are the ones in the JSON.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
import math
from typing import IO, Any, Sequence

# The columns every verdict table has, in order; a caller may leave a cell empty ("").
COLUMNS = ("item", "verdict", "estimate [CI]", "margin", "size / power", "reason")


@dataclass(frozen=True)
class VerdictRow:
    """One decided thing: what it is, the verdict, and the numbers that decided it (already formatted)."""

    item: str
    verdict: str
    estimate: str = ""
    margin: str = ""
    size_power: str = ""
    reason: str = ""

    def cells(self) -> tuple[str, ...]:
        return (self.item, self.verdict, self.estimate, self.margin, self.size_power, self.reason)


@dataclass(frozen=True)
class VerdictTable:
    """A titled table of verdict rows, with optional notes printed under it (e.g. "not calibrated")."""

    title: str
    rows: Sequence[VerdictRow]
    notes: Sequence[str] = field(default_factory=tuple)


def format_table(table: VerdictTable, *, max_reason: int = 90) -> str:
    """The table as aligned plain text; long reasons are cut at `max_reason` characters (the JSON has them whole)."""
    rows = [tuple(c if i < 5 else _clip(c, max_reason) for i, c in enumerate(r.cells())) for r in table.rows]
    widths = [max([len(COLUMNS[i])] + [len(r[i]) for r in rows]) for i in range(len(COLUMNS))]
    # drop columns that are empty in every row, so a short table stays short
    keep = [i for i in range(len(COLUMNS)) if i < 2 or any(r[i] for r in rows)]
    line = lambda cells: "  ".join(cells[i].ljust(widths[i]) for i in keep).rstrip()  # noqa: E731
    out = [table.title, line(COLUMNS), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    out += [f"note: {n}" for n in table.notes]
    return "\n".join(out)


def emit(table: VerdictTable, payload: Any = None, *, as_json: bool = False, quiet: bool = False,
         stream: IO[str] | None = None) -> None:
    """Print the table (default), only `payload` as JSON (`--json`), or nothing (`--quiet`)."""
    stream = stream or sys.stdout
    if quiet:
        return
    if as_json:
        from brownformer.io import to_jsonable
        print(json.dumps(to_jsonable(payload), allow_nan=False), file=stream)
        return
    print(format_table(table), file=stream)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _num(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) else f"{x:.3g}"


def _estimate(e: dict) -> str:
    """'1.02 [0.9, 1.2]' from an effect's JSON (its TOST interval, the one the rule reads, else its CI)."""
    return _estimate_text(e.get("estimate"), e.get("tost_interval") or e.get("confidence_interval"),
                          e.get("why_undefined"))


def _estimate_text(estimate, ci, why_undefined) -> str:
    if estimate is None:
        return f"undefined ({why_undefined or 'no value'})"
    return _num(estimate) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci and None not in ci else "")


def _margin(m) -> str:
    return f"[{_num(m[0])}, {_num(m[1])}]" if m and len(m) == 2 else ""


def _inside(e) -> bool | None:
    """Whether an effect's (statsfile.EffectResult) interval lies inside its margin (None: undefined)."""
    ci, m = e.tost_interval or e.confidence_interval, e.margin
    if e.estimate is None or not ci or None in ci or not m:
        return None
    return m[0] <= ci[0] and ci[1] <= m[1]


def _deciding_effect(result: dict):
    """The key effect (statsfile.EffectResult) that decided a battery verdict: the first outside its margin ("not
    brownian"), the first not inside it ("inconclusive"), else the window exponent (the effect claim 3 rests on)."""
    from brownformer.stats.diffusion.window_reading import window_effects

    effects = [e for e in window_effects(result) if e.name in (result.get("key_effects") or ())]
    if not effects:
        return None
    verdict = result.get("verdict")
    want = {"not brownian": (False,), "inconclusive": (False, None)}.get(verdict, ())
    for e in effects:
        if _inside(e) in want:
            return e
    return next((e for e in effects if e.name == "msd_exponent"), effects[0])


def _size_power(cal: dict | None) -> str:
    if not cal:
        return "not calibrated"
    power = cal.get("power_lower") or cal.get("power") or {}
    weakest = min(power.values()) if power else None
    return f"{_num(cal.get('size'))} / " + (f">= {_num(weakest)}" if weakest is not None else "n/a")


def groups_for_power(power: float, groups: int, *, goal: float, alpha: float) -> int | None:
    """Groups of walkers at which a rule with simulated `power` at `groups` reaches `goal`, in the normal
    approximation of a test whose interval shrinks as 1/sqrt(groups): power = Phi(c sqrt(G) - z_(1-alpha)), so
    G' = G ((z_goal + z_(1-alpha)) / (z_power + z_(1-alpha)))^2. None when the power is at or below alpha (the
    approximation has no slope to extrapolate) or already at the goal."""
    from scipy.stats import norm

    z_alpha = norm.ppf(1 - alpha)
    slope = norm.ppf(power) + z_alpha
    if not (0 < power < goal) or slope <= 0:
        return None
    return math.ceil(groups * ((norm.ppf(goal) + z_alpha) / slope) ** 2)


def _low_power_hint(result: dict) -> str:
    """For an inconclusive verdict whose calibration misses the power goal: how many walkers would meet it."""
    from brownformer.stats.core.calibration import POWER_GOAL

    cal = result.get("calibration") or {}
    power = cal.get("power_lower") or {}
    if result.get("verdict") != "inconclusive" or not power or min(power.values()) >= POWER_GOAL:
        return ""
    weakest = min(power, key=power.get)
    groups = int(result.get("n_groups") or result.get("n_walkers") or 0)
    alpha = float((result.get("settings") or {}).get("alpha", 0.05))
    text = (f"power lower bound {_num(power[weakest])} < {POWER_GOAL:g} (against {weakest}) with {groups} groups "
            "of walkers")
    need = groups_for_power(power[weakest], groups, goal=POWER_GOAL, alpha=alpha) if groups else None
    if need is None:
        return text + "; too little power at this shape to extrapolate: rerun --calibrate on a larger array"
    per_group = (result.get("n_walkers") or groups) / groups
    return (text + f": power reaches {POWER_GOAL:g} at about {need} groups ({math.ceil(need * per_group)} walkers; "
            "normal approximation, intervals shrinking as 1/sqrt(groups); rerun --calibrate at that size to confirm)")


def trajectory_table(item: str, result: dict) -> VerdictTable:
    """`stats trajectory`: one row (the file), its decided verdict and the key effect that decided it."""
    e = _deciding_effect(result)
    effect = f"{e.name} {_estimate_text(e.estimate, e.tost_interval or e.confidence_interval, e.why_undefined)}" \
        if e else ""
    row = VerdictRow(item, result.get("verdict", "n/a").upper(), effect.strip(), _margin(e.margin if e else None),
                     _size_power(result.get("calibration")), result.get("reason", ""))
    notes = [n for n in (_low_power_hint(result), result.get("calibration_note") or "") if n]
    return VerdictTable(f"{result.get('kind', '')} trajectory: {result.get('n_times')} times x "
                        f"{result.get('n_walkers')} walkers x {result.get('dim')} dims", [row], notes)


def attention_table(item: str, result: dict) -> VerdictTable:
    """`stats attention`: one row per claim-2 criterion with its estimate, margin and verdict."""
    rows = []
    for q, v in (result.get("verdicts") or {}).items():
        lo, hi = v.get("margin") or (None, None)
        bound = f">= {_num(lo)}" if q == "head_isotropy" else f"<= {_num(hi)}"
        rows.append(VerdictRow(f"{item}: {q}", v.get("verdict", "n/a").upper(), _estimate(v), bound, "not calibrated",
                               v.get("why_undefined") or v.get("reason") or ""))
    return VerdictTable(f"{result.get('n_matrices')} attention matrices of {result.get('n')} x {result.get('n')}"
                        + (" (causal)" if result.get("causal") else ""), rows)
