"""Optimizer names and keys are registered once: the schema, the registry and every config agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.nn as nn
import yaml

from brownformer.config import SCHEMA_PATH, ConfigError, load_config
from brownformer.optim.registry import OPTIMIZERS, REGISTRY, build_optimizer

CONFIGS = sorted(Path(__file__).resolve().parents[2].joinpath("config").glob("*.yaml"))


def _schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def test_schema_keys_are_the_registry_and_its_types_the_only_list():
    schema = _schema()
    item = schema["properties"]["optimizers"]["additionalProperties"]
    assert "enum" not in item["properties"]["type"]  # the registry is the one list of types
    settings = set(schema["$defs"]["optimizer_settings"]["properties"])
    assert settings == {"lr"} | {k for entry in REGISTRY.values() for k in entry.keys}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_uses_only_its_optimizers_keys(path):
    cfg = load_config(path)
    for name, o in cfg.optimizers.items():
        assert set(o.params) <= set(REGISTRY[o.type].keys), name
    for model in cfg.models:
        for name in cfg.optimizers:
            resolved = cfg.optimizer_for(model, name)
            assert set(resolved.params) <= set(REGISTRY[resolved.type].keys)


def test_every_registered_optimizer_builds_with_its_keys():
    model = nn.Sequential(nn.Linear(3, 4))
    model.blocks = nn.ModuleList([nn.Linear(4, 4)])  # muon needs a hidden 2-D weight
    for name in OPTIMIZERS:
        assert build_optimizer(model, name, 0.01, {}).param_groups[0]["initial_lr"] == 0.01


def test_every_registered_optimizer_builds_with_its_cpu_implementation_flags():
    """The registry's implementation choice (e.g. AdamW's foreach) is accepted by the constructor and
    lands in the optimizer's groups."""
    import torch

    from brownformer.optim.registry import implementation_flags

    model = nn.Sequential(nn.Linear(3, 4))
    model.blocks = nn.ModuleList([nn.Linear(4, 4)])
    for name in OPTIMIZERS:
        flags = implementation_flags(name, torch.device("cpu"))
        group = build_optimizer(model, name, 0.01, flags).param_groups[0]
        assert all(group[k] == v for k, v in flags.items()), name
    assert implementation_flags("adamw", torch.device("cpu")) == {"foreach": True}


def test_an_unknown_optimizer_type_is_a_config_error_listing_the_registry(tmp_path):
    raw = yaml.safe_load((CONFIGS[0]).read_text())
    name = next(iter(raw["optimizers"]))
    raw["optimizers"][name]["type"] = "adamww"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=f"optimizers.{name}.type': unknown optimizer type 'adamww'; known: "
                                          + ", ".join(OPTIMIZERS)):
        load_config(path)


def test_a_key_of_another_optimizer_is_a_config_error(tmp_path):
    raw = yaml.safe_load((CONFIGS[0]).read_text())
    name = next(n for n, o in raw["optimizers"].items() if o["type"] in ("sgd", "adamw"))
    raw["optimizers"][name]["damping"] = 0.1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=f"optimizers.{name}.damping"):
        load_config(path)


def test_tuned_settings_override_the_optimizer_for_that_model_only():
    cfg = load_config(CONFIGS[0], ["tuned={}"])
    model, other = list(cfg.models)[:2]
    name = next(n for n, o in cfg.optimizers.items() if o.type.startswith("kfac"))
    tuned = load_config(CONFIGS[0], [f"tuned.{model}.{name}.lr=0.123", f"tuned.{model}.{name}.damping=0.5"])
    assert tuned.optimizer_for(model, name).lr == 0.123 and tuned.optimizer_for(model, name).params["damping"] == 0.5
    assert tuned.optimizer_for(other, name) == cfg.optimizer_for(other, name)
