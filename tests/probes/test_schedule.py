from pathlib import Path

import pytest

from brownformer.config import ProbeConfig, load_config
from brownformer.probes import capture_schedule
from brownformer.probes.schedule import depth_subset, noise_captures

REPO = Path(__file__).resolve().parents[2]


def test_default_config_has_at_least_50_captures():
    cfg = load_config(REPO / "config" / "config.yaml")
    schedule = capture_schedule(cfg.probes, cfg.train.steps)
    assert len(schedule) >= 50
    assert schedule[0] == 0 and schedule[-1] == cfg.train.steps


@pytest.mark.parametrize("steps", [0, 1, 7, 100, 400, 10_000])
@pytest.mark.parametrize("log_points,linear_every", [(0, 5), (24, 12), (50, 1000)], ids=["linear", "default", "log"])
def test_schedule_properties(steps, log_points, linear_every):
    probes = ProbeConfig(log_points=log_points, linear_every=linear_every)
    schedule = capture_schedule(probes, steps)
    assert schedule == sorted(set(schedule))
    assert schedule[0] == 0 and schedule[-1] == steps
    assert all(0 <= s <= steps for s in schedule)
    assert set(range(0, steps + 1, linear_every)) <= set(schedule)
    if log_points and steps >= 4:
        assert {1, 2} <= set(schedule)  # short lags are covered


def test_negative_steps_rejected():
    with pytest.raises(ValueError, match="steps"):
        capture_schedule(ProbeConfig(), -1)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 9, 55])
def test_depth_subset_has_first_and_last(n):
    subset = depth_subset(n)
    assert len(subset) == min(n, 8)
    if n:
        assert subset[0] == 0 and subset[-1] == n - 1


def test_noise_captures_every_kth():
    assert noise_captures(25, 10) == [0, 10, 20]


@pytest.mark.parametrize("steps", [400, 2500])
def test_linear_points_fix_the_count_of_linear_captures_whatever_the_length(steps):
    schedule = capture_schedule(ProbeConfig(log_points=0, linear_points=16), steps)
    assert schedule == [round(steps * k / 16) for k in range(17)]
    # at 400 steps this is the every-25 grid
    if steps == 400:
        assert schedule == capture_schedule(ProbeConfig(log_points=0, linear_every=25), steps)
