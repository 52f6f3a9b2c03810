"""Ensembles: the runs that train together in one process as one batched model (`train.ensemble`).

Several seeds (or replicas) of one (model, optimizer) with the same schedule train as one model whose
weights carry a leading member axis (brownformer.ensemble). That is exact only for an optimizer whose update
is elementwise in the parameters (`ENSEMBLE_OPTIMIZERS`): stacking members then changes no member's update.
K-FAC's factors and Muon's orthogonalisation mix a matrix's entries, so their runs train alone; so does a
model with dropout (a batched model draws other dropout masks than the run alone would), and so do the runs
whose training wall-clock claim 4 compares with the proposed optimizer's (a member's wall-clock is its share of
the ensemble's, cheaper than the run alone: it would tilt the seconds ratio).

Each member keeps its own run folder and outputs, so the grouping is scheduling only: a member trains as
its run trained alone would, to float rounding (the batched matmuls sum in another order).
"""
from __future__ import annotations

from dataclasses import dataclass

from brownformer.config import ExperimentConfig, RunPlan, RunSpec

__all__ = ["ENSEMBLE_OPTIMIZERS", "Ensemble", "ensemble_key", "ensembles", "even_chunks", "timed_by_claim4"]

#: optimizer types whose step is elementwise in the parameters (torch.optim.AdamW, SGD with momentum)
ENSEMBLE_OPTIMIZERS = ("adamw", "sgd")


@dataclass(frozen=True)
class Ensemble:
    """Runs (ids, in the config's run order) that train together; `name` is the first's id and the count."""

    runs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.runs[0]}__e{len(self.runs)}"


def ensemble_key(cfg: ExperimentConfig, plan: RunPlan) -> tuple | None:
    """What the members of one ensemble share (model, optimizer, the run's training settings, its claim-4 stop
    target), or None when the run (`plan`, a run of `cfg`) trains alone (an optimizer or model that stacking would
    change)."""
    spec = plan.spec
    if plan.optimizer.type not in ENSEMBLE_OPTIMIZERS or plan.model.dropout or timed_by_claim4(cfg, spec):
        return None
    return spec.model, spec.optimizer, plan.train, plan.stop_target


def timed_by_claim4(cfg: ExperimentConfig, spec: RunSpec) -> bool:
    """A grid run of a model with a claim-4 target on which the grid also trains the proposed optimizer: claim 4
    reads its seconds to the target against the proposed optimizer's (replicas it does not read)."""
    return (spec.replica == 0 and spec.model in cfg.report.targets
            and (spec.model, cfg.report.proposed) in cfg.pair_seeds())


def ensembles(cfg: ExperimentConfig) -> list[Ensemble]:
    """The ensembles of the config's runs (grid and replicas): each group of runs with one `ensemble_key`,
    cut in run order into ensembles of at most `train.ensemble` members, as even as that allows. A group
    of one trains alone, as every run does with `train.ensemble: 1`."""
    size = cfg.train.ensemble
    if size < 2:
        return []
    groups: dict[tuple, list[str]] = {}
    for spec in (*cfg.runs(), *cfg.replica_runs()):
        key = ensemble_key(cfg, cfg.plan(spec.run_id))
        if key is not None:
            groups.setdefault(key, []).append(spec.run_id)
    return [Ensemble(part) for ids in groups.values() for part in even_chunks(ids, size) if len(part) > 1]


def even_chunks(items, size: int) -> list[tuple]:
    """`items` cut in order into the fewest chunks of at most `size`, as even as that allows (9 in chunks of 4:
    3 + 3 + 3, not 4 + 4 + 1)."""
    items = tuple(items)
    n_parts = -(-len(items) // size)  # ceil
    bounds = [round(k * len(items) / n_parts) for k in range(n_parts + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]
