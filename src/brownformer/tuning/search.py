"""Equal-budget coordinate search on log grids, and the score a setting is ranked by.

The search (pure: it calls ``evaluate(index, incumbent)`` and never trains anything itself):

1. the start point (grid index 0 on every knob) is the first trial;
2. knobs in their configured order: from the best point so far, the two neighbours on the knob's
   grid (index -1 and +1 at the current spacing); while the best point is on an edge of what the
   line through it holds, the line extends one more step beyond that edge (a winner on a grid edge
   extends the grid, before any further knob is searched);
3. further passes over the knobs from the new best point; a pass that adds nothing halves the grid
   spacing (refinement, at most ``max_halvings`` times);
4. it stops at ``budget`` trials, the same number for every optimizer; what the budget leaves
   unbracketed is reported per knob (:func:`bracket_status`).

Score of a setting (the claim's own metric): per tuning seed the step at which the run first reaches
the target; a run that does not reach it within the budget is censored there and counts as one
evaluation past the budget (``budget + eval_every``); the setting's score is the mean over seeds of
these capped times, the restricted mean time to the target (Royston & Parmar 2013). With two seeds a
median would be undefined as soon as one seed is censored, and the targets sit where even a tuned
AdamW misses on some seeds. Ties between settings that reached the target on every seed go to the smaller
learning rate (the metric at a seed's stop is only the overshoot of its first evaluation past the target, noise
of one evaluation, while the smaller step lies further from the divergence edge: 2026-12-01, after the tied
larger step of vit-post's AdamW did not train on an evaluation seed); ties between settings censored on some seed
go to the better mean metric at each seed's last evaluation (there it is the end of the budget); then the
earlier trial.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = ["Outcome", "outcome_of", "capped_time", "coordinate_search", "bracket_status"]

Index = tuple[float, ...]


@dataclass(frozen=True)
class Outcome:
    """A trial's result: score (restricted mean steps to target), tie-breaks, whether every seed ran."""

    score: float  # restricted mean steps to the target over the seeds
    tiebreak: float  # higher is better (the metric, sign-flipped where lower is better)
    complete: bool  # False: stopped early, it could not beat the incumbent
    seeds: tuple = field(default=(), compare=False)  # per-seed rows, for the table
    lr: float = math.nan  # the setting's learning rate: ties reached on every seed go to the smaller one

    @property
    def reached_all(self) -> bool:
        return bool(self.seeds) and all(r["reached"] for r in self.seeds)

    @property
    def key(self) -> tuple[float, float, float, float]:
        """Sort key, smaller is better (module docstring); a trial stopped early ranks after every complete one."""
        if not self.complete:
            return (math.inf, math.inf, math.inf, math.inf)
        lr = self.lr if math.isfinite(self.lr) else math.inf
        if self.reached_all:
            return (self.score, 0.0, lr, -self.tiebreak)
        return (self.score, 1.0, -self.tiebreak, lr)


def capped_time(row: dict) -> float:
    """A seed run's time to the target, a censored run counted at ``censored_at`` (budget + one evaluation)."""
    return float(row["steps"]) if row["reached"] else float(row["censored_at"])


def outcome_of(rows: Sequence[dict], n_seeds: int, lr: float = math.nan) -> Outcome:
    """Score the seed runs of one trial (module docstring).

    Args:
        rows: Per seed run, ``reached`` (bool), ``steps`` (step at the target), ``censored_at`` (the
            time a censored run counts as: budget + one evaluation), ``metric`` (the sign-adjusted
            metric at the run's last evaluation, higher is better) and ``stopped`` (stopped early).
        n_seeds: Tuning seeds; fewer rows, or a stopped row, make the trial incomplete.
        lr: The setting's learning rate (the tie-break of settings that reached the target on every seed).
    """
    complete = len(rows) == n_seeds and not any(r.get("stopped") for r in rows)
    score = sum(capped_time(r) for r in rows) / n_seeds if complete else math.inf
    metrics = [r["metric"] for r in rows if math.isfinite(r["metric"])]
    tiebreak = sum(metrics) / len(metrics) if len(metrics) == len(rows) and rows else -math.inf
    return Outcome(score, tiebreak, complete, tuple(rows), float(lr))


def _shift(index: Index, knob: int, delta: float) -> Index:
    return tuple(v + delta if j == knob else v for j, v in enumerate(index))


def _line(trials: dict, through: Index, knob: int) -> list[float]:
    """Grid indices of ``knob`` evaluated on the line through ``through`` (other knobs equal)."""
    return sorted(i[knob] for i in trials if all(i[j] == through[j] for j in range(len(through)) if j != knob))


def coordinate_search(n_knobs: int, budget: int, evaluate: Callable[[Index, Outcome | None], Outcome], *,
                      max_halvings: int = 3) -> list[tuple[Index, Outcome]]:
    """Run the search of the module docstring; returns ``(grid index, outcome)`` per trial, in order."""
    trials: dict[Index, Outcome] = {}
    order: list[Index] = []

    def best() -> Index:
        return min(order, key=lambda i: (trials[i].key, order.index(i)))

    def run(index: Index) -> bool:
        if index in trials or len(order) >= budget:
            return False
        trials[index] = evaluate(index, trials[best()] if order else None)
        order.append(index)
        return True

    run((0.0,) * n_knobs)
    level, halvings = 1.0, 0
    while len(order) < budget:
        added = False
        for k in range(n_knobs):
            b = best()
            for delta in (-level, level):
                added |= run(_shift(b, k, delta))
            while len(order) < budget:  # extend the line beyond an edge winner
                b = best()
                line = _line(trials, b, k)
                if len(line) > 1 and b[k] == line[0]:
                    step = -level
                elif len(line) > 1 and b[k] == line[-1]:
                    step = level
                else:
                    break
                if not run(_shift(b, k, step)):
                    break
                added = True
        if not added:
            if halvings >= max_halvings:
                break
            level, halvings = level / 2, halvings + 1
    return [(i, trials[i]) for i in order]


def bracket_status(trials: Sequence[tuple[Index, Outcome]], best: Index) -> list[str]:
    """Per knob of ``best``: "bracketed" (tried on both sides), "edge" (one side) or "not searched"."""
    held = {i: o for i, o in trials}
    out = []
    for k in range(len(best)):
        line = _line(held, best, k)
        below, above = line[0] < best[k], line[-1] > best[k]
        out.append("bracketed" if below and above else "edge" if below or above else "not searched")
    return out
