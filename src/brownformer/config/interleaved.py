"""Interleaved groups: claim 4's timed runs of one model, trained one at a time by one job (`train.interleave`).

Claim 4 compares the training wall-clock of the proposed optimizer's runs with the baselines' on each model with a
claim-4 target (`timed_by_claim4`), so those runs train alone, never as an ensemble. As one job each they pay a
process start-up apiece (Python, `import torch`, the dataset) that their own seconds do not even contain. A group
trains several of them in one process, each exactly as `brownformer train --run X --out DIR` trains it alone
(brownformer.one_at_a_time), so its wall-clock is still a lone run's.

Order: seeds ascending, and within a seed the proposed optimizer first, then `report.baselines` in their order,
then the rest. Every optimizer's runs are then spread alike over the job: a slow spell of the machine, or whatever
a process's first run pays that later ones do not, reaches each optimizer's seeds in the same places, instead of
falling on one optimizer's block of seeds. A chunk holds whole seeds (`train.interleave` of them), so each seed's
optimizers share a job and a stretch of time.
"""
from __future__ import annotations

from dataclasses import dataclass

from brownformer.config import ExperimentConfig
from brownformer.config.ensembles import ensemble_key, even_chunks, timed_by_claim4

__all__ = ["InterleavedGroup", "interleaved_groups", "optimizer_order"]


@dataclass(frozen=True)
class InterleavedGroup:
    """Runs (ids, in training order) that one job trains one at a time; `name` is the first's id and the count."""

    runs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.runs[0]}__i{len(self.runs)}"


def optimizer_order(cfg: ExperimentConfig, optimizers) -> list[str]:
    """`optimizers` (names) in a group's order within a seed: the proposed, then report.baselines, then the rest
    in the config's order of optimizers."""
    ranked = [cfg.report.proposed, *cfg.report.baselines, *cfg.optimizers]
    return sorted(set(optimizers), key=ranked.index)


def interleaved_groups(cfg: ExperimentConfig) -> list[InterleavedGroup]:
    """The interleaved groups of the config: per model, its grid runs that train alone (no ensemble) and whose
    wall-clock claim 4 compares, seeds ascending in chunks of `train.interleave` seeds, each seed's optimizers in
    `optimizer_order`. A chunk of one run is no group (it trains as its own job); `train.interleave: 0`: none."""
    size = cfg.train.interleave
    if size < 1:
        return []
    by_model: dict[str, dict[int, dict[str, str]]] = {}  # model -> seed -> optimizer -> run id
    for spec in cfg.runs():
        if timed_by_claim4(cfg, spec) and ensemble_key(cfg, cfg.plan(spec.run_id)) is None:
            by_model.setdefault(spec.model, {}).setdefault(spec.seed, {})[spec.optimizer] = spec.run_id
    groups = []
    for seeds in by_model.values():
        for chunk in even_chunks(sorted(seeds), size):
            runs = tuple(seeds[s][o] for s in chunk for o in optimizer_order(cfg, seeds[s]))
            if len(runs) > 1:
                groups.append(InterleavedGroup(runs))
    return groups
