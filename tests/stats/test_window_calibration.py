"""The calibration simulates the rule the verdict applies: the window exponent on the file's pre-fixed window."""
import json

import numpy as np
import pytest

from brownformer.config import DEFAULT_WINDOW, StatsConfig
from brownformer.stats.diffusion import rule
from brownformer.stats.diffusion.brownian import battery_batch
from brownformer.stats.core.calibration import run_calibration
from brownformer.stats.core.shapes import CalibrationShape
from brownformer.stats.diffusion.simulate import simulate_batch
from brownformer.stats_stage.run_stats import trajectory_file_stats

STATS = StatsConfig(n_resamples=99, window={**DEFAULT_WINDOW, "start_step": 10, "envelope_replicates": 19})
G, PER, D = 8, 4, 6
STEPS = [0, 2, 4, 6, 8, 10, 12, 14, 17, 20, 25, 30, 40, 50, 65, 80, 100, 130, 160, 200]


@pytest.fixture(scope="module")
def brownian_file(tmp_path_factory):
    labels = np.repeat(np.arange(G), PER)
    X = simulate_batch("brownian", times=np.asarray(STEPS, float), labels=labels, d=D, kind="euclidean",
                       replicates=1, rng=3, rho=0.2)[0]
    p = tmp_path_factory.mktemp("traj") / "tokens.npy"
    np.save(p, X)
    p.with_suffix(".json").write_text(json.dumps({"kind": "euclidean", "time": "step", "times": STEPS,
                                                  "n_inputs": G, "n_tokens": PER, "clocks": {"step": STEPS}}))
    return p, X, labels


def test_calibration_shape_carries_the_window_of_the_verdict(brownian_file):
    path, _, _ = brownian_file
    out = trajectory_file_stats(path, stats=STATS, min_lag_steps=5)
    shape = CalibrationShape.from_dict(out.calibration_shape)
    win = out.local_slopes.window
    assert shape.window is not None and shape.window.start == win.start_index == STEPS.index(10)
    assert list(shape.window.used) == win.used_indices
    assert all(STEPS[i] - 10 >= 5 for i in shape.window.used)  # lags shorter than the momentum time left out
    assert shape.id == out.calibration_shape.id


def test_calibrated_rule_is_the_verdict_rule(brownian_file, monkeypatch):
    """battery_batch at the file's shape hands the rule the very MSD effect the verdict rests on (window_effects),
    through the same function (window_reading.window_exponent), and reaches the same verdict."""
    path, X, labels = brownian_file
    out = trajectory_file_stats(path, stats=STATS, min_lag_steps=5)
    shape = CalibrationShape.from_dict(out.calibration_shape)
    seen = {}
    decide = rule.decide

    def spy(effects, **kw):
        seen.update(effects)
        return decide(effects, **kw)

    monkeypatch.setattr(rule, "decide", spy)
    bat = battery_batch(X[None], kind="euclidean", times=np.asarray(STEPS, float), labels=labels,
                        margins=dict(STATS.margins), alpha=STATS.alpha, drift="common", n_resamples=STATS.n_resamples,
                        rng=STATS.seed, window=shape.window)
    eff, data = seen["msd_exponent"], out.local_slopes.effect
    # equal up to float32 storage of the file (the data path reads it in float64)
    assert eff.estimate[0] == pytest.approx(data.estimate, rel=1e-6)
    assert [eff.tost_low[0], eff.tost_high[0]] == pytest.approx(list(data.tost_interval), rel=1e-6)
    assert bat.verdicts[0] == out.verdict


def test_windowed_and_full_range_rules_are_calibrated_apart():
    """The same Brownian shape with and without its window: two shapes (two ids), each simulated through its own
    MSD effect, so the table cites the size of the rule that issued the verdict."""
    labels = np.repeat(np.arange(G), PER)
    base = dict(kind="euclidean", times=tuple(np.asarray(STEPS, float) / STEPS[-1]), group_sizes=(PER,) * G, d=D,
                hyperplane=False, drift="common", rho=0.2, decay=0.0)
    X = simulate_batch("brownian", times=np.asarray(STEPS, float), labels=labels, d=D, kind="euclidean",
                       replicates=1, rng=3, rho=0.2)[0]
    from brownformer.stats.diffusion.local_slope import fitting_window
    from brownformer.stats.diffusion.window_reading import window_spec
    spec = window_spec(X, fitting_window(STEPS, STEPS, start_step=10, min_lag_steps=5), kind="euclidean", rho=0.2,
                       stats=STATS)
    full, windowed = CalibrationShape(**base), CalibrationShape(**base, window=spec)
    assert full.id != windowed.id
    table = run_calibration([full, windowed], n_replicates=40, rng=0, n_resamples=99, alternatives=False)
    est = table[table["test"] == "msd_exponent"].set_index("shape_id")["mean_estimate"]
    # the window exponent is bias-corrected to 1 on Brownian motion; both read near 1 but are different statistics
    assert est[windowed.id] == pytest.approx(1.0, abs=0.1) and est[full.id] == pytest.approx(1.0, abs=0.1)
    assert est[windowed.id] != est[full.id]


def test_stats_run_reads_each_runs_own_momentum_time(raw_config):
    """`brownformer stats run --config C --run R` resolves the window's shortest lag from R's own optimizer
    (stats.momentum_times x 1/(1 - beta)); an id the config cannot resolve gets no lag."""
    from brownformer.cli import _momentum_lag
    from brownformer.config import from_dict, momentum_steps
    cfg = from_dict(raw_config)
    for run in cfg.probed_runs():
        opt = cfg.optimizer_for(run.model, run.optimizer)
        expected = max(1, int(np.ceil(cfg.stats.momentum_times * momentum_steps(opt.type, opt.params) - 1e-9)))
        assert _momentum_lag(cfg, run.run_id) == expected
    assert _momentum_lag(cfg, "not-a-run") == 0 and _momentum_lag(None, "x__adamw__s0") == 0
