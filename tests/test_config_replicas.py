"""The `replicas:` block and the training-time analysis window (momentum time)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from brownformer.config import AnalysisWindow, ConfigError, from_dict, momentum_steps

ROOT = Path(__file__).resolve().parents[1]


def _raw(**replace):
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw.update(copy.deepcopy(replace))
    return raw


def test_replica_runs_share_the_seed_and_not_the_data_order():
    cfg = from_dict(_raw())
    sets = cfg.replica_sets()
    assert list(sets) == ["vit-pre__kfac-iterative__s0"]
    reps = sets["vit-pre__kfac-iterative__s0"]
    assert [r.replica for r in reps] == [0, 1, 2, 3] and reps[0].run_id == "vit-pre__kfac-iterative__s0"
    assert {r.seed for r in reps} == {0} and len({r.data_seed for r in reps}) == 4
    assert [r.run_id for r in cfg.replica_runs()] == [r.run_id for r in reps[1:]]
    assert all(cfg.probed(r.run_id) and cfg.run(r.run_id) == r for r in reps[1:])
    assert not set(r.run_id for r in reps[1:]) & {r.run_id for r in cfg.runs()}  # never pooled as seeds


@pytest.mark.parametrize("block, named", [
    ({"models": ["vit-big"], "optimizers": ["adamw"], "count": 4}, "replicas.0.models"),
    ({"models": ["vit-pre"], "optimizers": ["adamw"], "count": 3}, "replicas.0.count"),
])
def test_bad_replica_blocks_name_the_problem(block, named):
    with pytest.raises(ConfigError, match=named):
        from_dict(_raw(replicas=[block]))


def test_replica_zero_outside_the_grid_trains_as_an_extra_probed_run():
    raw = _raw(replicas=[{"models": ["lm-pre"], "optimizers": ["kfac-iterative"], "count": 4}])
    cfg = from_dict(raw)
    extra = [r.run_id for r in cfg.replica_runs()]
    assert extra[0] == "lm-pre__kfac-iterative__s0" and len(extra) == 4 and all(cfg.probed(r) for r in extra)
    raw["grid"][1]["probes"] = False  # lm-pre__adamw__s0 metrics-only in the grid, yet replica 0 of a set
    cfg = from_dict({**raw, "replicas": [{"models": ["lm-pre"], "optimizers": ["adamw"], "count": 4}]})
    assert cfg.probed("lm-pre__adamw__s0") and "lm-pre__adamw__s0" not in [r.run_id for r in cfg.replica_runs()]
    assert "lm-pre__adamw__s0" not in [r.run_id for r in cfg.probed_runs()]  # no per-run statistics of its own


def test_momentum_time_per_optimizer():
    assert momentum_steps("adamw", {}) == pytest.approx(10.0)
    assert momentum_steps("adamw", {"betas": (0.5, 0.999)}) == pytest.approx(2.0)
    assert momentum_steps("sgd", {}) == pytest.approx(1.0) and momentum_steps("sgd", {"momentum": 0.9}) == pytest.approx(10)
    assert momentum_steps("muon", {}) == pytest.approx(20.0)
    assert momentum_steps("kfac-iterative", {"momentum": 0.0}) == pytest.approx(10.0)  # its AdamW half keeps beta1 0.9


def test_kfac_momentum_time_is_its_own_default_without_an_adamw_half():
    """K-FAC's heavy-ball default is read from the optimizer (not a restated 0.9); with SGD for the parameters it does
    not precondition, the window's lag is that momentum's time alone."""
    from brownformer.optim.kfac import DEFAULT_MOMENTUM
    assert momentum_steps("kfac-iterative", {"rest_update": "sgd"}) == pytest.approx(1 / (1 - DEFAULT_MOMENTUM))
    assert momentum_steps("kfac-eigen", {"rest_update": "sgd", "momentum": 0.8}) == pytest.approx(5.0)


def test_window_starts_after_warmup_and_momentum_and_spaces_captures():
    cfg = from_dict(_raw(stats={"momentum_times": 2.0}))
    w = cfg.analysis_window("vit-pre__kfac-iterative__s0")
    assert w == AnalysisWindow(start_step=20, min_gap=20, momentum_steps=pytest.approx(10.0))
    steps = [0, 1, 5, 19, 20, 25, 39, 40, 41, 70, 90]
    kept = [steps[i] for i in w.select(steps)]
    assert kept == [20, 40, 70, 90]
    assert AnalysisWindow(3, 1, 1.0).select([0, 1, 2, 3, 4]) == [3, 4]
