"""The quasi-random search (brownformer.tuning.quasi_random): ranges, equal trials, selection that seed noise does
not steer, the config checks, and a tiny real tuning on config/ci.yaml shapes."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from brownformer.cli import main
from brownformer.config import ConfigError, from_dict
from brownformer.tuning.quasi_random import (EDGE, PROBE_STEP, edge_probes, edge_status, halton_points,
                                             probe_beats_winner, probed_status, quasi_random_search, smoothed_scores, unit_to_value)
from brownformer.tuning.search import Outcome
from brownformer.tuning.space import Knob, optimizer_settings, tuning_config

ROOT = Path(__file__).resolve().parents[2]
LR = Knob("lr", scale="log", low=1e-4, high=1e-1)
MOMENTUM = Knob("momentum", scale="complement", low=0.5, high=0.99)


def test_values_span_the_range_on_their_scale():
    assert unit_to_value(LR, 0.0) == 1e-4 and unit_to_value(LR, 1.0) == 0.1
    assert unit_to_value(LR, 0.5) == pytest.approx(math.sqrt(1e-4 * 1e-1), rel=1e-3)  # log-uniform: geometric middle
    assert unit_to_value(MOMENTUM, 0.0) == 0.5 and unit_to_value(MOMENTUM, 1.0) == 0.99
    assert unit_to_value(MOMENTUM, 0.5) == pytest.approx(1 - math.sqrt(0.5 * 0.01), rel=1e-3)
    assert unit_to_value(Knob("warmup", scale="linear", low=0, high=40), 0.25) == 10


def test_points_are_deterministic_and_fill_the_cube_evenly():
    a, b = halton_points(3, 64, seed=0), halton_points(3, 64, seed=0)
    np.testing.assert_array_equal(a, b)
    # every 1-D projection puts 64 points 8 to each eighth of the range (a random draw rarely does)
    for d in range(3):
        counts = np.bincount((a[:, d] * 8).astype(int), minlength=8)
        assert counts.min() >= 7 and counts.max() <= 9


def _outcome(score: float, seeds: tuple[int, ...] = (100, 101, 102), noise: tuple[float, ...] = (0.0, 0.0, 0.0)) -> Outcome:
    """A trial that reached the target on every seed at ``score + noise[seed]`` steps (mean ``score`` for zero-mean
    noise)."""
    rows = tuple({"seed": s, "reached": True, "steps": score + e, "censored_at": 405.0} for s, e in zip(seeds, noise))
    return Outcome(score, 0.0, True, rows)


def test_every_optimizer_gets_the_same_number_of_trials():
    for knobs in ([LR], [LR, MOMENTUM], [LR, MOMENTUM, Knob("weight_decay", low=1e-4, high=0.1)]):
        trials, _, _ = quasi_random_search(knobs, 12, 0, lambda s: _outcome(1.0))
        assert len(trials) == 12 and all(set(t[1]) == {k.key for k in knobs} for t in trials)


def test_a_lucky_isolated_trial_does_not_win_over_a_good_neighbourhood():
    """Smoothed over its 2 nearest trials, a single lucky score among bad neighbours loses to a setting whose
    neighbourhood is good, though its own raw score is the best."""
    points = np.array([[0.1], [0.12], [0.14], [0.5], [0.52], [0.9]])
    scores = [100.0, 105.0, 103.0, 60.0, 300.0, 300.0]
    smooth = smoothed_scores(points, scores)
    assert smooth[np.argmin(scores)] > smooth[:3].min()
    assert int(np.argmin(smooth)) in (0, 1, 2)


def test_selection_recovers_the_optimum_of_a_noisy_bowl():
    """Steps to target = a bowl in log lr with its bottom at lr 3e-3, plus seed noise: the chosen lr lies near it."""
    rng = np.random.default_rng(0)
    f = lambda s: 100 + 80 * (math.log10(s["lr"]) - math.log10(3e-3)) ** 2 + rng.normal(0, 15)
    trials, best, _ = quasi_random_search([LR], 24, 0, lambda s: _outcome(f(s)))
    assert abs(math.log10(trials[best][1]["lr"]) - math.log10(3e-3)) < 0.5
    assert edge_status(trials[best][0]) == ["inside"]


def test_a_share_of_the_design_lies_near_a_face_whatever_the_scores():
    """Why nearness to a face alone cannot mean "the range is too narrow": of the first 16 six-knob points, close to
    the share 1 - (1 - 2 EDGE)^6 of uniform points has a coordinate within EDGE of a face."""
    points = halton_points(6, 16, seed=0)
    share = np.mean((np.minimum(points, 1 - points) < EDGE).any(axis=1))
    assert abs(share - (1 - (1 - 2 * EDGE) ** 6)) < 0.1


WARMUP = Knob("warmup_steps", scale="linear", low=0, high=50)


def test_edge_probes_step_beyond_the_face_on_the_knob_scale():
    values = {"lr": unit_to_value(LR, 0.02), "momentum": unit_to_value(MOMENTUM, 0.5), "warmup_steps": 1}
    probes = edge_probes([LR, MOMENTUM, WARMUP], (0.02, 0.5, 0.01), values)
    # lr near its low face: one probe, below the range on the log scale; the momentum inside: none; warm-up at its
    # natural limit 0: none
    assert [p.knob for p in probes] == ["lr"]
    (probe,) = probes
    assert probe.unit == -PROBE_STEP and probe.winner_value == values["lr"]
    assert probe.value == pytest.approx(1e-4 * (1e-1 / 1e-4) ** -PROBE_STEP, rel=1e-3) and probe.value < LR.low
    assert probe.settings["momentum"] == values["momentum"]  # every other knob at the winner's value
    (upper,) = edge_probes([MOMENTUM], (0.99,), {"momentum": unit_to_value(MOMENTUM, 0.99)})
    assert 0.99 < upper.value < 1  # the complement scale extrapolates towards 1, never past it


def _bowl(optimum_lr: float):
    """Steps to the target, a noise-free bowl in log lr with its bottom at ``optimum_lr``."""
    return lambda settings: 100 + 80 * (math.log10(settings["lr"]) - math.log10(optimum_lr)) ** 2


def _status_of_a_winner_at(u: float, optimum_lr: float) -> list[str]:
    """The lr knob's status for a winner at unit coordinate ``u``, its probes and smoothed score on the bowl."""
    bowl = _bowl(optimum_lr)
    winner = {"lr": unit_to_value(LR, u)}
    probes = [dataclasses.replace(p, outcome=_outcome(bowl(p.settings))) for p in edge_probes([LR], (u,), winner)]
    return probes, probed_status([LR], (u,), probes, _outcome(bowl(winner)), resolution=5.0)


