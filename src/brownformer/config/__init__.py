"""Experiment configuration: YAML -> JSON-schema validation -> frozen dataclasses.

The schema (workflow/schemas/config.schema.yaml, shipped inside the package as
config.schema.yaml) is the one Snakemake validates with, so a config that passes one passes
the other. Cross-references the schema cannot express (a model's dataset must exist, heads must
divide the width, ...) are checked in brownformer.config.checks and reported with the offending key.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from brownformer.config.checks import (DEFAULT_MARGINS, DEFAULT_WINDOW, FAST_SAFE_LOADER, SCHEMA_PATH, ConfigError,
                                      apply_overrides, validate_dict)
from brownformer.config.plan import RunPlan, RunSeeds
from brownformer.config.run_spec import AnalysisWindow, ReplicaBlock, RunSpec, momentum_gap, momentum_steps
from brownformer.config.tuned import TunedConfig, read_tuned

__all__ = ["ConfigError", "ExperimentConfig", "DatasetConfig", "ModelConfig", "OptimizerConfig", "TunedConfig", "TrainConfig",
           "ProbeConfig", "StatsConfig", "ReportConfig", "RunSpec", "RunPlan", "RunSeeds", "GridBlock", "load_config",
           "validate_dict", "config_hash", "apply_overrides", "SCHEMA_PATH", "ReplicaBlock", "AnalysisWindow",
           "momentum_steps", "momentum_gap", "DEFAULT_MARGINS", "DEFAULT_STATS"]


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
    horizon: int | None = None  # step at which the cosine reaches min_lr_ratio (None: steps); a tuned entry may set it
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
    ensemble: int = 1  # runs per batched model (brownformer.config.ensembles); 1: each run alone
    interleave: int = 4  # seeds per job of claim 4's timed runs (brownformer.config.interleaved); 0: a job per run


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


@dataclass(frozen=True)
class StatsConfig:
    confidence_level: float = 0.95
    alpha: float = 0.05
    n_resamples: int = 999
    calibration_replicates: int = 400  # size SE sqrt(0.05 * 0.95 / 400) = 1.1%, fine enough for a [2%, 8%] window
    max_walkers: int = 512
    #: categories whose decided files get a fitted-null calibration too (per file: it dominates the calibration's cost)
    fitted_null: tuple[str, ...] = ("depth", "training", "weights")
    seed: int = 0
    momentum_times: float = 1.0  # training-time windows start after (and space captures by) this many 1/(1 - beta)
    margins: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_MARGINS))
    window: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_WINDOW))


#: the statistics settings of a config that sets none: the schema's defaults (tests/test_config_defaults.py), the
#: one constant a statistic's keyword default may name (tests/test_one_home_per_default.py)
DEFAULT_STATS = StatsConfig()


@dataclass(frozen=True)
class ReportConfig:
    """The report section: its title and the roles of the optimizers claim 4 compares."""
    target_optimizer: str = "adamw"  # claim 4's baseline
    proposed: str = "kfac-iterative"  # the optimizer claim 4 tests
    targets: Mapping[str, float] = field(default_factory=dict)  # model -> fixed claim-4 target (val metric)
    baselines: tuple[str, ...] = ("adamw", "muon", "sgd")  # claim 4: the first-order optimizers K-FAC must beat
    #: claim 4: baselines tuned like the others whose every tuning run missed the target: not evaluated (docs/methods/claim4.md)
    screened_baselines: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()  # claim 4: the model variants that decide it, fixed before evaluation
    target_levels: tuple[float, ...] = (0.5, 0.75, 0.9)  # claim 4: shares of the improvement; the largest is `targets`
    title: str = "Brownian motion in the transformer: a replication"


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
    stop_at_target: bool = False  # metrics-only runs stop at claim 4's target (brownformer.target_stop)

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
    paths: Mapping[str, str] = field(default_factory=dict)  # output roots; the schema has their defaults
    scaling: Mapping[str, int] | None = None  # {"width", "depth"} when the config is a depth x width study
    tuned: Mapping[str, Mapping[str, TunedConfig]] = field(default_factory=dict)  # model -> optimizer -> settings
    replicas: tuple[ReplicaBlock, ...] = ()  # replicas of the training noise (claims 3b, 3c)
    #: added to every seed above and to probes.seed (`shifted_seeds`); `raw` keeps the seeds as written
    seed_offset: int = 0

    def replica_sets(self) -> dict[str, tuple[RunSpec, ...]]:
        """Base run id -> its replicas (replica 0, the grid's run, first), for every run the `replicas` blocks name."""
        sets: dict[str, tuple[RunSpec, ...]] = {}
        for block in self.replicas:
            for model, optimizer, seed in block.bases():
                sets.setdefault(RunSpec(model, optimizer, seed).run_id,
                                tuple(RunSpec(model, optimizer, seed, k) for k in range(block.count)))
        return sets

    def replica_runs(self) -> list[RunSpec]:
        """The extra training runs the replicas need: every replica that is not a run of the grid (replica >= 1, and
        replica 0 too when the grid does not name it). A replica is probed even where its grid block is not."""
        grid = {r.run_id for r in self.runs()}
        return [r for reps in self.replica_sets().values() for r in reps if r.run_id not in grid]

    def analysis_window(self, run_id: str) -> AnalysisWindow:
        """The captures a training-time analysis of this run uses (stats.momentum_times; AnalysisWindow)."""
        spec = RunSpec.parse(run_id)
        opt = self.optimizer_for(spec.model, spec.optimizer)
        tau = momentum_steps(opt.type, opt.params)
        gap = momentum_gap(tau, self.stats.momentum_times)
        warmup = self.schedule_for(spec.model, spec.optimizer).get("warmup_steps", self.train.warmup_steps)
        return AnalysisWindow(start_step=max(warmup, gap if self.stats.momentum_times else 0),
                              min_gap=gap, momentum_steps=tau)

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
        """Whether the run captures probes (`probed_runs`, and the replica runs when probes are enabled)."""
        return run_id in self._probed_ids

    # Gathered once per config (it is frozen): plan() of every run asks each, and each is a scan over all runs.
    @functools.cached_property
    def _run_ids(self) -> frozenset[str]:
        return frozenset(r.run_id for r in (*self.runs(), *self.replica_runs()))

    @functools.cached_property
    def _probed_ids(self) -> frozenset[str]:
        replicas = {r.run_id for reps in self.replica_sets().values() for r in reps} if self.probes.enabled else ()
        return frozenset({r.run_id for r in self.probed_runs()}.union(replicas))

    @functools.cached_property
    def _blocks_naming(self) -> dict[str, tuple[GridBlock, ...]]:
        return {r.run_id: tuple(b for b in self.grid if r in b.runs()) for r in self.runs()}

    def pair_seeds(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """The seeds each (model, optimizer) pair of the grid runs with, in run order (blocks may differ)."""
        pairs: dict[tuple[str, str], tuple[int, ...]] = {}
        for r in self.runs():
            pairs[r.model, r.optimizer] = pairs.get((r.model, r.optimizer), ()) + (r.seed,)
        return pairs

    def run(self, run_id: str) -> RunSpec:
        spec = RunSpec.parse(run_id)
        if spec.run_id not in self._run_ids:
            raise ConfigError(f"run {run_id!r} is not in the config's grid or replicas")
        return spec

    def eval_every(self, run_id: str) -> int:
        """How often the run evaluates: the smallest `eval_every` of the blocks naming it, else `train.eval_every`."""
        values = [b.eval_every or self.train.eval_every for b in self._blocks_naming.get(run_id, ())]
        return min(values) if values else self.train.eval_every

    def stop_target(self, run_id: str) -> float | None:
        """`report.targets[model]` when the run stops at claim 4's target (brownformer.target_stop): every block
        naming it asks for it and the run captures no probes; else None (it trains its whole budget)."""
        blocks = self._blocks_naming.get(run_id, ())
        if not blocks or not all(b.stop_at_target for b in blocks) or self.probed(run_id):
            return None
        return float(self.report.targets[RunSpec.parse(run_id).model])

    def plan(self, run_id: str) -> RunPlan:
        """Everything one run's training reads from this config, resolved once (brownformer.config.plan).

        Raises:
            ConfigError: `run_id` is not a run of the grid or the replicas.
        """
        spec = self.run(run_id)
        dataset = self.dataset_of(spec.model)
        seeds = RunSeeds(init=spec.seed, data=spec.data_seed, noise=spec.noise_seed, split=dataset.split_seed,
                         probes=self.probes.seed, offset=self.seed_offset)
        return RunPlan(spec=spec, model=self.models[spec.model], dataset=dataset,
                       optimizer=self.optimizer_for(spec.model, spec.optimizer),
                       train=self._train_of(spec), probes=self.probes, probed=self.probed(run_id),
                       stop_target=self.stop_target(run_id), seeds=seeds, device=self.device, config_hash=self.hash,
                       run_hash=self.run_hash(run_id))

    def _train_of(self, spec: RunSpec) -> TrainConfig:
        """A run's train settings (RunPlan.train, resolved here only): its model's `steps`, its blocks' `eval_every`,
        its `tuned` entry's `warmup_steps` and `horizon` (`schedule_for`)."""
        steps = self.models[spec.model].steps or self.train.steps
        return dataclasses.replace(self.train, steps=steps, eval_every=self.eval_every(spec.run_id),
                                   **self.schedule_for(spec.model, spec.optimizer))

    def schedule_for(self, model: str, optimizer: str) -> dict[str, int]:
        """The `train` schedule keys (config_tuned.SCHEDULE_KEYS) that ``tuned.<model>.<optimizer>`` sets."""
        tuned = self.tuned_for(model, optimizer)
        return dict(tuned.schedule) if tuned is not None else {}

    def dataset_of(self, model: str) -> DatasetConfig:
        return self.datasets[self.models[model].dataset]

    def optimizer_for(self, model: str, optimizer: str) -> OptimizerConfig:
        """The settings ``optimizer`` trains ``model`` with: its own, overridden by ``tuned.<model>.<optimizer>``
        (the per-model values of the equal-budget tuning, benchmarks/results/tuning.md)."""
        base = self.optimizers[optimizer]
        tuned = self.tuned_for(model, optimizer)
        if tuned is None:
            return base
        return OptimizerConfig(name=base.name, type=base.type, lr=float(base.lr if tuned.lr is None else tuned.lr),
                               params={**base.params, **tuned.params})

    def tuned_for(self, model: str, optimizer: str) -> TunedConfig | None:
        """The tuned settings of (model, optimizer), or None when the config's `tuned` has none."""
        return self.tuned.get(model, {}).get(optimizer)

    @functools.cached_property
    def hash(self) -> str:  # computed once per config: every run's plan carries it
        return config_hash(self.raw)

    def run_slice(self, run_id: str) -> dict[str, Any]:
        """The config keys that determine one run's training (not stats/report keys), as written in the
        config, including whether it captures probes: a run that starts or stops capturing is retrained
        (the key is added only for metrics-only runs, so a probed run keeps the slice it always had)."""
        spec = self.run(run_id)
        model = self.raw["models"][spec.model]
        tuned = self.tuned_for(spec.model, spec.optimizer)
        slices = {"run": run_id, "model": model, "dataset": self.raw["datasets"][model["dataset"]],
                  "optimizer": {**self.raw["optimizers"][spec.optimizer], **(tuned.settings() if tuned else {})},
                  # train.ensemble and train.interleave only group runs into processes: a run trains as alone
                  "train": {**{k: v for k, v in self.raw["train"].items() if k not in SCHEDULING_TRAIN_KEYS},
                            "eval_every": self.eval_every(run_id)},
                  # the probe seed as the run uses it (seed_offset added; as written when the offset is 0)
                  "probes": {**self.raw["probes"], "seed": self.probes.seed}, "device": self.raw["device"]}
        if self.probed(run_id):
            return slices
        target = self.stop_target(run_id)  # added only when set: the slices of other runs stay as they were
        return {**slices, "metrics_only": True, **({"stop_at_target": target} if target is not None else {})}

    def run_hash(self, run_id: str) -> str:
        """Hash of `run_slice`: a checkpoint or manifest of another hash was trained under other settings."""
        return config_hash(self.run_slice(run_id))


#: `train` keys that decide how runs are scheduled, not what a run computes: left out of `run_slice`
SCHEDULING_TRAIN_KEYS = ("ensemble", "interleave")


def config_hash(raw: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the validated config (defaults filled in)."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()


def shifted_seeds(seeds, offset: int) -> tuple[int, ...]:
    """`seeds` + `offset`: the one place `seed_offset` enters (grid, replica blocks; the probe seed in from_dict)."""
    return tuple(int(s) + offset for s in seeds)


def from_dict(data: Mapping[str, Any], *, source: str = "config") -> ExperimentConfig:
    """Build the dataclasses from a raw mapping (validated here); `seed_offset` shifts every seed the runs use."""
    d = validate_dict(data, source=source)
    offset = int(d["seed_offset"])
    probes = dict(d.get("probes", {}))
    probes["seed"] = probes.get("seed", ProbeConfig.seed) + offset
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
    cfg = ExperimentConfig(
        seeds=shifted_seeds(d["seeds"], offset),
        device=d["device"],
        datasets={n: DatasetConfig(name=n, **v) for n, v in d["datasets"].items()},
        models={n: ModelConfig(name=n, **v) for n, v in d["models"].items()},
        optimizers=opts,
        grid=tuple(GridBlock(models=tuple(b["models"]), optimizers=tuple(b["optimizers"]),
                             seeds=shifted_seeds(b.get("seeds", d["seeds"]), offset), probes=b["probes"],
                             eval_every=b.get("eval_every"), stop_at_target=b["stop_at_target"])
                   for b in d["grid"]),
        train=TrainConfig(**d["train"]),
        probes=ProbeConfig(**probes),
        stats=StatsConfig(margins=margins, window=window, **{k: (tuple(v) if isinstance(v, list) else v) for k, v in stats.items()}),
        resources=d.get("resources", {}),
        report=ReportConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.get("report", {}).items()}),
        raw=d,
        paths=d["paths"], scaling=d.get("scaling"),
        tuned=read_tuned(d.get("tuned")),
        replicas=tuple(ReplicaBlock(models=tuple(b["models"]), optimizers=tuple(b["optimizers"]),
                                    seeds=shifted_seeds(b.get("seeds", d["seeds"]), offset), count=int(b["count"]))
                       for b in d.get("replicas") or ()),
        seed_offset=offset,
    )
    return cfg


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load, override, validate. Raises ConfigError naming the file and key on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        with open(path) as fh:
            raw = yaml.load(fh, Loader=FAST_SAFE_LOADER) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    raw = apply_overrides(raw, overrides)
    return from_dict(raw, source=str(path))
