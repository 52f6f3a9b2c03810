"""Quasi-random search in a box, AlgoPerf-style, and a selection that seed noise does not steer.

Every optimizer gets the same number of trials, drawn as the first ``n`` points of a scrambled Halton
sequence (``scipy.stats.qmc.Halton``; any ``n``, unlike Sobol's powers of two) in the unit cube of its
knobs, each mapped to the knob's range: ``scale: log`` (lr, weight decay, damping)
``value = low (high / low)^u``; ``scale: complement`` (momentum, betas) ``1 - value`` log-uniform
between ``1 - high`` and ``1 - low``; ``scale: linear`` uniform.

Selection (robust to the noise of a few tuning seeds): a trial's score is the restricted mean steps to the
target over the tuning seeds (search.outcome_of); its smoothed score is the mean of its own score and those
of its ``neighbours`` nearest trials in the unit cube (Euclidean), so a setting wins only when its
neighbourhood is good too, not by one lucky draw of seeds. The winner is the smallest smoothed score
(ties: smaller raw score, then the earlier trial). No trial stops early: smoothing needs every score.

Edges (is the range wide enough?). A winner's coordinate within :data:`EDGE` of a face is common by the
design's geometry alone: 7 of the first 16 six-dimensional points have one (1 - 0.9^6 = 47% of random points), so
nearness to a face says nothing about where the optimum lies, and widening the range maps the same unit points
to a new face (benchmarks/results/tuning_kfac_widened.md). So each such knob is probed: the winner's setting
with that knob moved :data:`PROBE_STEP` beyond the face (unit coordinate -0.1 or 1.1, the range's own scale
extrapolated), trained on the same tuning seeds. The knob is "edge" (the range should be widened) when the probe
beats the winner's own runs by more than the seeds' noise (:func:`probe_beats_winner`: paired over the tuning
seeds, mean gain at least one evaluation interval and a one-sided paired t-test at :data:`PROBE_ALPHA`),
"inside" otherwise; "bound" when the face is the knob's natural limit (a linear knob starting at 0: no negative
warm-up). The probes are diagnostics: they never replace the winner, so every optimizer's search keeps the same
number of trials.

Why the winner's own runs and not its smoothed score (the comparator until 2026-12-06): a probe's score is one
setting's raw mean, the smoothed score a mean over three settings, 6-27 steps above the winner's own in the
tuning of 2026-12-01; so a probe that tied or lost to the winner on every seed was still "better", and three
knobs were called "edge" on probes no better than the winner (benchmarks/results/tuning_issue31_final.md).
Like is compared with like: the same seeds, the same setting but for the one knob.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.stats import qmc, ttest_1samp

from .search import Outcome, capped_time
from .space import Knob

__all__ = ["NEIGHBOURS", "EDGE", "PROBE_STEP", "unit_to_value", "halton_points", "smoothed_scores",
           "quasi_random_search", "edge_status", "EdgeProbe", "edge_probes", "probe_beats_winner", "probed_status",
           "PROBE_ALPHA"]

#: nearest trials averaged into a trial's smoothed score (with itself: 3 settings x the tuning seeds)
NEIGHBOURS = 2
#: a winner closer than this to a face of the unit cube is reported on the edge of its search space
EDGE = 0.05
#: how far beyond a face (unit coordinates) an edge winner's knob is probed
PROBE_STEP = 0.1
#: one-sided level of the paired t-test that calls a probe better than its winner (beyond the seeds' noise)
PROBE_ALPHA = 0.05


def unit_to_value(knob: Knob, u: float) -> float:
    """The knob's value at unit coordinate ``u`` in [0, 1] (module docstring), to 4 significant digits; a step
    count (``knob.integer``: warm-up, horizon) rounded to the nearest integer."""
    lo, hi = knob.low, knob.high  # u outside [0, 1] extrapolates the scale (an edge probe)
    if knob.scale == "log":
        value = lo * (hi / lo) ** u
    elif knob.scale == "complement":
        value = 1 - (1 - lo) * ((1 - hi) / (1 - lo)) ** u
    else:
        value = lo + u * (hi - lo)
    return int(round(value)) if knob.integer else float(f"{value:.4g}")


def halton_points(n_knobs: int, n: int, seed: int) -> np.ndarray:
    """``(n, n_knobs)`` scrambled Halton points in the unit cube, the same for every optimizer with that many knobs."""
    return qmc.Halton(d=n_knobs, scramble=True, seed=seed).random(n)


def smoothed_scores(points: np.ndarray, scores: Sequence[float], *, neighbours: int = NEIGHBOURS) -> np.ndarray:
    """Each trial's score averaged with its ``neighbours`` nearest trials' (module docstring).

    A censored trial's score is finite (search.capped_time), so the mean is too; an incomplete trial (inf)
    makes its neighbourhood inf."""
    points, scores = np.asarray(points, float), np.asarray(scores, float)
    dist = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)  # (n, n)
    k = min(neighbours + 1, len(scores))
    nearest = np.argsort(dist, axis=1, kind="stable")[:, :k]  # itself first (distance 0)
    return scores[nearest].mean(axis=1)


def quasi_random_search(knobs: Sequence[Knob], budget: int, seed: int,
                        evaluate: Callable[[dict], Outcome]) -> tuple[list, int, np.ndarray]:
    """Evaluate ``budget`` quasi-random settings; returns ``(trials, best position, smoothed scores)``.

    ``trials``: ``[(unit point, settings, Outcome)]`` in order; ``settings`` maps each knob key to its value.
    """
    points = halton_points(len(knobs), budget, seed)
    trials = []
    for u in points:
        settings = {k.key: unit_to_value(k, float(x)) for k, x in zip(knobs, u)}
        trials.append((tuple(float(x) for x in u), settings, evaluate(settings)))
    smooth = smoothed_scores(points, [o.score for _, _, o in trials])
    raw = [o.score for _, _, o in trials]
    best = min(range(budget), key=lambda j: (smooth[j], raw[j], j))
    return trials, best, smooth


def edge_status(point: Sequence[float]) -> list[str]:
    """Per knob of a winner: "inside" its range, or "edge" within :data:`EDGE` of a bound (widen the range)."""
    return ["edge" if min(u, 1 - u) < EDGE else "inside" for u in point]


@dataclass(frozen=True)
class EdgeProbe:
    """One edge winner's knob probed beyond its face (module docstring)."""

    knob: str
    unit: float  # the probe's unit coordinate (-PROBE_STEP or 1 + PROBE_STEP)
    settings: dict  # the winner's values with this knob moved
    winner_value: float  # the knob's value at the winner
    outcome: Outcome | None = None  # its score on the tuning seeds, once trained

    @property
    def value(self) -> float:
        return self.settings[self.knob]


