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
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.stats import qmc

from .search import Outcome
from .space import Knob

__all__ = ["NEIGHBOURS", "EDGE", "unit_to_value", "halton_points", "smoothed_scores", "quasi_random_search",
           "edge_status"]

#: nearest trials averaged into a trial's smoothed score (with itself: 3 settings x the tuning seeds)
NEIGHBOURS = 2
#: a winner closer than this to a face of the unit cube is reported on the edge of its search space
EDGE = 0.05


def unit_to_value(knob: Knob, u: float) -> float:
    """The knob's value at unit coordinate ``u`` in [0, 1] (module docstring), to 4 significant digits; a step
    count (``knob.integer``: warm-up, horizon) rounded to the nearest integer."""
    lo, hi = knob.low, knob.high
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
