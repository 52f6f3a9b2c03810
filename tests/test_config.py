"""Config loading: schema errors name the key; cross-references; defaults; overrides; hashes."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from brownformer.config import ConfigError, RunSpec, apply_overrides, from_dict, load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["config.yaml", "ci.yaml", "paper.yaml"])
def test_shipped_configs_validate(name):
    cfg = load_config(ROOT / "config" / name)
    assert cfg.runs(), "the grid must define at least one run"
    for spec in cfg.runs():
        assert cfg.run(spec.run_id) == spec


def test_default_config_meets_the_issue():
    cfg = load_config(ROOT / "config" / "config.yaml")
    archs = {(m.arch, m.ln) for m in cfg.models.values()}
    assert {("vit", "pre"), ("vit", "post"), ("lm", "pre")} <= archs
    types = {o.type for o in cfg.optimizers.values()}
    assert {"sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"} <= types
    # seed bands: some pair of the grid runs several seeds (claim 4's pair: 8; the other models one each)
    assert max(len(seeds) for seeds in cfg.pair_seeds().values()) >= 2


BAD = [
    ("optimizers.adamw.type", "adamx", "optimizers.adamw.type"),
    ("optimizers.adamw.lr", -0.1, "optimizers.adamw.lr"),
    ("train.steps", "many", "train.steps"),
    ("models.vit-pre.ln", "middle", "models.vit-pre.ln"),
    ("models.vit-pre.n_heads", 3, "models.vit-pre.n_heads"),
    ("models.vit-pre.dataset", "mnist", "models.vit-pre.dataset"),
    ("train.unknown_key", 1, "train"),
]


@pytest.mark.parametrize("key,value,named", BAD, ids=[b[0] + "=" + str(b[1]) for b in BAD])
def test_bad_values_name_the_key(raw_config, key, value, named):
    raw = apply_overrides(raw_config, [f"{key}={value}"])
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        from_dict(raw)


def test_missing_key_is_named(raw_config):
    del raw_config["train"]["steps"]
    with pytest.raises(ConfigError, match="steps"):
        from_dict(raw_config)


def test_unknown_grid_entry(raw_config):
    raw_config["grid"][0]["optimizers"].append("lion")
    with pytest.raises(ConfigError, match=r"grid\.0\.optimizers.*lion"):
        from_dict(raw_config)


def test_defaults_filled_and_hash_stable(raw_config):
    a, b = from_dict(raw_config), from_dict(raw_config)
    assert a.hash == b.hash
    assert a.train.min_lr_ratio == 0.1  # schema default
    changed = from_dict(apply_overrides(raw_config, ["stats.n_resamples=199"]))
    assert changed.hash != a.hash
    run = a.runs()[0].run_id
    assert changed.run_hash(run) == a.run_hash(run), "stats keys must not invalidate training"
    retrained = from_dict(apply_overrides(raw_config, ["train.steps=61"]))
    assert retrained.run_hash(run) != a.run_hash(run)


def test_run_ids_round_trip():
    spec = RunSpec("vit-pre", "kfac-iterative", 3)
    assert RunSpec.parse(spec.run_id) == spec
    with pytest.raises(ConfigError):
        RunSpec.parse("nonsense")


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [0\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def _run_ids(cfg) -> list[str]:
    return [r.run_id for r in cfg.runs()]


def test_block_seeds_replace_the_top_level_seeds(raw_config):
    raw_config["seeds"] = [0, 1]
    raw_config["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"], "seeds": [7, 3]},
                          {"models": ["lm-pre"], "optimizers": ["adamw"]}]
    cfg = from_dict(raw_config)
    assert _run_ids(cfg) == ["vit-pre__adamw__s7", "vit-pre__adamw__s3", "vit-pre__kfac-iterative__s7",
                             "vit-pre__kfac-iterative__s3", "lm-pre__adamw__s0", "lm-pre__adamw__s1"]
    assert cfg.pair_seeds() == {("vit-pre", "adamw"): (7, 3), ("vit-pre", "kfac-iterative"): (7, 3),
                                ("lm-pre", "adamw"): (0, 1)}
    with pytest.raises(ConfigError, match="not in the config's grid"):
        cfg.run("vit-pre__adamw__s0")  # a top-level seed, but not one of this block's


def test_block_eval_every_overrides_train_eval_every_smallest_wins(raw_config):
    raw_config["seeds"] = [0]
    raw_config["train"]["eval_every"] = 25
    raw_config["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"]},
                          {"models": ["vit-pre"], "optimizers": ["adamw"], "eval_every": 5},
                          {"models": ["vit-pre"], "optimizers": ["adamw"], "eval_every": 10}]
    cfg = from_dict(raw_config)
    assert cfg.eval_every("vit-pre__adamw__s0") == 5 and cfg.eval_every("vit-pre__kfac-iterative__s0") == 25
    assert cfg.plan("vit-pre__adamw__s0").train.eval_every == 5
    assert cfg.plan("vit-pre__kfac-iterative__s0").train.eval_every == 25
    # the evaluation schedule shapes the metrics: it is part of the run's hash
    other = dict(raw_config, grid=[{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"]}])
    assert from_dict(other).run_hash("vit-pre__adamw__s0") != cfg.run_hash("vit-pre__adamw__s0")
    assert from_dict(other).run_hash("vit-pre__kfac-iterative__s0") == cfg.run_hash("vit-pre__kfac-iterative__s0")
    raw_config["grid"][1]["eval_every"] = 0
    with pytest.raises(ConfigError, match="grid.1.eval_every"):
        from_dict(raw_config)


def test_overlapping_blocks_give_each_run_once_in_first_seen_order(raw_config):
    raw_config["seeds"] = [0, 1]
    raw_config["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"]},
                          {"models": ["vit-pre"], "optimizers": ["kfac-iterative", "adamw"], "seeds": [1, 2]}]
    cfg = from_dict(raw_config)
    assert _run_ids(cfg) == ["vit-pre__adamw__s0", "vit-pre__adamw__s1", "vit-pre__kfac-iterative__s0",
                             "vit-pre__kfac-iterative__s1", "vit-pre__kfac-iterative__s2", "vit-pre__adamw__s2"]
    assert cfg.pair_seeds() == {("vit-pre", "adamw"): (0, 1, 2), ("vit-pre", "kfac-iterative"): (0, 1, 2)}


def test_more_seeds_for_one_block_do_not_retrain_the_other_runs(raw_config):
    base = from_dict(raw_config)
    raw_config["grid"].append({"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0, 1, 2, 3, 4]})
    more = from_dict(raw_config)
    assert set(_run_ids(more)) - set(_run_ids(base)) == {f"vit-pre__adamw__s{s}" for s in (1, 2, 3, 4)}
    for run in _run_ids(base):
        assert more.run_hash(run) == base.run_hash(run)


@pytest.mark.parametrize("seeds", [[-1], ["a"], [1.5], [], 3], ids=["negative", "string", "float", "empty", "scalar"])
def test_bad_block_seeds_are_rejected_naming_the_key(raw_config, seeds):
    raw_config["grid"][1]["seeds"] = seeds
    with pytest.raises(ConfigError, match=r"key 'grid\.1\.seeds"):
        from_dict(raw_config)


def _probed_ids(cfg) -> list[str]:
    return [r.run_id for r in cfg.probed_runs()]


def test_a_metrics_only_block_is_probed_only_where_another_block_probes_its_runs(raw_config):
    raw_config["seeds"] = [0, 1]
    raw_config["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"]},
                          {"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"], "seeds": [0, 1, 2, 3],
                           "probes": False},
                          {"models": ["lm-pre"], "optimizers": ["adamw"], "probes": False}]
    cfg = from_dict(raw_config)
    # seeds 0 and 1 of vit-pre are named by the first (probed) block too; seeds 2, 3 and lm-pre only by metrics-only ones
    assert _probed_ids(cfg) == ["vit-pre__adamw__s0", "vit-pre__adamw__s1", "vit-pre__kfac-iterative__s0",
                                "vit-pre__kfac-iterative__s1"]
    assert set(_probed_ids(cfg)) <= set(_run_ids(cfg)) and len(_run_ids(cfg)) == 10
    for run in _run_ids(cfg):
        assert cfg.probed(run) == (run in _probed_ids(cfg))
    assert [b.probes for b in cfg.grid] == [True, False, False]


def test_block_order_does_not_decide_whether_a_run_is_probed(raw_config):
    raw_config["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw"], "probes": False},
                          {"models": ["vit-pre"], "optimizers": ["adamw"]}]
    assert _probed_ids(from_dict(raw_config)) == ["vit-pre__adamw__s0"]


def test_probes_disabled_leaves_every_run_metrics_only(raw_config):
    raw_config["probes"]["enabled"] = False
    cfg = from_dict(raw_config)
    assert cfg.probed_runs() == [] and not cfg.probed(_run_ids(cfg)[0])


def test_metrics_only_seeds_do_not_change_the_other_runs_hashes(raw_config):
    base = from_dict(raw_config)
    raw_config["grid"].append({"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0, 1, 2], "probes": False})
    more = from_dict(raw_config)
    assert _probed_ids(more) == _probed_ids(base) == _run_ids(base)
    for run in _run_ids(base):
        assert more.run_hash(run) == base.run_hash(run)


def test_a_run_that_stops_capturing_probes_gets_a_new_hash(raw_config):
    base = from_dict(raw_config)
    run = _run_ids(base)[0]
    for block in raw_config["grid"]:
        block["probes"] = False
    metrics_only = from_dict(raw_config)
    assert not metrics_only.probed(run) and metrics_only.run_hash(run) != base.run_hash(run)


def test_block_probes_defaults_to_true_through_the_schema(raw_config):
    cfg = from_dict(raw_config)
    assert all(b["probes"] is True for b in cfg.raw["grid"]) and _probed_ids(cfg) == _run_ids(cfg)


@pytest.mark.parametrize("value", ["no", 0, None, [False]], ids=["string", "int", "null", "list"])
def test_non_boolean_block_probes_is_rejected_naming_the_key(raw_config, value):
    raw_config["grid"][0]["probes"] = value
    with pytest.raises(ConfigError, match=r"key 'grid\.0\.probes"):
        from_dict(raw_config)


def test_a_baseline_both_evaluated_and_screened_is_an_error(raw_config):
    raw_config.setdefault("report", {}).update(baselines=["adamw", "sgd"], screened_baselines=["sgd"])
    with pytest.raises(ConfigError, match=r"report\.screened_baselines.*sgd"):
        from_dict(raw_config)
