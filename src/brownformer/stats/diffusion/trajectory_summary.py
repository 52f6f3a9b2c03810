"""A short human summary of one `stats trajectory` result, for the terminal (the JSON holds everything)."""
from __future__ import annotations

import math
from typing import Any

from brownformer.stats.diffusion.window_reading import key_effects_on_window
from brownformer.statsfile import BatteryStats

__all__ = ["summary_text"]


def _num(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3g}"


def _interval(ci) -> str:
    if not ci or None in ci:
        return ""
    return f" [{_num(ci[0])}, {_num(ci[1])}]"


def summary_text(result: BatteryStats | dict) -> str:
    """Verdict, reason, the exponent with its CI (window and full range), each key effect against its margin,
    and what is known of the rule's size and power at this shape; `result`: the record, or its JSON (parsed once)."""
    r = BatteryStats.from_dict(result, "stats trajectory result")
    cls = r.classification
    lines = [f"{r.verdict.upper()}{f' ({cls})' if cls and cls != r.verdict else ''}: {r.reason}",
             f"{r.kind} trajectory: {r.n_times} times x {r.n_walkers} walkers ({r.n_groups} groups) x {r.dim} dims; "
             f"clock: {r.time or 'index'}"]
    slopes = r.local_slopes
    if slopes is not None and slopes.description:  # the reading on the window fixed before the data (the verdict's)
        lines.append(f"window ({slopes.classification or 'n/a'}): {slopes.description}")
    msd = r.msd_exponent
    lines.append(f"full-range MSD exponent {_num(msd.estimate)}{_interval(msd.confidence_interval)}"
                 + (f" (undefined: {msd.why_undefined})" if msd.why_undefined else ""))
    lines.append("key effects, the intervals the verdict reads (all inside their margins: brownian; one outside: "
                 "not brownian; else inconclusive):")
    for e in key_effects_on_window(r.effects, slopes):
        if e.name in r.key_effects:
            lines.append(f"  {e.name:<26} {_num(e.estimate)}{_interval(e.tost_interval)}"
                         + (f" {e.why_undefined}" if e.why_undefined else ""))
    cal = r.calibration
    if cal:  # calibration_for's row of the table at this shape
        power = cal.power_lower or cal.power
        weakest = min(p.value for p in power) if power else None
        lines.append(f"calibrated at this shape: size {_num(cal.size)} (upper bound {_num(cal.size_upper)}), "
                     f"weakest power {_num(weakest)}")
    else:
        lines.append(r.calibration_note or "uncalibrated")
    return "\n".join(lines)
