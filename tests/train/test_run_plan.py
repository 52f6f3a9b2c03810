"""ExperimentConfig.plan: one run resolved once (brownformer.config.plan), and training that reads only the plan."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from brownformer.config import ConfigError, ExperimentConfig, apply_overrides, from_dict, load_config
from brownformer.train import train_plan, train_run

ROOT = Path(__file__).resolve().parents[2]
#: run id -> run hash of every run of these configs by
#: {path: {r.run_id: load_config(path).run_hash(r.run_id) for r in (*cfg.runs(), *cfg.replica_runs())}}, recorded at
#: a3fff18 (before RunPlan existed) and again after the re-tune's `tuned:` block (2026-12-01; the same hashes as
#: the tuning branch's own per-run resolution gave for all 102 runs); vit-pre's K-FAC seed 0 again after it became
#: metrics-only and stopped at the target (2026-12-01, 4fb09c2); again after the fresh tuning (search seed 1) and
#: vit-post's AdamW seeds 6-7 probed (2026-12-06: 65 of 75 default runs retrain).
#: A config edit meant to retrain runs changes their hashes: record the file again then.
REFERENCE_HASHES = Path(__file__).parent / "data" / "run_hashes.json"
CONFIGS = ("config/config.yaml", "config/ci.yaml")


def _all_runs(cfg: ExperimentConfig) -> list[str]:
    return [r.run_id for r in (*cfg.runs(), *cfg.replica_runs())]


@pytest.mark.parametrize("path", CONFIGS)
def test_run_hash_unchanged_for_every_run(path):
    """A checkpoint resumes and a manifest reads as current only under the hash it was written with."""
    cfg, reference = load_config(ROOT / path), json.loads(REFERENCE_HASHES.read_text())[path]
    runs = _all_runs(cfg)
    assert set(runs) & set(reference), f"{path}: none of its runs is in {REFERENCE_HASHES.name}"
    changed = {r: (reference[r][:12], cfg.plan(r).run_hash[:12]) for r in runs
               if r in reference and cfg.plan(r).run_hash != reference[r]}
    assert not changed, f"{path}: run hashes differ from {REFERENCE_HASHES.name} (was, now): {changed}"


@pytest.mark.parametrize("path", CONFIGS)
def test_plan_holds_the_runs_settings(path):
    """Each field of every run's plan, against the config's sections read directly."""
    cfg = load_config(ROOT / path)
    for run_id in _all_runs(cfg):
        plan, spec = cfg.plan(run_id), cfg.run(run_id)
        blocks = [b for b in cfg.grid if run_id in {r.run_id for r in b.runs()}]
        assert plan.run_id == run_id and plan.model is cfg.models[spec.model]
        assert plan.dataset is cfg.datasets[plan.model.dataset] and plan.probes is cfg.probes
        assert plan.train.steps == (plan.model.steps or cfg.train.steps)
        assert plan.train.eval_every == min([b.eval_every or cfg.train.eval_every for b in blocks],
                                            default=cfg.train.eval_every)
        schedule = cfg.schedule_for(spec.model, spec.optimizer)  # the tuned warm-up and horizon, if any
        assert all(getattr(plan.train, key) == value for key, value in schedule.items())
        assert dataclasses.replace(plan.train, steps=cfg.train.steps, eval_every=cfg.train.eval_every,
                                   **{key: getattr(cfg.train, key) for key in schedule}) == cfg.train
        assert plan.seeds.init == spec.seed and plan.seeds.split == plan.dataset.split_seed
        assert plan.seeds.probes == cfg.probes.seed and plan.seeds.offset == cfg.seed_offset
        if spec.replica == 0:
            assert plan.seeds.data == spec.seed and plan.seeds.noise is None
        else:
            assert plan.seeds.data != spec.seed and plan.seeds.noise is not None
        if plan.probed:
            assert plan.stop_target is None
        assert plan.config_hash == cfg.hash


def test_plan_merges_the_tuned_settings(raw_config):
    raw_config["tuned"] = {"vit-pre": {"adamw": {"lr": 0.01, "weight_decay": 0.2}}}
    cfg = from_dict(raw_config)
    tuned, other = cfg.plan("vit-pre__adamw__s0").optimizer, cfg.plan("lm-pre__adamw__s0").optimizer
    assert (tuned.lr, tuned.params["weight_decay"]) == (0.01, 0.2)
    assert (other.lr, other.params["weight_decay"]) == (0.003, 0.01)  # config/ci.yaml's own adamw


def test_plan_of_a_run_outside_the_config_is_an_error(raw_config):
    cfg = from_dict(raw_config)
    with pytest.raises(ConfigError, match="not in the config's grid"):
        cfg.plan("lm-pre__kfac-iterative__s0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.plan("lm-pre__adamw__s0").probed = False


def test_training_asks_the_config_nothing_once_planned(raw_config, digits_dir, tmp_path, monkeypatch):
    """train_plan reads only the plan: with every per-run question of the config broken it trains as train_run does."""
    cfg = from_dict(apply_overrides(raw_config, ["train.steps=6", "train.eval_every=3", "train.log_every=3"]))
    run = "vit-pre__kfac-iterative__s0__r1"  # a replica: its own data and noise seeds
    expected = train_run(cfg, run, digits_dir, tmp_path / "by_config", probes=True, progress=False)
    plan = cfg.plan(run)
    for name in ("plan", "run", "optimizer_for", "tuned_for", "probed", "probed_runs", "replica_sets", "stop_target",
                 "eval_every", "run_slice", "run_hash", "dataset_of", "analysis_window"):
        monkeypatch.setattr(ExperimentConfig, name, lambda *a, _n=name, **k: pytest.fail(f"asked the config {_n}"))
    monkeypatch.setattr(ExperimentConfig, "hash", property(lambda self: pytest.fail("asked the config its hash")))
    metrics = train_plan(plan, digits_dir, tmp_path / "by_plan", probes=True, progress=False)
    cols = [c for c in expected.columns if "time" not in c and not c.endswith("_per_s")]
    pd.testing.assert_frame_equal(expected[cols], metrics[cols], check_exact=True)
    assert json.loads((tmp_path / "by_plan" / "manifest.json").read_text())["seeds"] == plan.seeds.manifest()
