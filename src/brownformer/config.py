"""Experiment configuration: YAML -> JSON-schema validation -> frozen dataclasses.

The schema (workflow/schemas/config.schema.yaml, shipped inside the package as
config.schema.yaml) is the one Snakemake validates with, so a config that passes one passes
the other. Cross-references the schema cannot express (a model's dataset must exist, heads must
divide the width, ...) are checked here and reported with the offending key.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")

__all__ = [
    "ConfigError", "ExperimentConfig", "DatasetConfig", "ModelConfig", "OptimizerConfig",
    "TrainConfig", "ProbeConfig", "StatsConfig", "RunSpec", "load_config", "validate_dict",
    "config_hash", "apply_overrides",
]


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


@dataclass(frozen=True)
class DatasetConfig:
    name: str
    source: str
    path: str | None = None
    data_dir: str | None = None
    download: bool = False
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    split_seed: int = 0
    augment: bool = False
    limit_train: int | None = None


@dataclass(frozen=True)
class ModelConfig:
    name: str
    arch: str  # "vit" | "lm"
    dataset: str
    ln: str  # "pre" | "post" | "none"
    d_model: int = 32
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: float = 2.0
    patch_size: int = 2
    seq_len: int = 64
    dropout: float = 0.0


@dataclass(frozen=True)
class OptimizerConfig:
    name: str
    type: str
    lr: float
    params: Mapping[str, Any] = field(default_factory=dict)  # every other key, passed to the constructor


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    eval_every: int = 50
    eval_batches: int = 8
    log_every: int = 10
    checkpoint_every: int = 100
    grad_clip: float | None = None
    threads: int = 1
    deterministic: bool = True
    precision: str = "fp32"
    compile: bool = False
    num_workers: int = 0


@dataclass(frozen=True)
class ProbeConfig:
    enabled: bool = True
    n_inputs: int = 16
    seed: int = 1234
    log_points: int = 24
    linear_every: int = 25
    noise_every: int = 10
    noise_samples: int = 16
    noise_large_batch: int = 512
    max_weight_size: int = 65536
    projection_dim: int = 256
    dtype: str = "float16"


# Pre-registered equivalence margins (STATISTICS.md 2.0): a value inside counts as "Brownian".
DEFAULT_MARGINS = {
    "msd_exponent": (0.9, 1.1),
    "variance_ratio": (0.9, 1.1),
    "excess_kurtosis": (-0.5, 0.5),
    "hurst": (0.4, 0.6),
    "sphere_radius": (0.99, 1.01),
    "harmonic_ratio": (0.9, 1.1),
}


@dataclass(frozen=True)
class StatsConfig:
    confidence_level: float = 0.95
    alpha: float = 0.05
    n_resamples: int = 999
    calibration_replicates: int = 100
    max_walkers: int = 512
    seed: int = 0
    margins: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_MARGINS))


@dataclass(frozen=True)
class RunSpec:
    """One training run: (model variant, optimizer, seed)."""
    model: str
    optimizer: str
    seed: int

    @property
    def run_id(self) -> str:
        return f"{self.model}__{self.optimizer}__s{self.seed}"

    @classmethod
    def parse(cls, run_id: str) -> "RunSpec":
        try:
            model, optimizer, seed = run_id.split("__")
            if not seed.startswith("s"):
                raise ValueError
            return cls(model, optimizer, int(seed[1:]))
        except ValueError:
            raise ConfigError(f"run id {run_id!r} is not of the form <model>__<optimizer>__s<seed>") from None


@dataclass(frozen=True)
class ExperimentConfig:
    seeds: tuple[int, ...]
    device: str
    datasets: Mapping[str, DatasetConfig]
    models: Mapping[str, ModelConfig]
    optimizers: Mapping[str, OptimizerConfig]
    grid: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
    train: TrainConfig
    probes: ProbeConfig
    stats: StatsConfig
    resources: Mapping[str, Any]
    report: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def runs(self) -> list[RunSpec]:
        """Every run of the grid, in a stable order, without duplicates."""
        seen: dict[str, RunSpec] = {}
        for models, optimizers in self.grid:
            for m in models:
                for o in optimizers:
                    for s in self.seeds:
                        spec = RunSpec(m, o, s)
                        seen.setdefault(spec.run_id, spec)
        return list(seen.values())

    def run(self, run_id: str) -> RunSpec:
        spec = RunSpec.parse(run_id)
        if spec.run_id not in {r.run_id for r in self.runs()}:
            raise ConfigError(f"run {run_id!r} is not in the config's grid")
        return spec

    def dataset_of(self, model: str) -> DatasetConfig:
        return self.datasets[self.models[model].dataset]

    @property
    def hash(self) -> str:
        return config_hash(self.raw)

    def run_hash(self, run_id: str) -> str:
        """Hash of the config slices that determine one run's training (not stats/report keys)."""
        spec = self.run(run_id)
        model = self.raw["models"][spec.model]
        return config_hash({"run": run_id, "model": model, "dataset": self.raw["datasets"][model["dataset"]],
                            "optimizer": self.raw["optimizers"][spec.optimizer], "train": self.raw["train"],
                            "probes": self.raw["probes"], "device": self.raw["device"]})


