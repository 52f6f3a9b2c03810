"""One home per default: the schema (workflow/schemas/config.schema.yaml) and the dataclasses of
brownformer.config name the same keys with the same defaults, and the schema accepts exactly the margin
keys the statistics know."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from brownformer import config as C
from brownformer.config import SCHEMA_PATH, ConfigError, apply_overrides, from_dict

SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())
PROPS = SCHEMA["properties"]

# dataclass -> its section in the schema; fields the schema does not hold (the entry's own name)
SECTIONS = [
    (C.DatasetConfig, PROPS["datasets"]["additionalProperties"], {"name"}),
    (C.ModelConfig, PROPS["models"]["additionalProperties"], {"name"}),
    (C.TrainConfig, PROPS["train"], set()),
    (C.ProbeConfig, PROPS["probes"], set()),
    (C.StatsConfig, PROPS["stats"], set()),
    (C.ReportConfig, PROPS["report"], set()),
]


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("cls,section,own", SECTIONS, ids=[s[0].__name__ for s in SECTIONS])
def test_dataclass_and_schema_agree(cls, section, own):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    props, required = section["properties"], set(section.get("required", []))
    assert set(fields) - own == set(props), f"{cls.__name__} fields vs schema keys"
    for name, prop in props.items():
        if name in ("margins", "window"):  # per-key defaults in the schema, read into DEFAULT_MARGINS/DEFAULT_WINDOW
            continue
        default = _default(fields[name])
        if "default" in prop:
            default = list(default) if isinstance(default, tuple) else default  # YAML lists are read as tuples
            assert default == prop["default"], f"{cls.__name__}.{name}: {default!r} vs schema {prop['default']!r}"
        elif name in required:
            assert default is dataclasses.MISSING, f"{cls.__name__}.{name} is required by the schema"
        else:  # optional without a default: absent means None
            assert default is None, f"{cls.__name__}.{name}: {default!r}, but the schema has no default"


def test_output_roots_default_in_one_place():
    paths = {k: v["default"] for k, v in PROPS["paths"]["properties"].items()}
    assert from_dict(_minimal()).paths == paths


def test_schema_margin_keys_are_the_ones_the_statistics_use():
    """Every margin key of the schema has its default there (DEFAULT_MARGINS) and is one a statistic reads."""
    from brownformer.stats.diffusion.rule import MARGIN_KEYS
    from brownformer.stats.sphere.sphere_distance import SPHERE_MARGIN_KEYS

    schema_keys = set(PROPS["stats"]["properties"]["margins"]["properties"])
    assert schema_keys == set(C.DEFAULT_MARGINS)
    assert set(SPHERE_MARGIN_KEYS) <= schema_keys and set(MARGIN_KEYS.values()) <= schema_keys


def test_a_margin_key_with_a_typo_is_named(raw_config):
    raw = apply_overrides(raw_config, ["stats.margins.hurts=[0.4, 0.6]"])
    with pytest.raises(ConfigError, match=r"stats\.margins.*'hurts'"):
        from_dict(raw)


def test_a_margin_upside_down_is_named(raw_config):
    raw = apply_overrides(raw_config, ["stats.margins.hurst=[0.6, 0.4]"])
    with pytest.raises(ConfigError, match=r"stats\.margins\.hurst"):
        from_dict(raw)


def test_a_margin_given_replaces_only_its_default(raw_config):
    cfg = from_dict(apply_overrides(raw_config, ["stats.margins.hurst=[0.3, 0.7]"]))
    assert cfg.stats.margins == {**C.DEFAULT_MARGINS, "hurst": (0.3, 0.7)}


def _minimal() -> dict:
    return {"seeds": [0], "datasets": {"d": {"source": "digits"}},
            "models": {"m": {"arch": "vit", "dataset": "d", "ln": "pre"}},
            "optimizers": {"o": {"type": "adamw", "lr": 0.001}}, "grid": [{"models": ["m"], "optimizers": ["o"]}],
            "train": {"steps": 1, "batch_size": 1}}


def test_a_minimal_config_gets_the_dataclass_defaults():
    """Every default the schema fills in is the dataclass's, so the typed config of a minimal file is the
    dataclasses' defaults."""
    cfg = from_dict(_minimal())
    assert cfg.train == C.TrainConfig(steps=1, batch_size=1)
    # the window's start_step default (null) means "train.warmup_steps": resolved when the config is read
    window = {**C.DEFAULT_WINDOW, "start_step": cfg.train.warmup_steps}
    assert cfg.probes == C.ProbeConfig() and cfg.stats == dataclasses.replace(C.StatsConfig(), window=window)
    assert cfg.models["m"] == C.ModelConfig(name="m", arch="vit", dataset="d", ln="pre")
    assert cfg.datasets["d"] == C.DatasetConfig(name="d", source="digits")


def test_the_cli_exits_2_naming_a_margin_typo(tmp_path, raw_config, capsys):
    from brownformer.cli import main

    raw_config.setdefault("stats", {})["margins"] = {"hurts": [0.4, 0.6]}
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(raw_config))
    assert main(["data", "--config", str(path), "--dataset", "digits", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "stats.margins" in err and "hurts" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