def test_a_winner_whose_optimum_lies_beyond_the_range_is_on_the_edge():
    probes, status = _status_of_a_winner_at(0.02, optimum_lr=1e-5)  # the bottom a decade below the range
    assert len(probes) == 1 and status == ["edge"]


def test_a_winner_near_a_face_with_its_optimum_inside_is_inside():
    probes, status = _status_of_a_winner_at(0.03, optimum_lr=1.3e-4)  # the bottom inside, by the face
    assert len(probes) == 1 and status == ["inside"]


def test_the_search_recovers_an_optimum_beyond_the_range_as_an_edge():
    """End to end on the search's own winner: the bowl's bottom below the range pulls the winner to the face."""
    bowl = _bowl(1e-6)
    trials, best, smooth = quasi_random_search([LR], 24, 0, lambda s: _outcome(bowl(s)))
    u = trials[best][0]
    probes = [dataclasses.replace(p, outcome=_outcome(bowl(p.settings)))
              for p in edge_probes([LR], u, trials[best][1])]
    status = probed_status([LR], u, probes, trials[best][2], resolution=5.0)
    assert len(probes) == 1 and status == ["edge"]  # the lowest of the 24 points sits at u = 0.037
    assert trials[best][1]["lr"] == min(t[1]["lr"] for t in trials)  # the lowest lr tried wins


def test_a_face_at_the_natural_limit_is_a_bound():
    assert probed_status([WARMUP], (0.01,), [], _outcome(100.0), resolution=5.0) == ["bound"]


def test_a_probe_that_ties_or_loses_to_its_winner_is_never_an_edge():
    """The defect of the smoothed comparator (tuning of 2026-12-01): a probe at 91.7 or 103.3 steps against a
    winner's own 88.3 or 103.3 was "edge" because the winner's smoothed score was 93.9 or 130.6."""
    winner = _outcome(88.33, noise=(1.67, -8.33, 6.67))  # 90, 80, 95
    probe = _outcome(91.67, noise=(-1.67, -11.67, 13.33))  # 90, 80, 105
    assert not probe_beats_winner(probe, winner, resolution=5.0)
    assert not probe_beats_winner(_outcome(103.3), _outcome(103.3), resolution=5.0)


def test_a_probe_better_on_every_seed_by_more_than_the_noise_is_an_edge():
    winner = _outcome(120.0, noise=(5.0, -5.0, 0.0))
    assert probe_beats_winner(_outcome(90.0, noise=(5.0, -5.0, 0.0)), winner, resolution=5.0)  # 30 on each seed
    assert probe_beats_winner(_outcome(90.0, noise=(10.0, -5.0, 0.0)), winner, resolution=5.0)  # 25-35: t = 10.4


