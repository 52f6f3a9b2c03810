"""Experiment configuration: YAML -> JSON-schema validation -> frozen dataclasses.

The schema (workflow/schemas/config.schema.yaml, shipped inside the package as
config.schema.yaml) is the one Snakemake validates with, so a config that passes one passes
the other. Cross-references the schema cannot express (a model's dataset must exist, heads must
divide the width, ...) are checked in brownformer.config_checks and reported with the offending key.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from brownformer.config_checks import SCHEMA_PATH, ConfigError, apply_overrides, validate_dict

__all__ = [
    "ConfigError", "ExperimentConfig", "DatasetConfig", "ModelConfig", "OptimizerConfig",
    "TrainConfig", "ProbeConfig", "StatsConfig", "ReportConfig", "RunSpec", "GridBlock", "load_config", "validate_dict",
    "config_hash", "apply_overrides", "SCHEMA_PATH",
]


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
    pool: str = "cls"  # ViT readout: "cls" token or "mean" of the patch tokens
    seq_len: int = 64
    dropout: float = 0.0
    steps: int | None = None  # overrides train.steps for this model (None: train.steps)


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
    cuda_graphs: bool = False  # CUDA only; a no-op on the CPU (brownformer.train_step)
    num_workers: int = 0


@dataclass(frozen=True)
class ProbeConfig:
    enabled: bool = True
    n_inputs: int = 16
    seed: int = 1234
    log_points: int = 24
    linear_every: int = 25
    linear_points: int | None = None  # when set: this many evenly spaced captures whatever the run's length
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
    "increment_autocorrelation": (-0.1, 0.1),  # lag-1; AR(1) increments with |phi| <= 0.1 pass
    "volatility_autocorrelation": (-0.1, 0.1),
    "tail_index_ratio": (0.8, 10.0),  # Hill index relative to matched Gaussian surrogates
    "drift_fraction": (0.0, 0.1),  # share of the final MSD explained by a common drift (descriptive)
    # claims 1, 2 and 4 (stats/claims/): an interval inside the margin supports the claim
    "fraction_on_sphere": (0.99, 1.0),  # LayerNorm's eps pulls a few low-variance tokens below radius 0.99
    "vmf_explained": (0.5, 1.0),  # floor; raised per run to what the row-shuffled and step-0 nulls reach
    "reversibility_residual": (0.0, 0.1),  # ceiling; lowered per run to half the row-shuffled null's residual
    "time_to_target_steps_ratio": (0.0, 0.75),  # issue 11: <= 0.75x AdamW's steps
    "time_to_target_seconds_ratio": (0.0, 1.0),  # and no more wall-clock than AdamW
}


# Claim 3's fitting window, fixed before the data (stats/local_slope.py): displacements start at the first capture at
# or after `start_step` (None: train.warmup_steps), and only lags of at least 1/(1 - momentum) steps are used
# (AdamW's beta1 and the heavy-ball momentum 0.9 correlate increments over ~10 steps).
DEFAULT_WINDOW = {
    "start_step": None,
    "momentum": 0.9,
    "local_decades": 0.5,  # width on the log clock of each running log-log regression of the local-slope curve
    "envelope_replicates": 39,  # Brownian motions at the file's shape: the pointwise 95% envelope is their range
    "flat_margin": 0.2,  # |late - early local exponent| inside this: the curve is a power law across the window
    "mixed_share": 0.2,  # "mixed" needs at least this share of walkers both inside and outside the Brownian range
}


@dataclass(frozen=True)
class StatsConfig:
    confidence_level: float = 0.95
    alpha: float = 0.05
    n_resamples: int = 999
    calibration_replicates: int = 400  # size SE sqrt(0.05 * 0.95 / 400) = 1.1%, fine enough for a [2%, 8%] window
    max_walkers: int = 512
    seed: int = 0
    margins: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_MARGINS))
    window: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_WINDOW))


@dataclass(frozen=True)
class ReportConfig:
    """The report section: its title and the optimizers claim 4 compares (their defaults live in the schema)."""
    target_optimizer: str
    proposed: str
    targets: Mapping[str, float] = field(default_factory=dict)  # model -> fixed claim-4 target (val metric)
    title: str | None = None


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
class GridBlock:
    """One block of the grid: every model crossed with every optimizer and every seed.

    `seeds` is the block's own `seeds` list when it has one, else the config's top-level `seeds`
    (so a block can give the optimizers one claim compares more seeds than the rest of the grid).
    `probes` False makes the block's runs metrics-only (no captures, extraction or per-run statistics),
    unless another block probes them: extra seeds for claim 4 cost training time only. `eval_every`
    overrides `train.eval_every` for the block's runs (the smallest value wins for a run several blocks name).
    """
    models: tuple[str, ...]
    optimizers: tuple[str, ...]
    seeds: tuple[int, ...]
    probes: bool = True
    eval_every: int | None = None  # None: train.eval_every

    def runs(self) -> list[RunSpec]:
        return [RunSpec(m, o, s) for m in self.models for o in self.optimizers for s in self.seeds]


@dataclass(frozen=True)
class ExperimentConfig:
    seeds: tuple[int, ...]  # the default seeds of a grid block; a block may list its own (GridBlock.seeds)
    device: str
    datasets: Mapping[str, DatasetConfig]
    models: Mapping[str, ModelConfig]
    optimizers: Mapping[str, OptimizerConfig]
    grid: tuple[GridBlock, ...]
    train: TrainConfig
    probes: ProbeConfig
    stats: StatsConfig
    resources: Mapping[str, Any]
    report: ReportConfig
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    paths: Mapping[str, str] = field(default_factory=lambda: {"results": "results", "figures": "figures"})
    scaling: Mapping[str, int] | None = None  # {"width", "depth"} when the config is a depth x width study

    def runs(self) -> list[RunSpec]:
        """Every run of the grid, in a stable order (blocks in turn, a run where it first appears), without duplicates."""
        seen: dict[str, RunSpec] = {}
        for block in self.grid:
            for spec in block.runs():
                seen.setdefault(spec.run_id, spec)
        return list(seen.values())

    def probed_runs(self) -> list[RunSpec]:
        """The runs that capture probes, in the order of `runs()`: every run some block probes, none when
        `probes.enabled` is false. The others are metrics-only (no extraction, no per-run statistics)."""
        if not self.probes.enabled:
            return []
        probed = {spec.run_id for block in self.grid if block.probes for spec in block.runs()}
        return [r for r in self.runs() if r.run_id in probed]

    def probed(self, run_id: str) -> bool:
        """Whether the run captures probes (`probed_runs`)."""
        return run_id in {r.run_id for r in self.probed_runs()}

    def pair_seeds(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """The seeds each (model, optimizer) pair of the grid runs with, in run order (blocks may differ)."""
        pairs: dict[tuple[str, str], tuple[int, ...]] = {}
        for r in self.runs():
            pairs[r.model, r.optimizer] = pairs.get((r.model, r.optimizer), ()) + (r.seed,)
        return pairs

    def run(self, run_id: str) -> RunSpec:
        spec = RunSpec.parse(run_id)
        if spec.run_id not in {r.run_id for r in self.runs()}:
            raise ConfigError(f"run {run_id!r} is not in the config's grid")
        return spec

    def eval_every(self, run_id: str) -> int:
        """How often the run evaluates: the smallest `eval_every` of the blocks naming it, else `train.eval_every`."""
        values = [b.eval_every or self.train.eval_every for b in self.grid
                  if run_id in {r.run_id for r in b.runs()}]
        return min(values) if values else self.train.eval_every

    def for_run(self, run_id: str) -> "ExperimentConfig":
        """This config as one run sees it: the run's model may override `train.steps`, its grid block
        `train.eval_every`."""
        steps = self.models[self.run(run_id).model].steps or self.train.steps
        train = dataclasses.replace(self.train, steps=steps, eval_every=self.eval_every(run_id))
        return self if train == self.train else dataclasses.replace(self, train=train)

    def dataset_of(self, model: str) -> DatasetConfig:
        return self.datasets[self.models[model].dataset]

    def optimizer_for(self, model: str, optimizer: str) -> OptimizerConfig:
        """The settings ``optimizer`` trains ``model`` with: its own, overridden by ``tuned.<model>.<optimizer>``
        (the per-model values of the equal-budget tuning, benchmarks/results/tuning.md)."""
        base = self.optimizers[optimizer]
        tuned = _tuned_settings(self.raw, model, optimizer)
        if not tuned:
            return base
        params = {**base.params, **{k: (tuple(v) if isinstance(v, list) else v) for k, v in tuned.items() if k != "lr"}}
        return OptimizerConfig(name=base.name, type=base.type, lr=float(tuned.get("lr", base.lr)), params=params)

    @property
    def hash(self) -> str:
        return config_hash(self.raw)

    def run_hash(self, run_id: str) -> str:
        """Hash of the config slices that determine one run's training (not stats/report keys), including
        whether it captures probes: a run that starts or stops capturing is retrained (the key is added only
        for metrics-only runs, so a probed run keeps the hash it always had)."""
        spec = self.run(run_id)
        model = self.raw["models"][spec.model]
        slices = {"run": run_id, "model": model, "dataset": self.raw["datasets"][model["dataset"]],
                  "optimizer": {**self.raw["optimizers"][spec.optimizer],
                                **_tuned_settings(self.raw, spec.model, spec.optimizer)},
                  "train": {**self.raw["train"], "eval_every": self.eval_every(run_id)},
                  "probes": self.raw["probes"], "device": self.raw["device"]}
        return config_hash(slices if self.probed(run_id) else {**slices, "metrics_only": True})


def _tuned_settings(raw: Mapping[str, Any], model: str, optimizer: str) -> dict:
    return dict((raw.get("tuned") or {}).get(model, {}).get(optimizer, {}))


def config_hash(raw: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the validated config (defaults filled in)."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()


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
    window = {**DEFAULT_WINDOW, **stats.pop("window", {})}
    if window["start_step"] is None:  # the warm-up's one home is train.warmup_steps
        window["start_step"] = int(d["train"].get("warmup_steps", 0))
    return ExperimentConfig(
        seeds=tuple(d["seeds"]),
        device=d["device"],
        datasets={n: DatasetConfig(name=n, **v) for n, v in d["datasets"].items()},
        models={n: ModelConfig(name=n, **v) for n, v in d["models"].items()},
        optimizers=opts,
        grid=tuple(GridBlock(models=tuple(b["models"]), optimizers=tuple(b["optimizers"]),
                             seeds=tuple(b.get("seeds", d["seeds"])), probes=b["probes"],
                             eval_every=b.get("eval_every"))
                   for b in d["grid"]),
        train=TrainConfig(**d["train"]),
        probes=ProbeConfig(**d.get("probes", {})),
        stats=StatsConfig(margins=margins, window=window, **stats),
        resources=d.get("resources", {}),
        report=ReportConfig(**d.get("report", {})),
        raw=d,
        paths=d.get("paths") or {"results": "results", "figures": "figures"}, scaling=d.get("scaling"),
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
    return from_dict(raw, source=str(path))
