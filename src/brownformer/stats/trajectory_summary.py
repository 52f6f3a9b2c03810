"""A short human summary of one `stats trajectory` result, for the terminal (the JSON holds everything)."""
from __future__ import annotations

import math
from typing import Any

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
    lines = [f"{result['verdict'].upper()} ({result.get('classification', 'n/a')}): {result.get('reason', '')}",
             f"{result['kind']} trajectory: {result['n_times']} times x {result['n_walkers']} walkers "
             f"({result.get('n_groups', 'n/a')} groups) x {result['dim']} dims; clock: {result.get('time') or 'index'}"]
    slopes = result.get("local_slopes") or {}
    if slopes.get("description"):  # the reading on the window fixed before the data (what the verdict rests on)
        lines.append(f"window ({slopes.get('classification', 'n/a')}): {slopes['description']}")
    msd = result.get("msd_exponent") or {}
    lines.append(f"full-range MSD exponent {_num(msd.get('estimate'))}{_interval(msd.get('ci'))}"
                 + (f" (undefined: {msd['why_undefined']})" if msd.get("why_undefined") else ""))
    key = set(result.get("key_effects") or ())
    for t in result.get("tests") or []:
        if t["name"] in key:
            lines.append(f"  {t['name']:<26} {_num(t.get('estimate'))}{_interval(t.get('tost_ci'))} "
                         f"(90% TOST interval){' ' + t['why_undefined'] if t.get('why_undefined') else ''}")
    cal = result.get("calibration")
    if cal:
        power = cal.get("power_lower") or cal.get("power") or {}
        weakest = min(power.values()) if power else None
        lines.append(f"calibrated at this shape: size {_num(cal.get('size'))} (upper bound {_num(cal.get('size_upper'))}), "
                     f"weakest power {_num(weakest)}")
    else:
        lines.append(result.get("calibration_note") or "uncalibrated")
    return "\n".join(lines)
