"""The default config's claim-4 protocol (issue 31), as the config states it before the evaluation: every model of
`report.scope` trains the proposed optimizer and every baseline on at least MIN_SEEDS seeds, evaluated often enough,
and the tuning gives every optimizer it tunes the same trials and the same schedule knobs."""
from __future__ import annotations

from pathlib import Path

from brownformer.config import load_config
from brownformer.config.tuned import SCHEDULE_KEYS
from brownformer.stats.comparison.time_to_target import MAX_EVAL_EVERY, MIN_SEEDS
from brownformer.tuning.space import tuning_config

DEFAULT = Path(__file__).resolve().parents[2] / "config" / "config.yaml"


def test_every_scope_model_runs_every_compared_optimizer_on_enough_seeds():
    cfg = load_config(DEFAULT)
    pairs = cfg.pair_seeds()
    # SGD is a baseline or screened out at tuning (report.screened_baselines), never dropped silently
    assert len(cfg.report.scope) >= 2 and "sgd" in (*cfg.report.baselines, *cfg.report.screened_baselines)
    for model in cfg.report.scope:
        for optimizer in (cfg.report.proposed, *cfg.report.baselines):
            seeds = pairs.get((model, optimizer), ())
            assert len(set(seeds)) >= MIN_SEEDS, (model, optimizer, seeds)
            assert all(cfg.eval_every(f"{model}__{optimizer}__s{s}") <= MAX_EVAL_EVERY for s in seeds)


def test_the_tuning_searches_the_same_schedule_for_every_optimizer_it_tunes():
    cfg = load_config(DEFAULT)
    tc = tuning_config(cfg)
    # a screened baseline was tuned like the others: screening reads its tuning runs
    assert set(tc.optimizers) >= {cfg.report.proposed, *cfg.report.baselines, *cfg.report.screened_baselines}
    assert set(tc.models) >= set(cfg.report.scope)
    schedules = {o: {k.key: (k.scale, k.low, k.high) for k in tc.knobs[o] if k.key in SCHEDULE_KEYS}
                 for o in tc.optimizers}
    first = next(iter(schedules.values()))
    assert set(first) == set(SCHEDULE_KEYS) and all(s == first for s in schedules.values()), schedules
    assert len(tc.seeds) >= 3


def test_a_screened_baseline_trains_no_evaluation_run():
    cfg = load_config(DEFAULT)
    pairs = cfg.pair_seeds()
    for model in cfg.report.scope:
        for optimizer in cfg.report.screened_baselines:
            assert not pairs.get((model, optimizer)), (model, optimizer)
