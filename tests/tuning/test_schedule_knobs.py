"""Warm-up and the schedule's horizon as knobs per (model, optimizer): a `tuned` entry's `warmup_steps` and
`horizon` reach the train settings of that pair's runs only (config_tuned.SCHEDULE_KEYS), the schedule honours
them, bad values are named, and the quasi-random search draws them as step counts inside their ranges."""
from __future__ import annotations

import math

import pytest

from brownformer.config import ConfigError, TrainConfig, apply_overrides, from_dict
from brownformer.train import lr_factor, train_run
from brownformer.tuning.quasi_random import halton_points, unit_to_value
from brownformer.tuning.space import Knob, tuning_config

RUN, OTHER = "vit-pre__adamw__s0", "vit-pre__kfac-iterative__s0"


def _tuned(raw, *settings):
    return from_dict(apply_overrides(raw, ["tuned={}", *(f"tuned.vit-pre.adamw.{s}" for s in settings)]))


def test_the_cosine_reaches_its_floor_at_the_horizon_and_stays_there():
    floor = 0.1
    cfg = TrainConfig(steps=100, batch_size=1, warmup_steps=10, min_lr_ratio=floor, horizon=40)
    f = [lr_factor(s, cfg) for s in range(100)]
    assert f[9] == pytest.approx(1.0)
    # half-way through the cosine (step 25 of 10..40) the factor is half-way between the peak and the floor
    assert f[25] == pytest.approx(floor + (1 - floor) / 2)
    assert f[40:] == pytest.approx([floor] * 60)
    assert all(a > b for a, b in zip(f[10:40], f[11:41]))
    # a horizon past the budget: the run ends before the floor, on the cosine through (steps 10..200)
    long = TrainConfig(steps=100, batch_size=1, warmup_steps=10, min_lr_ratio=floor, horizon=200)
    progress = (99 - 10) / (200 - 10)
    assert lr_factor(99, long) == pytest.approx(floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
    # no horizon: the floor at the run's steps, as before
    plain = TrainConfig(steps=100, batch_size=1, warmup_steps=10, min_lr_ratio=floor)
    assert [lr_factor(s, plain) for s in range(101)] == [lr_factor(s, TrainConfig(
        steps=100, batch_size=1, warmup_steps=10, min_lr_ratio=floor, horizon=100)) for s in range(101)]


def test_a_tuned_schedule_reaches_its_pairs_runs_only(raw_config):
    cfg = _tuned(raw_config, "warmup_steps=3", "horizon=30", "lr=0.002")
    base = _tuned(raw_config)
    run = cfg.plan(RUN).train
    assert (run.warmup_steps, run.horizon, run.steps) == (3, 30, base.train.steps)  # it still trains train.steps
    assert cfg.plan(OTHER).train == base.plan(OTHER).train  # another optimizer of the model: untouched
    opt = cfg.optimizer_for("vit-pre", "adamw")
    assert opt.lr == 0.002 and not {"warmup_steps", "horizon"} & set(opt.params)  # never an optimizer argument
    assert cfg.run_hash(RUN) != base.run_hash(RUN) and cfg.run_hash(OTHER) == base.run_hash(OTHER)
    assert cfg.analysis_window(RUN).start_step >= 3
    assert cfg.tuned_for("vit-pre", "adamw").settings() == {"lr": 0.002, "warmup_steps": 3, "horizon": 30}


def test_a_run_trains_on_its_tuned_schedule(raw_config, digits_dir, tmp_path):
    steps, horizon = 24, 12
    cfg = from_dict(apply_overrides(raw_config, [
        f"train.steps={steps}", "train.eval_every=12", "train.log_every=2", "train.checkpoint_every=12", "tuned={}",
        "tuned.vit-pre.adamw.warmup_steps=2", f"tuned.vit-pre.adamw.horizon={horizon}"]))
    metrics = train_run(cfg, RUN, digits_dir, tmp_path / RUN, progress=False)
    peak = cfg.optimizer_for("vit-pre", "adamw").lr
    rows = metrics.dropna(subset=["lr"])
    assert int(rows["step"].iat[-1]) == steps  # the horizon does not shorten the run
    late = rows[rows["step"] > horizon + 1]["lr"].to_numpy()  # a row's lr is the last step's it logs
    assert len(late) and late == pytest.approx(peak * cfg.train.min_lr_ratio)
    assert rows[rows["step"] <= horizon]["lr"].max() > peak * cfg.train.min_lr_ratio * 2


@pytest.mark.parametrize("settings, message", [
    (["warmup_steps=30", "horizon=30"], r"tuned\.vit-pre\.adamw\.warmup_steps': warm-up 30 must end before"),
    (["warmup_steps=100"], r"warm-up 100 must end before the schedule's horizon 60"),  # ci's 60 steps
    (["warmup_steps=-1"], r"tuned\.vit-pre\.adamw\.warmup_steps"),
    (["horizon=0"], r"tuned\.vit-pre\.adamw\.horizon"),
    (["horizon=2.5"], r"tuned\.vit-pre\.adamw\.horizon"),
])
def test_a_bad_schedule_is_named(raw_config, settings, message):
    with pytest.raises(ConfigError, match=message):
        _tuned(raw_config, *settings)


def test_the_schedule_is_not_an_optimizer_setting(raw_config):
    with pytest.raises(ConfigError, match=r"optimizers\.adamw"):
        from_dict(apply_overrides(raw_config, ["optimizers.adamw.horizon=30"]))


def test_train_may_set_a_horizon_for_every_run(raw_config):
    cfg = from_dict(apply_overrides(raw_config, ["train.horizon=40"]))
    assert cfg.plan(RUN).train.horizon == 40
    with pytest.raises(ConfigError, match=r"'train\.warmup_steps': warm-up 5 must end before .* horizon 4\b"):
        from_dict(apply_overrides(raw_config, ["train.horizon=4"]))


def _tuning(raw, knobs, method="quasi-random"):
    raw = apply_overrides(raw, [])
    raw["tuning"] = {"seeds": [100, 101, 102], "models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"],
                     "method": method, "trials": 4, "knobs": {"adamw": knobs, "kfac-iterative": knobs}}
    raw.setdefault("report", {})["targets"] = {"vit-pre": 0.5}
    return tuning_config(from_dict(raw))


WARMUP = {"key": "warmup_steps", "scale": "linear", "low": 0, "high": 50}
HORIZON = {"key": "horizon", "scale": "log", "low": 200, "high": 800}


def test_every_optimizer_may_search_the_schedule_as_step_counts(raw_config):
    tc = _tuning(raw_config, [{"key": "lr", "low": 1e-3, "high": 1e-1}, WARMUP, HORIZON])
    for optimizer in ("adamw", "kfac-iterative"):
        _, warmup, horizon = tc.knobs[optimizer]
        for u in halton_points(3, 16, 0):
            w, h = unit_to_value(warmup, float(u[1])), unit_to_value(horizon, float(u[2]))
            assert isinstance(w, int) and isinstance(h, int) and 0 <= w <= 50 and 200 <= h <= 800
    assert unit_to_value(Knob(**HORIZON), 0.5) == 400  # log-uniform: the middle is the 400-step budget's schedule
    assert unit_to_value(Knob(**WARMUP), 1.0) == 50 and unit_to_value(Knob(**WARMUP), 0.0) == 0


def test_the_coordinate_search_does_not_take_schedule_knobs(raw_config):
    with pytest.raises(ConfigError, match="warmup_steps is searched by the quasi-random method only"):
        _tuning(raw_config, [{"key": "warmup_steps", "step": 2.0}], method="coordinate")
