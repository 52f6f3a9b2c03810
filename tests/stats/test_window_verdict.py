"""One trajectory's verdict is decided once, on the window, and its record is what the readers parse back."""
import numpy as np
import pytest

from brownformer.config import DEFAULT_STATS
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery
from brownformer.stats.diffusion.rule import decide_one
from brownformer.stats.diffusion.window_reading import window_effects
from brownformer.stats.diffusion.window_verdict import trajectory_result
from brownformer.statsfile import BatteryStats, parse_stats_file

T, N, D, G = 24, 64, 4, 8
META = {"kind": "euclidean", "times": list(range(T)), "groups": [i % G for i in range(N)]}


@pytest.fixture(scope="module", params=["brownian", "ballistic"])
def walk(request):
    rng = np.random.default_rng(3)
    steps = rng.standard_normal((T, N, D))
    if request.param == "ballistic":  # a constant velocity per walker: exponent 2, never Brownian
        steps = np.broadcast_to(rng.standard_normal((1, N, D)), (T, N, D)) + 0.05 * steps
    X = np.cumsum(steps, 0)
    return request.param, X, trajectory_result(X, META, stats=DEFAULT_STATS)


def test_the_written_record_is_what_a_reader_parses(walk):
    *_, record = walk
    written = to_jsonable(record)
    parsed = parse_stats_file({**written, "category": "training"})
    assert isinstance(parsed, BatteryStats)
    assert {**to_jsonable(parsed), "category": None} == {**written, "category": None}


def test_the_verdict_rests_on_the_window_and_the_full_range_one_is_kept(walk):
    _, X, record = walk
    assert record.decision.verdict == record.verdict and record.brownian == (record.verdict == "brownian")
    # the claims re-apply the rule to the file as written (window_effects on its JSON): the same verdict
    written = to_jsonable(record)
    again, _ = decide_one(window_effects(written), kind="euclidean", margins=dict(DEFAULT_STATS.margins),
                          alpha=DEFAULT_STATS.alpha, n_times=record.n_times, n_groups=record.n_groups)
    assert again == record.verdict
    full = to_jsonable(trajectory_battery(X, kind="euclidean", times=META["times"], groups=META["groups"],
                                          n_resamples=DEFAULT_STATS.n_resamples, rng=DEFAULT_STATS.seed))
    assert record.verdict_full_range == full["verdict"] and record.reason_full_range == full["reason"]
    assert record.calibration_shape.window == record.local_slopes.spec  # the calibration simulates this rule


def test_the_window_exponent_tells_brownian_from_ballistic_motion(walk):
    name, _, record = walk
    if name == "ballistic":
        assert record.verdict == "not brownian" and record.classification == "superdiffusive", record.reason
    else:
        assert record.local_slopes.effect.estimate == pytest.approx(1.0, abs=0.15) and record.verdict != "not brownian"