def test_a_gain_inside_the_seed_noise_or_below_the_grid_is_not_an_edge():
    winner = _outcome(120.0)
    # mean gain 20 but one seed loses by 40: t = 20 / (52 / sqrt 3) = 0.67 < t_0.95,2 = 2.92
    assert not probe_beats_winner(_outcome(100.0, noise=(-30.0, -30.0, 60.0)), winner, resolution=5.0)
    assert not probe_beats_winner(_outcome(117.0), winner, resolution=5.0)  # 3 steps < one 5-step interval


def test_a_censored_seed_counts_at_its_censoring_time():
    winner = _outcome(300.0)
    probe = Outcome(0.0, 0.0, True, tuple({"seed": s, "reached": False, "steps": math.nan, "censored_at": 405.0}
                                          for s in (100, 101, 102)))
    assert not probe_beats_winner(probe, winner, resolution=5.0)  # never reached: 405 > 300 on every seed
    assert probe_beats_winner(winner, Outcome(405.0, 0.0, True, probe.seeds), resolution=5.0)


def test_a_probe_with_no_shared_seed_is_an_error():
    with pytest.raises(ValueError, match="share no tuning seed"):
        probe_beats_winner(_outcome(1.0, seeds=(1, 2, 3)), _outcome(2.0), resolution=5.0)


def test_betas_are_two_knobs_of_one_pair():
    assert optimizer_settings({"lr": 0.01, "beta1": 0.8}, {}) == {"lr": 0.01, "betas": [0.8, 0.999]}
    assert optimizer_settings({"beta2": 0.95}, {"betas": [0.85, 0.99]}) == {"betas": [0.85, 0.95]}


def _raw(**tuning) -> dict:
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["tuning"] = {"seeds": [100, 101, 102], "models": ["vit-pre"], "optimizers": ["adamw"], "trials": 3,
                     "method": "quasi-random",
                     "knobs": {"adamw": [{"key": "lr", "low": 1e-3, "high": 1e-2},
                                         {"key": "beta2", "scale": "complement", "low": 0.9, "high": 0.999}]},
                     **tuning}
    raw.setdefault("report", {})["targets"] = {"vit-pre": 0.14}
    raw["train"]["steps"] = 20
    return raw


@pytest.mark.parametrize("knob, message", [
    ({"key": "lr"}, "range"), ({"key": "lr", "low": 0.1, "high": 0.01}, "range"),
    ({"key": "beta2", "scale": "complement", "low": 0.9, "high": 1.0}, "outside scale")])
def test_a_knob_without_a_usable_range_is_named(knob, message):
    with pytest.raises(ConfigError, match=message):
        tuning_config(from_dict(_raw(knobs={"adamw": [knob]})))


def test_pair_knobs_only_for_optimizers_that_have_the_pair():
    raw = _raw(optimizers=["sgd"], knobs={"sgd": [{"key": "beta1", "low": 0.8, "high": 0.95, "scale": "complement"}]})
    raw["optimizers"]["sgd"] = {"type": "sgd", "lr": 0.1, "momentum": 0.9}
    with pytest.raises(ConfigError, match="not a setting"):
        tuning_config(from_dict(raw))


def test_tiny_quasi_random_tuning_writes_the_winner_of_the_smoothed_score(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(_raw(), sort_keys=False))
    out, table = tmp_path / "tuned.yaml", tmp_path / "tuning.md"
    assert main(["tune", "--config", str(config), "--out", str(out), "--table", str(table),
                 "--data-root", str(tmp_path / "data")]) == 0
    payload = json.loads(table.with_suffix(".json").read_text())
    trials = payload["trials"]
    assert len(trials) == 3 and all(len(t["seeds"]) == 3 for t in trials)  # no trial stopped early
    chosen = next(t for t in trials if t["chosen"])
    assert chosen["smoothed score"] == min(t["smoothed score"] for t in trials)
    tuned = yaml.safe_load(out.read_text())["tuned"]["vit-pre"]["adamw"]
    assert tuned["lr"] == chosen["lr"] and tuned["betas"] == chosen["betas"]
    assert 1e-3 <= tuned["lr"] <= 1e-2 and 0.9 <= tuned["betas"][1] <= 0.999
    # every knob of the winner near a face was probed beyond it, and the table says what the probe found
    chosen_row = payload["chosen"][0]
    assert all(p["status"] in ("inside", "edge") and p["knob"] in chosen_row["knobs"] for p in payload["probes"])
    assert "## Edge probes" in table.read_text()