def config_hash(raw: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the validated config (defaults filled in)."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()


def _schema() -> dict:
    with open(SCHEMA_PATH) as fh:
        return yaml.safe_load(fh)


def _with_defaults(validator_cls):
    """Extend a jsonschema validator to fill in `default` values (as Snakemake's validate does)."""
    import jsonschema
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


def _key_path(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def validate_dict(raw: Mapping[str, Any], *, source: str = "config") -> dict:
    """Validate a config mapping against the schema, fill defaults, check cross-references.

    Raises:
        ConfigError: naming the key and what was expected.
    """
    import jsonschema  # imported here so models/optimizers import on machines without it

    data = copy.deepcopy(dict(raw))
    validator = _with_defaults(jsonschema.Draft202012Validator)(_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise ConfigError(f"{source}: key '{_key_path(e)}': {e.message}")
    _check_references(data, source)
    return data


def _check_references(data: dict, source: str) -> None:
    for name, m in data["models"].items():
        if m["dataset"] not in data["datasets"]:
            raise ConfigError(f"{source}: key 'models.{name}.dataset': unknown dataset {m['dataset']!r}; "
                              f"known: {sorted(data['datasets'])}")
        if m["d_model"] % m["n_heads"]:
            raise ConfigError(f"{source}: key 'models.{name}.n_heads': {m['n_heads']} does not divide "
                              f"d_model={m['d_model']}")
        kind = data["datasets"][m["dataset"]]["source"]
        if (m["arch"] == "vit") != (kind in ("digits", "cifar10")):
            raise ConfigError(f"{source}: key 'models.{name}.arch': {m['arch']!r} does not fit dataset source {kind!r} "
                              "(vit needs images, lm needs text)")
    for name, ds in data["datasets"].items():
        if ds.get("augment") and ds["source"] != "cifar10":
            raise ConfigError(f"{source}: key 'datasets.{name}.augment': crop+flip augmentation is only defined "
                              f"for cifar10 (flipping {ds['source']} changes what the input means)")
        if ds["source"] == "textfile" and not ds.get("path"):
            raise ConfigError(f"{source}: key 'datasets.{name}.path': a textfile dataset needs the path of a UTF-8 file")
        if ds["source"] == "cifar10" and not ds.get("data_dir"):
            raise ConfigError(f"{source}: key 'datasets.{name}.data_dir': cifar10 needs the folder holding "
                              "cifar-10-python.tar.gz (set download: true to fetch it there)")
    for i, block in enumerate(data["grid"]):
        for m in block["models"]:
            if m not in data["models"]:
                raise ConfigError(f"{source}: key 'grid.{i}.models': unknown model {m!r}; known: {sorted(data['models'])}")
        for o in block["optimizers"]:
            if o not in data["optimizers"]:
                raise ConfigError(f"{source}: key 'grid.{i}.optimizers': unknown optimizer {o!r}; "
                                  f"known: {sorted(data['optimizers'])}")
    for name in list(data["models"]) + list(data["optimizers"]):
        if "__" in name or "/" in name:
            raise ConfigError(f"{source}: name {name!r} may not contain '__' or '/' (used in run ids and paths)")


def apply_overrides(raw: dict, overrides: list[str] | None) -> dict:
    """Apply `key.sub=value` overrides (value parsed as YAML) to a raw config mapping."""
    data = copy.deepcopy(raw)
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {p!r} is not a mapping")
        node[parts[-1]] = yaml.safe_load(value)
    return data


def from_dict(data: Mapping[str, Any], *, source: str = "config") -> ExperimentConfig:
    """Build the dataclasses from a raw mapping (validated here)."""
    d = validate_dict(data, source=source)
    opts = {}
    for name, o in d["optimizers"].items():
        params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in o.items() if k not in ("type", "lr")}
        opts[name] = OptimizerConfig(name=name, type=o["type"], lr=float(o["lr"]), params=params)
    stats = dict(d.get("stats", {}))
    margins = dict(DEFAULT_MARGINS)
    margins.update({k: tuple(v) for k, v in stats.pop("margins", {}).items()})
    return ExperimentConfig(
        seeds=tuple(d["seeds"]),
        device=d["device"],
        datasets={n: DatasetConfig(name=n, **v) for n, v in d["datasets"].items()},
        models={n: ModelConfig(name=n, **v) for n, v in d["models"].items()},
        optimizers=opts,
        grid=tuple((tuple(b["models"]), tuple(b["optimizers"])) for b in d["grid"]),
        train=TrainConfig(**d["train"]),
        probes=ProbeConfig(**d.get("probes", {})),
        stats=StatsConfig(margins=margins, **stats),
        resources=d.get("resources", {}),
        report=d.get("report", {}),
        raw=d,
    )


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load, override, validate. Raises ConfigError naming the file and key on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        with open(path) as fh:
            raw = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    raw = apply_overrides(raw, overrides)
    # Schema defaults for the optional sections so that every consumer sees them.
    for section in ("probes", "stats", "resources", "report"):
        raw.setdefault(section, {})
    return from_dict(raw, source=str(path))
