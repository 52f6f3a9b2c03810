"""`seed_offset`: one key shifts every seed the runs use; offset 0 is the config as it always was."""
from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import torch

from brownformer.config import ConfigError, RunSpec, apply_overrides, from_dict
from brownformer.data import load_prepared, probe_inputs, sample_batch
from brownformer.train import model_for_data, train_run

OFFSET = 1000


def _with_offset(raw, offset):
    raw = copy.deepcopy(raw)
    raw["seed_offset"] = offset
    return from_dict(raw)


def test_offset_zero_is_the_config_without_the_key(raw_config):
    before, after = from_dict(raw_config), _with_offset(raw_config, 0)
    assert [r.run_id for r in after.runs()] == [r.run_id for r in before.runs()]
    assert after.replica_sets() == before.replica_sets() and after.probes == before.probes
    for spec in (*before.runs(), *before.replica_runs()):  # the same slices: no run of a results folder retrains
        assert after.run_slice(spec.run_id) == before.run_slice(spec.run_id)
        assert after.run_hash(spec.run_id) == before.run_hash(spec.run_id)


def test_offset_shifts_grid_replica_and_probe_seeds_and_run_ids(raw_config):
    raw_config["grid"][0]["seeds"] = [0, 2]  # a block's own seeds shift too, not only the top-level ones
    base, cfg = from_dict(raw_config), _with_offset(raw_config, OFFSET)
    assert cfg.seed_offset == OFFSET and cfg.seeds == tuple(s + OFFSET for s in base.seeds)
    assert [r.seed - OFFSET for r in cfg.runs()] == [r.seed for r in base.runs()]
    assert "vit-pre__adamw__s1000" in {r.run_id for r in cfg.runs()}
    assert {r.run_id for r in cfg.runs()}.isdisjoint(r.run_id for r in base.runs())  # two offsets never collide
    assert cfg.probes.seed == base.probes.seed + OFFSET
    assert cfg.run_slice("vit-pre__adamw__s1000")["probes"]["seed"] == base.probes.seed + OFFSET
    (shifted_set,), (base_set,) = cfg.replica_sets().values(), base.replica_sets().values()
    assert [r.seed for r in shifted_set] == [r.seed + OFFSET for r in base_set]
    assert {r.data_seed for r in shifted_set[1:]}.isdisjoint(r.data_seed for r in base_set[1:])
    with pytest.raises(ConfigError, match="not in the config"):
        cfg.run("vit-pre__adamw__s0")  # the unshifted run is not part of the shifted study


def test_a_negative_offset_is_rejected_naming_the_key(raw_config):
    raw_config["seed_offset"] = -1
    with pytest.raises(ConfigError, match="key 'seed_offset'"):
        from_dict(raw_config)


def test_the_tuning_trials_keep_their_own_seeds(raw_config):
    from brownformer.tuning.trial import trial_config
    raw_config["seed_offset"] = OFFSET
    cfg = trial_config(raw_config, "vit-pre", "adamw", {}, 100, 5)
    assert [r.run_id for r in cfg.runs()] == ["vit-pre__adamw__s100"]


def test_two_offsets_give_other_inits_data_orders_and_probe_inputs(raw_config, digits_dir):
    data = load_prepared(digits_dir)
    base, cfg = from_dict(raw_config), _with_offset(raw_config, OFFSET)
    drawn = {}
    for c in (base, cfg):
        spec = c.runs()[0]
        torch.manual_seed(spec.seed)  # as train_run seeds the initialisation
        weights = torch.cat([p.detach().flatten() for p in model_for_data(c, spec.model, data).parameters()])
        x, _ = sample_batch(data, "train", step=0, seed=spec.data_seed, batch_size=8)
        drawn[c.seed_offset] = weights, x, probe_inputs(data, n=4, seed=c.probes.seed)
    for a, b in zip(drawn[0], drawn[OFFSET]):
        assert not torch.equal(a, b)


def test_offset_zero_trains_bit_identically(raw_config, digits_dir, tmp_path):
    overrides = ["train.steps=10", "train.eval_every=5", "train.log_every=5"]
    run = "vit-pre__adamw__s0"
    plain = train_run(from_dict(apply_overrides(raw_config, overrides)), run, digits_dir, tmp_path / "a", progress=False)
    zero = train_run(from_dict(apply_overrides(raw_config, [*overrides, "seed_offset=0"])), run, digits_dir,
                     tmp_path / "b", progress=False)
    cols = ["step", "train_loss", "val_loss", "val_accuracy"]
    pd.testing.assert_frame_equal(plain[cols], zero[cols], check_exact=True)
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["seeds"]["offset"] == 0  # the manifest says it


def test_the_default_config_probes_five_seeds_of_every_model_and_batches_them():
    """Issue 32: claims 1-3 over >= 5 seeds of each model variant; AdamW's replicas of 3b/3c over >= 5 seeds."""
    from pathlib import Path

    from brownformer.config import load_config
    from brownformer.config.ensembles import ensembles
    cfg = load_config(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
    probed = {}
    for r in cfg.probed_runs():
        probed.setdefault(r.model, set()).add(r.seed)
    assert set(probed) == set(cfg.models) and all(len(seeds) >= 5 for seeds in probed.values()), probed
    replica_seeds = {RunSpec.parse(base).seed for base in cfg.replica_sets() if "__adamw__" in base}
    assert len(replica_seeds) >= 5
    batched = {run for e in ensembles(cfg) for run in e.runs}
    # claim 4 times the grid runs of a model with a target on which the proposed optimizer also trains
    timed = {r.run_id for r in cfg.runs() if r.model in cfg.report.targets and r.replica == 0
             and (r.model, cfg.report.proposed) in cfg.pair_seeds()}
    assert {RunSpec.parse(t).model for t in timed} == set(cfg.report.scope)
    assert all(r.run_id in batched for r in cfg.probed_runs() if r.optimizer == "adamw" and r.run_id not in timed)
    assert not timed & batched  # claim 4 compares their wall-clock: each trains alone
    assert {r.run_id for reps in cfg.replica_sets().values() for r in reps[1:] if r.optimizer == "adamw"} <= batched
