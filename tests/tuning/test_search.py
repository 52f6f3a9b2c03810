"""The equal-budget coordinate search and its censored score on objectives with a known optimum."""
from __future__ import annotations

import math

import pytest

from brownformer.tuning.search import Outcome, bracket_status, coordinate_search, outcome_of


def _bowl(optimum, budget_steps=400, seeds=2):
    """Steps to target = 100 + 40 * squared distance (grid units) to ``optimum``; censored past the budget."""
    calls = []

    def evaluate(index, incumbent):
        steps = 100 + 40 * sum((i - o) ** 2 for i, o in zip(index, optimum))
        calls.append((index, incumbent))
        rows = [{"seed": s, "reached": steps <= budget_steps, "steps": steps, "censored_at": budget_steps + 5,
                 "metric": -steps} for s in range(seeds)]
        return outcome_of(rows, seeds)
    return evaluate, calls


@pytest.mark.parametrize("optimum", [(3.0,), (-2.0,), (0.0,)])
def test_an_edge_winner_extends_its_grid_until_bracketed(optimum):
    evaluate, _ = _bowl(optimum)
    trials = coordinate_search(1, 8, evaluate)
    best = min(trials, key=lambda t: t[1].key)[0]
    assert best == optimum  # found beyond the initial grid {-1, 0, 1} by extension
    assert bracket_status(trials, best) == ["bracketed"]
    assert len(trials) == 8  # the whole budget is used (refinement after bracketing)


def test_every_optimizer_gets_the_same_number_of_trials():
    for n_knobs in (1, 2, 4):
        evaluate, calls = _bowl((1.0,) * n_knobs)
        assert len(coordinate_search(n_knobs, 9, evaluate)) == len(calls) == 9


def test_what_the_budget_leaves_unsearched_is_reported():
    evaluate, _ = _bowl((2.0, 0.0, 0.0, 0.0))
    trials = coordinate_search(4, 4, evaluate)  # start, lr -1/+1, lr +2: no budget for the other knobs
    best = min(trials, key=lambda t: t[1].key)[0]
    assert bracket_status(trials, best) == ["edge", "not searched", "not searched", "not searched"]


def test_the_incumbent_is_passed_to_every_later_trial():
    evaluate, calls = _bowl((0.0, 0.0))
    coordinate_search(2, 5, evaluate)
    assert calls[0][1] is None and all(inc is not None and inc.score == 100 for _, inc in calls[1:])


def test_score_is_the_restricted_mean_with_censoring():
    def rows(*steps):
        return [{"seed": i, "reached": math.isfinite(t), "steps": t, "censored_at": 405, "metric": 0.9}
                for i, t in enumerate(steps)]
    assert outcome_of(rows(120, 180), 2).score == 150
    assert outcome_of(rows(120, math.inf), 2).score == (120 + 405) / 2  # censored: one evaluation past the budget
    assert outcome_of(rows(math.inf, math.inf), 2).score == 405
    # ties go to the better metric; a trial stopped early ranks after every complete one
    better = outcome_of([{**r, "metric": 0.95} for r in rows(150, 150)], 2)
    assert better.key < outcome_of(rows(150, 150), 2).key
    stopped = outcome_of(rows(120)[:1], 2)
    assert not stopped.complete and outcome_of(rows(math.inf, math.inf), 2).key < stopped.key


def test_ties_reached_on_every_seed_go_to_the_smaller_lr_and_censored_ties_to_the_metric():
    def rows(*steps, metric=0.9):
        return [{"seed": i, "reached": math.isfinite(t), "steps": t, "censored_at": 405, "metric": metric}
                for i, t in enumerate(steps)]
    # both reached the target on every seed at the same mean: the smaller step wins whatever the metric at the stop
    small = outcome_of(rows(260, 290, metric=0.89), 2, lr=0.005)
    large = outcome_of(rows(215, 335, metric=0.91), 2, lr=0.015)
    assert small.score == large.score and small.key < large.key
    # censored on a seed: the metric at the end of the budget decides, not the step size
    small_c = outcome_of(rows(100, math.inf, metric=0.70), 2, lr=0.005)
    large_c = outcome_of(rows(100, math.inf, metric=0.85), 2, lr=0.015)
    assert large_c.key < small_c.key
    # a lower score always wins, whatever the tie-breaks
    assert outcome_of(rows(100, 100), 2, lr=1.0).key < small.key


def test_the_search_follows_the_smaller_lr_through_a_tie():
    # a flat valley: grid indices -1..1 tie; lr grows with the index, so the search must end on the lowest tied index
    def evaluate(index, incumbent):
        i = index[0]
        steps = 200.0 if -1 <= i <= 1 else 300.0
        rows = [{"seed": s, "reached": True, "steps": steps, "censored_at": 405, "metric": 0.9 + 0.01 * i}
                for s in range(2)]
        return outcome_of(rows, 2, lr=0.01 * 3.0 ** i)
    trials = coordinate_search(1, 6, evaluate)
    best = min(trials, key=lambda t: t[1].key)[0]
    assert best == (-1.0,)
