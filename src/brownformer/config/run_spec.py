"""Runs and their seeds, replicas of the training noise and the training-time analysis window (claims 3b, 3c).

`RunSpec` names one run (model, optimizer, seed, replica) and derives its seeds.

A replica shares a run's initialisation and draws its own data order and dropout noise
(`replica_seed`); `ReplicaBlock` is one `replicas:` block of the config. Momentum (AdamW's beta1,
heavy-ball) correlates updates over about 1/(1 - beta) steps (`momentum_steps`), so a training-time
analysis starts after warm-up and that many steps and uses captures at least that far apart
(`AnalysisWindow`, built by ExperimentConfig.analysis_window from `stats.momentum_times`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from brownformer.config.checks import ConfigError
from brownformer.optim.registry import default_momentum

__all__ = ["RunSpec", "ReplicaBlock", "AnalysisWindow", "momentum_steps", "momentum_gap", "replica_seed"]

_REPLICA_SALT = 0x5EED  # keeps replica seeds apart from any other use of (seed, replica)
_STREAMS = {"data": 0, "noise": 1}


def replica_seed(seed: int, replica: int, stream: str) -> int:
    """A 32-bit seed for replica `replica` of run seed `seed`: "data" (batch order) or "noise" (torch RNG).

    numpy's SeedSequence mixes (seed, replica, salt, stream) into well-spread, platform-independent seeds.
    """
    import numpy as np
    return int(np.random.SeedSequence([seed, replica, _REPLICA_SALT, _STREAMS[stream]]).generate_state(1)[0])


@dataclass(frozen=True)
class RunSpec:
    """One training run: (model variant, optimizer, seed), or replica `replica` >= 1 of it.

    A replica shares the initialisation (torch seed `seed`) and draws its own data order (`data_seed`)
    and dropout noise (`noise_seed`); replica 0 is the run itself (data seed = seed, no reseeding).
    """
    model: str
    optimizer: str
    seed: int
    replica: int = 0

    @property
    def run_id(self) -> str:
        base = f"{self.model}__{self.optimizer}__s{self.seed}"
        return f"{base}__r{self.replica}" if self.replica else base

    @property
    def base(self) -> "RunSpec":
        """The grid run this replica belongs to (itself for replica 0)."""
        return RunSpec(self.model, self.optimizer, self.seed)

    @property
    def data_seed(self) -> int:
        """Seed of the batch order (and augmentation draws): the run's seed for replica 0."""
        return self.seed if self.replica == 0 else replica_seed(self.seed, self.replica, "data")

    @property
    def noise_seed(self) -> int | None:
        """torch seed set after initialisation (dropout, sampled Fisher labels); None for replica 0 (no reseed)."""
        return None if self.replica == 0 else replica_seed(self.seed, self.replica, "noise")

    @classmethod
    def parse(cls, run_id: str) -> "RunSpec":
        try:
            model, optimizer, seed, *rest = run_id.split("__")
            if not seed.startswith("s") or len(rest) > 1 or (rest and not rest[0].startswith("r")):
                raise ValueError
            replica = int(rest[0][1:]) if rest else 0
            if replica < 0 or (rest and replica == 0):
                raise ValueError
            return cls(model, optimizer, int(seed[1:]), replica)
        except ValueError:
            raise ConfigError(f"run id {run_id!r} is not of the form <model>__<optimizer>__s<seed>[__r<replica>]") from None


@dataclass(frozen=True)
class ReplicaBlock:
    """Replicas of the training noise: `count` runs per (model, optimizer, seed), replica 0 being the grid's run."""
    models: tuple[str, ...]
    optimizers: tuple[str, ...]
    seeds: tuple[int, ...]
    count: int

    def bases(self) -> list[tuple[str, str, int]]:
        """(model, optimizer, seed) of every replica set of the block."""
        return [(m, o, s) for m in self.models for o in self.optimizers for s in self.seeds]


@dataclass(frozen=True)
class AnalysisWindow:
    """Which captures a training-time analysis uses (claims 3b, 3c).

    start_step: first step used, max(warm-up, momentum_times x momentum time); min_gap: least number of steps
    between two captures used (the momentum time x momentum_times, at least 1); momentum_steps: 1/(1 - beta).
    """
    start_step: int
    min_gap: int
    momentum_steps: float

    def select(self, steps) -> list[int]:
        """Indices of the captures (at `steps`, increasing) in the window, greedily spaced >= min_gap apart."""
        keep: list[int] = []
        for i, s in enumerate(steps):
            if s >= self.start_step and (not keep or s - steps[keep[-1]] >= self.min_gap):
                keep.append(i)
        return keep


def momentum_gap(momentum_steps: float, momentum_times: float) -> int:
    """The training-time window's least lag in steps: momentum_times x the momentum time 1/(1 - beta), at least 1.
    The one home of this rule: ExperimentConfig.analysis_window (the pipeline's replica captures) and a trajectory
    sidecar's "momentum" (stats/local_slope.sidecar_window) both read it."""
    return max(1, math.ceil(momentum_times * momentum_steps - 1e-9))


def momentum_steps(opt_type: str, params: Mapping[str, Any]) -> float:
    """Momentum time 1/(1 - beta) in steps of an optimizer: the lag over which its momentum correlates updates.

    beta is AdamW's beta1 (torch default 0.9), SGD's momentum (default 0), Muon's momentum (default 0.95) and for
    K-FAC the larger of its heavy-ball momentum (default in brownformer.optim.kfac_settings, read from the optimizer registry) and, when
    the parameters it does not precondition use AdamW (rest_update, default "adamw"), that AdamW's beta1 (0.9):
    a token moves with every parameter, so the slowest momentum sets the time its increments stay correlated.
    """
    p = params
    adam_beta1 = float((p.get("betas") or (0.9, 0.999))[0])
    if opt_type == "adamw":
        beta = adam_beta1
    elif opt_type == "sgd":
        beta = float(p.get("momentum", default_momentum("sgd")))
    elif opt_type == "muon":
        beta = float(p.get("momentum", default_momentum("muon")))
    else:
        beta = float(p.get("momentum", default_momentum(opt_type)))
        if p.get("rest_update", "adamw") == "adamw":
            beta = max(beta, adam_beta1)
    return 1.0 / (1.0 - beta)
