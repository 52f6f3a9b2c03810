"""Numbers with their qualifiers, for report text: a rate of zero events, a censored median, a bounded ratio.

A number alone can mislead: a median that was not reached printed as "inf", a ratio over it as "0", a simulated
rate of 0 with a standard error "± 0.024". Every phrase here carries what the reader needs to read it right.
"""
from __future__ import annotations

import math
import re

from brownformer.report.markdown import fmt

__all__ = ["rate_text", "median_text", "ratio_text", "tidy", "count_noun"]

# zero events in n trials: the one-sided 95% upper bound of the rate is about 3/n ("rule of three",
# Hanley & Lippman-Hand 1983); quoted instead of a standard error, which is 0 (or meaningless) there
_RULE_OF_THREE = 3.0


def count_noun(n: int, noun: str) -> str:
    """'1 run', '3 runs' (a plain English plural)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def rate_text(rate: float, se: float = math.nan, n: float = math.nan) -> str:
    """A simulated rejection rate: '0.045 ± 0.01', or for zero events '0 of 400 (95% upper bound 0.0075)'."""
    if not math.isfinite(rate):
        return "not measured"
    if rate == 0:
        if math.isfinite(n) and n > 0:
            return f"0 of {int(n)} (95% upper bound {fmt(_RULE_OF_THREE / n, 2)})"
        return "0 (no event simulated)"
    return fmt(rate) + (f" ± {fmt(se, 2)}" if math.isfinite(se) and se > 0 else "")


def median_text(median: float, *, n: int, censored: int, unit: str = "") -> str:
    """A Kaplan-Meier median: '120 steps', or 'not reached (5 of 8 censored)' when fewer than half get there."""
    suffix = f" {unit}" if unit else ""
    if math.isfinite(median):
        return f"{fmt(median)}{suffix}" + (f" ({censored} of {n} censored)" if censored else "")
    return f"not reached ({censored} of {n} censored)"


def ratio_text(num: float, den: float, *, num_budget: float = math.nan, den_budget: float = math.nan) -> str:
    """The ratio num / den of two medians, as a bound when one median is not reached within its budget.

    A median not reached is larger than the budget, so num / den < num / den_budget when only den is not reached,
    and > num_budget / den when only num is not reached; with neither reached the ratio is undefined.
    """
    if math.isfinite(num) and math.isfinite(den):
        return fmt(num / den)
    if math.isfinite(num):
        return f"< {fmt(num / den_budget)}" if math.isfinite(den_budget) and den_budget > 0 else "undefined"
    if math.isfinite(den):
        return f"> {fmt(num_budget / den)}" if math.isfinite(num_budget) and den > 0 else "undefined"
    return "undefined (neither median reached)"


_SINGULAR = re.compile(r"\b1 (run|seed|file|replica|model variant|model|claim|test|layer|configuration)s\b")


_ALL_ONE = re.compile(r"\ball 1 ")


# Python reprs the statistics stage writes into reasons: {'adamw': 1, 'muon': 2} and ['adamw'] ('name' quoted)
_REPR_DICT = re.compile(r"\{((?:'[^']*': [^,{}]+(?:, )?)+)\}")
_REPR_LIST = re.compile(r"\[((?:'[^']*'(?:, )?)+)\]")
_QUOTED = re.compile(r"'([^'\s]+)'")


def _unrepr(text: str) -> str:
    text = _REPR_DICT.sub(lambda m: re.sub(r"'([^']*)': ", r"\1 ", m.group(1)), text)
    text = _REPR_LIST.sub(lambda m: m.group(1).replace("'", ""), text)
    return _QUOTED.sub(r"\1", text)


def tidy(text: str) -> str:
    """A reason written by the statistics stage, made to read as English: '1 runs' -> '1 run', 'all 1' -> 'the 1',
    a Python repr such as "{'adamw': 1}" or "['adamw']" -> "adamw 1", "adamw"."""
    return _unrepr(_ALL_ONE.sub("the 1 ", _SINGULAR.sub(lambda m: f"1 {m.group(1)}", text or "")))
