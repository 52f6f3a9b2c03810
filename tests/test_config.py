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
    assert len(cfg.seeds) >= 2


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
