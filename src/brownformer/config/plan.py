"""One run resolved once: `RunPlan`, what a run's training reads from the config (ExperimentConfig.plan).

Training code (brownformer.train, brownformer.ensemble, brownformer.run_folder, the probe recorder) asks the
config nothing about its run: it reads the plan, whose fields are the config's answers taken together — the
model, the optimizer with its tuned settings merged in, the train settings of that run (the model's `steps`,
the grid blocks' `eval_every`), its seeds, whether it is probed, claim 4's stop target and the run hash its
checkpoints and manifest carry.
"""
from __future__ import annotations

from dataclasses import dataclass

from brownformer.config.run_spec import RunSpec

__all__ = ["RunPlan", "RunSeeds"]


@dataclass(frozen=True)
class RunSeeds:
    """Every seed one run uses, `seed_offset` added (RunSpec derives a replica's data and noise seeds).

    init: torch seed of the initialisation; data: the batch order (and augmentation draws); noise: the torch
    seed set after initialisation (a replica's dropout and sampling noise), None for replica 0; split: the
    dataset's split seed; probes: the probe inputs' seed; offset: the config's `seed_offset`.
    """
    init: int
    data: int
    noise: int | None
    split: int
    probes: int
    offset: int

    def manifest(self) -> dict[str, int | None]:
        """The seeds as manifest.json writes them ("torch" is the initialisation's)."""
        return {"torch": self.init, "data": self.data, "noise": self.noise, "split": self.split,
                "probes": self.probes, "offset": self.offset}


@dataclass(frozen=True)
class RunPlan:
    """What one run of the config trains with, resolved once (ExperimentConfig.plan).

    Attributes:
        spec: the run (model, optimizer, seed, replica).
        model: the model variant's settings.
        dataset: the dataset the model trains on.
        optimizer: the optimizer's settings, `tuned.<model>.<optimizer>` merged in.
        train: the train settings of this run: `steps` and `eval_every` as resolved for it (the model's
            `steps`, the smallest `eval_every` of the grid blocks naming it).
        probes: the probe settings (the seed with `seed_offset` added).
        probed: whether the run captures probes (ExperimentConfig.probed).
        stop_target: claim 4's target the run stops at (brownformer.target_stop), None for the whole budget.
        seeds: every seed the run uses.
        device: the config's device ("auto", "cpu", "cuda").
        config_hash: hash of the whole config (the manifest's config_hash).
        run_hash: hash of the run's slice of the config (ExperimentConfig.run_hash): checkpoints and the
            manifest carry it, and a checkpoint of another hash does not resume.
    """
    # The section types are brownformer.config's dataclasses, named and not imported: that package builds plans.
    spec: RunSpec
    model: ModelConfig
    dataset: DatasetConfig
    optimizer: OptimizerConfig
    train: TrainConfig
    probes: ProbeConfig
    probed: bool
    stop_target: float | None
    seeds: RunSeeds
    device: str
    config_hash: str
    run_hash: str

    @property
    def run_id(self) -> str:
        return self.spec.run_id