def edge_probes(knobs: Sequence[Knob], point: Sequence[float], values: dict) -> list[EdgeProbe]:
    """The probes of a winner at unit ``point`` with knob values ``values``: one per knob within EDGE of a face,
    except a face that is the knob's natural limit (a linear knob whose low end is 0)."""
    probes = []
    for knob, u in zip(knobs, point):
        if min(u, 1 - u) >= EDGE or (u < EDGE and knob.scale == "linear" and knob.low == 0):
            continue
        beyond = -PROBE_STEP if u < EDGE else 1 + PROBE_STEP
        probes.append(EdgeProbe(knob.key, beyond, {**values, knob.key: unit_to_value(knob, beyond)},
                                values[knob.key]))
    return probes


def probe_beats_winner(probe: Outcome, winner: Outcome, *, resolution: float) -> bool:
    """Whether a probe reaches the target faster than its winner beyond the noise of the tuning seeds.

    Paired over the seeds both ran (matched by seed), with ``d_s`` the winner's time to the target minus the
    probe's (censored runs at their ``censored_at``, as the score counts them): better when the mean gain
    ``mean(d)`` is at least ``resolution`` (one evaluation interval: the grid cannot see less) and a one-sided
    paired t-test (``scipy.stats.ttest_1samp`` of ``d``) rejects "no gain" at :data:`PROBE_ALPHA` (an equal gain
    on every seed, ``sd(d) = 0``, passes). With one seed only the resolution applies.
    """
    mine = {r["seed"]: capped_time(r) for r in winner.seeds}
    pairs = [(mine[r["seed"]], capped_time(r)) for r in probe.seeds if r["seed"] in mine]
    if not pairs:
        raise ValueError("a probe and its winner share no tuning seed; they cannot be compared")
    gain = np.array([w - p for w, p in pairs])
    mean = float(gain.mean())
    if mean < resolution:
        return False
    if len(gain) < 2 or np.ptp(gain) == 0.0:  # scipy's t is undefined for an equal gain on every seed
        return True
    return float(ttest_1samp(gain, 0.0, alternative="greater").pvalue) < PROBE_ALPHA


def probed_status(knobs: Sequence[Knob], point: Sequence[float], probes: Sequence[EdgeProbe],
                  winner: Outcome, *, resolution: float) -> list[str]:
    """Per knob of a winner: "inside", "bound" or "edge" (module docstring), from its trained probes."""
    outcomes = {p.knob: p.outcome for p in probes}
    out = []
    for knob, status in zip(knobs, edge_status(point)):
        if status == "inside":
            out.append("inside")
        elif knob.key not in outcomes:
            out.append("bound")
        else:
            out.append("edge" if probe_beats_winner(outcomes[knob.key], winner, resolution=resolution) else "inside")
    return out
