"""The one decision rule for "is this trajectory a Brownian motion?" (claims 3a-3c).

"Brownian" is an equivalence statement (TOST; Schuirmann 1987): every key effect's (1 - 2 alpha)
confidence interval lies inside its pre-registered margin, and every key effect is defined. "Not
Brownian" needs evidence: a key effect whose (1 - 2 alpha) interval lies entirely outside its margin,
or a calibrated rejection (the key test rejects its null at alpha AND the point estimate lies outside
the margin, so negligible deviations in huge samples never count). Everything else is "inconclusive"
with the reason, including any undefined key effect (below a noise floor, too few time points) and
fewer than MIN_GROUPS groups of dependent walkers (one group cannot carry a cluster bootstrap: its walkers
share one realisation of whatever moves them, so no spread between groups measures the uncertainty).

`trajectory_battery` (hence the calibration, which simulates through it) and the claims
(stats/claims/claim3_brownian.py, re-applying it to stored effects) call the same `decide`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from brownformer.stats.diffusion.battery import MIN_TIME_POINTS
from brownformer.statsfile import RULE_VERDICTS, Decision, EffectResult
from brownformer.stats.diffusion.battery_registry import KEY_EFFECTS, MARGIN_KEYS

__all__ = ["MARGIN_KEYS", "KEY_EFFECTS", "MIN_TIME_POINTS", "MIN_GROUPS", "VERDICTS", "Effect", "decide", "decide_one",
           "decide_results", "KeyMargin", "margins_for", "shift_effect"]

VERDICTS = RULE_VERDICTS
BROWNIAN, NOT_BROWNIAN, INCONCLUSIVE = VERDICTS

#: MARGIN_KEYS (test name -> key of its equivalence margin in StatsConfig.margins) and KEY_EFFECTS (kind -> the
#: effects the verdict needs, in the order the reasons and tables follow) are the battery registry's tables

#: intervals and tests resample groups of dependent walkers; with fewer groups the t-interval over groups
#: (G - 1 df) has no usable variance estimate (cluster-robust inference needs more than a handful of clusters:
#: Cameron & Miller 2015), so the verdict is "inconclusive"
MIN_GROUPS = 5


@dataclass(frozen=True)
class Effect:
    """One key effect of R trajectories: estimates, (1 - 2 alpha) interval and p-value (arrays (R,))."""

    estimate: np.ndarray
    tost_low: np.ndarray
    tost_high: np.ndarray
    pvalue: np.ndarray
    why_undefined: str = ""


def shift_effect(e: Effect, bias: float, null_value: float, *, n_groups: int, alpha: float) -> Effect:
    """The effect less a known bias (the null's own value of it, e.g. what momentum alone gives): estimate and
    (1 - 2 alpha) interval shifted, p-value against `null_value` recomputed from the interval's standard error
    (the t-interval with G - 1 df of bootstrap.BootstrapEstimate: half-width t_{G-1}(1 - alpha) SE')."""
    from scipy.special import stdtr, stdtrit
    df = max(int(n_groups) - 1, 1)
    est, lo, hi = (np.asarray(a, float) - bias for a in (e.estimate, e.tost_low, e.tost_high))
    with np.errstate(all="ignore"):
        se = (hi - lo) / (2 * stdtrit(df, 1 - alpha))
        p = np.where(se > 0, 2 * stdtr(df, -np.abs(est - null_value) / se), np.asarray(e.pvalue, float))
    return Effect(est, lo, hi, p, e.why_undefined)


class KeyMargin(NamedTuple):
    """A key effect's equivalence margin: the test and its (low, high)."""

    test: str
    low: float
    high: float


def margins_for(margins: Mapping[str, tuple[float, float]], kind: str) -> tuple[KeyMargin, ...]:
    """The margins of the key effects of `kind`, in KEY_EFFECTS' order; ValueError naming a missing margin."""
    out = []
    for test in KEY_EFFECTS[kind]:
        key = MARGIN_KEYS[test]
        if key not in margins:
            raise ValueError(f"stats.margins has no {key!r} (needed by the Brownian rule for {test!r})")
        out.append(KeyMargin(test, float(margins[key][0]), float(margins[key][1])))
    return tuple(out)


def decide(effects: Mapping[str, Effect], *, kind: str, margins: Mapping[str, tuple[float, float]],
           alpha: float, n_times: int, n_groups: int | None = None) -> tuple[np.ndarray, list[str]]:
    """Apply the rule to R trajectories at once.

    Args:
        effects: test name -> Effect for (at least) every key effect of `kind`; a missing one is undefined.
        kind: "euclidean" or "sphere".
        margins: StatsConfig.margins (margin key -> (low, high)).
        alpha: level of the TOST and of the rejection tests.
        n_times: time points of the trajectories; below MIN_TIME_POINTS every verdict is "inconclusive"
            (the clock-free statistics are reported, but a walk needs its time course to be judged).
        n_groups: groups of dependent walkers (None: not checked); below MIN_GROUPS every verdict is "inconclusive".

    Returns:
        (verdicts (R,) of VERDICTS, reasons: one sentence per trajectory).
    """
    m = margins_for(margins, kind)
    R = next(iter(effects.values())).estimate.shape[0] if effects else 1
    if n_times < MIN_TIME_POINTS:
        why = (f"{n_times} time points < {MIN_TIME_POINTS}: no exponent; only clock-free statistics (harmonic ratio, "
               "Gram clustering) are reported")
        return np.full(R, INCONCLUSIVE, dtype=object), [why] * R
    if n_groups is not None and int(n_groups) < MIN_GROUPS:
        why = (f"{int(n_groups)} group(s) of dependent walkers < {MIN_GROUPS}: a cluster bootstrap over groups has no "
               "variance to estimate; give the sidecar more groups (e.g. one per probe input) or independent walkers")
        return np.full(R, INCONCLUSIVE, dtype=object), [why] * R
    outside, undefined, overlap = ([[] for _ in range(R)] for _ in range(3))
    for test, lo, hi in m:
        e = effects.get(test)
        if e is None:
            for r in range(R):
                undefined[r].append(f"{test} not computed")
            continue
        est, tlo, thi = (np.asarray(a, float) for a in (e.estimate, e.tost_low, e.tost_high))
        defined = np.isfinite(est) & np.isfinite(tlo) & np.isfinite(thi)
        ci_out = defined & ((thi < lo) | (tlo > hi))
        rejected = np.isfinite(est) & (np.nan_to_num(np.asarray(e.pvalue, float), nan=1.0) < alpha) & ((est < lo) | (est > hi))
        inside = defined & (tlo >= lo) & (thi <= hi)
        for r in range(R):
            if ci_out[r] or rejected[r]:
                how = "interval" if ci_out[r] else "calibrated rejection, estimate"
                outside[r].append(f"{test} {how} {est[r]:.3g} [{tlo[r]:.3g}, {thi[r]:.3g}] outside [{lo:g}, {hi:g}]")
            elif not defined[r]:
                undefined[r].append(f"{test} undefined" + (f" ({e.why_undefined})" if e.why_undefined else ""))
            elif not inside[r]:
                overlap[r].append(f"{test} interval [{tlo[r]:.3g}, {thi[r]:.3g}] overlaps the margin edge of [{lo:g}, {hi:g}]")
    verdicts, reasons = np.empty(R, dtype=object), []
    for r in range(R):
        if outside[r]:
            verdicts[r], why = NOT_BROWNIAN, outside[r]
        elif undefined[r] or overlap[r]:
            verdicts[r], why = INCONCLUSIVE, undefined[r] + overlap[r]
        else:
            verdicts[r], why = BROWNIAN, [f"every key effect's {1 - 2 * alpha:.0%} interval lies inside its margin"]
        reasons.append("; ".join(why))
    return verdicts, reasons


def decide_results(effects: Iterable[EffectResult], *, kind: str, margins: Mapping[str, tuple[float, float]],
                   alpha: float, n_times: int, n_groups: int | None = None, rule: str | None = None) -> Decision:
    """`decide` on one trajectory's key effects (statsfile.EffectResult records carrying their test's name, e.g. a
    file's `effects`), taken once as a Decision at `alpha`. This is also how the claims re-apply the calibrated rule
    to per-file outputs (window_reading.window_effects)."""
    arr = lambda x: np.array([np.nan if x is None else float(x)])  # noqa: E731
    eff = {e.name: Effect(arr(e.estimate), *(arr(v) for v in (e.tost_interval or (None, None))), arr(e.pvalue),
                          str(e.why_undefined or "")) for e in effects}
    verdicts, reasons = decide(eff, kind=kind, margins=margins, alpha=alpha, n_times=n_times, n_groups=n_groups)
    return Decision(str(verdicts[0]), reasons[0], rule=rule, alpha=alpha)


def decide_one(effects: Iterable[EffectResult], *, kind: str, margins: Mapping[str, tuple[float, float]],
               alpha: float, n_times: int, n_groups: int | None = None) -> tuple[str, str]:
    """`decide_results`' (verdict, reason)."""
    d = decide_results(effects, kind=kind, margins=margins, alpha=alpha, n_times=n_times, n_groups=n_groups)
    return d.verdict, d.reason
