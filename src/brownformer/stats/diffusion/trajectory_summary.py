"""A short human summary of one `stats trajectory` result, for the terminal (the JSON holds everything)."""
from __future__ import annotations

import math
from typing import Any

from brownformer.stats.diffusion.window_reading import window_effects

__all__ = ["summary_text"]


def _num(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3g}"


def _interval(ci) -> str:
    if not ci or None in ci:
        return ""
    return f" [{_num(ci[0])}, {_num(ci[1])}]"


def summary_text(result: dict) -> str:
    """Verdict, reason, the exponent with its CI (window and full range), each key effect against its margin,
    and what is known of the rule's size and power at this shape."""
    cls = result.get("classification")
    lines = [f"{result['verdict'].upper()}{f' ({cls})' if cls and cls != result['verdict'] else ''}: "
             f"{result.get('reason', '')}",
             f"{result['kind']} trajectory: {result['n_times']} times x {result['n_walkers']} walkers "
             f"({result.get('n_groups', 'n/a')} groups) x {result['dim']} dims; clock: {result.get('time') or 'index'}"]
    slopes = result.get("local_slopes") or {}
    if slopes.get("description"):  # the reading on the window fixed before the data (what the verdict rests on)
        lines.append(f"window ({slopes.get('classification', 'n/a')}): {slopes['description']}")
    msd = result.get("msd_exponent") or {}
    lines.append(f"full-range MSD exponent {_num(msd.get('estimate'))}{_interval(msd.get('confidence_interval'))}"
                 + (f" (undefined: {msd['why_undefined']})" if msd.get("why_undefined") else ""))
    lines.append("key effects, the intervals the verdict reads (all inside their margins: brownian; one outside: "
                 "not brownian; else inconclusive):")
    for name, e in window_effects(result).items():
        if name in (result.get("key_effects") or ()):
            lines.append(f"  {name:<26} {_num(e.get('estimate'))}{_interval(e.get('tost_interval'))}"
                         + (f" {e['why_undefined']}" if e.get("why_undefined") else ""))
    cal = result.get("calibration")
    if cal:
        power = cal.get("power_lower") or cal.get("power") or {}
        weakest = min(power.values()) if power else None
        lines.append(f"calibrated at this shape: size {_num(cal.get('size'))} (upper bound {_num(cal.get('size_upper'))}), "
                     f"weakest power {_num(weakest)}")
    else:
        lines.append(result.get("calibration_note") or "uncalibrated")
    return "\n".join(lines)
