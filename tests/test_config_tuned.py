"""The `tuned:` block, typed (brownformer.config.tuned): model -> optimizer -> TunedConfig, validated by the schema
and the registry, and written back in the config's own spelling."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from brownformer.config import ConfigError, TunedConfig, apply_overrides, from_dict, load_config
from brownformer.config.tuned import read_tuned, tuned_settings

DEFAULT = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


def _plain(block: dict) -> dict:
    """YAML's reading of a block (tuples as lists), for comparing with what a config holds."""
    return yaml.safe_load(yaml.safe_dump(block))


def test_the_default_configs_tuned_block_is_typed_per_model_and_optimizer():
    raw = yaml.safe_load(DEFAULT.read_text())
    cfg = load_config(DEFAULT)
    assert set(cfg.tuned) == set(raw["tuned"])
    for model, per_opt in raw["tuned"].items():
        assert set(cfg.tuned[model]) == set(per_opt)
        for name, settings in per_opt.items():
            entry = cfg.tuned[model][name]
            assert isinstance(entry, TunedConfig) and (entry.model, entry.optimizer) == (model, name)
            assert entry.lr == settings.get("lr")
            assert cfg.tuned_for(model, name) is entry


def test_written_back_the_block_reads_as_the_config_wrote_it():
    raw = yaml.safe_load(DEFAULT.read_text())["tuned"]
    assert _plain(tuned_settings(read_tuned(raw))) == raw
    assert read_tuned(None) == {} and tuned_settings({}) == {}


def test_a_tuned_entry_overrides_only_the_keys_it_names(raw_config):
    model, name = next(iter(raw_config["models"])), next(iter(raw_config["optimizers"]))
    cfg = from_dict(apply_overrides(raw_config, ["tuned={}", f"tuned.{model}.{name}.lr=0.5"]))
    base = from_dict(apply_overrides(raw_config, ["tuned={}"])).optimizers[name]
    resolved = cfg.optimizer_for(model, name)
    assert resolved.lr == 0.5 and resolved.params == base.params
    assert cfg.tuned_for(model, "no-such-optimizer") is None


@pytest.mark.parametrize("key,message", [
    ("tuned.{model}.{name}.dampingg=0.1", r"tuned\.{model}\.{name}'.*'dampingg'"),  # a setting of no optimizer
    ("tuned.{model}.{name}.damping=0.1", r"tuned\.{model}\.{name}\.damping': not a setting"),  # not of this one
    ("tuned.{model}.nope.lr=0.1", r"tuned\.{model}\.nope': unknown optimizer"),
    ("tuned.nope.{name}.lr=0.1", r"tuned\.nope': unknown model"),
    ("tuned.{model}.{name}.lr=-1", r"tuned\.{model}\.{name}\.lr"),
])
def test_a_bad_tuned_entry_is_named(raw_config, key, message):
    model, name = next(iter(raw_config["models"])), next(iter(raw_config["optimizers"]))
    raw = apply_overrides(raw_config, [key.format(model=model, name=name)])
    with pytest.raises(ConfigError, match=message.format(model=model, name=name)):
        from_dict(raw)
