"""What the tuning searches: its config block, the knobs' log grids, and the checks that make it fair.

The config's ``tuning`` block (schema: workflow/schemas/config.schema.yaml) names the tuning seeds,
the models and optimizers, the number of settings tried per (model, optimizer) (``trials``, the same
for every optimizer) and, per optimizer, its knobs in search order. A knob's grid is logarithmic
around its start value ``c`` (the setting the config trains the model with, or the knob's ``center``):

- ``scale: log``:        ``value(i) = c * step^i``             (lr, damping, a step bound);
- ``scale: complement``: ``value(i) = 1 - (1 - c) * step^-i``  (momentum: log grid on ``1 - momentum``).

``i`` is a grid index; refinement halves its spacing (``i = 1/2`` lies between 0 and 1 on the log scale).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from brownformer.config import ConfigError, ExperimentConfig

__all__ = ["Knob", "TuningConfig", "tuning_config", "start_settings", "grid_value"]

_SIGNIFICANT = 4  # digits kept in a tuned value: the grid steps are >= 1.19x apart even after 3 halvings


@dataclass(frozen=True)
class Knob:
    """One searched setting: config key, grid step (factor > 1), scale, optional start value."""

    key: str
    step: float
    scale: str = "log"
    center: float | None = None


@dataclass(frozen=True)
class TuningConfig:
    """The config's ``tuning`` block (module docstring)."""

    seeds: tuple[int, ...]
    models: tuple[str, ...]
    optimizers: tuple[str, ...]
    trials: int
    eval_every: int
    knobs: Mapping[str, tuple[Knob, ...]]


def grid_value(knob: Knob, start: float, index: float) -> float:
    """The knob's value at grid index ``index`` (module docstring), rounded to 4 significant digits."""
    if knob.scale == "complement":
        value = 1 - (1 - start) * knob.step ** (-index)
    else:
        value = start * knob.step ** index
    return float(f"{value:.{_SIGNIFICANT}g}")


def _grid_seeds(cfg: ExperimentConfig, models: tuple[str, ...]) -> dict[int, list[str]]:
    seeds: dict[int, list[str]] = {}
    for r in cfg.runs():
        if r.model in models:
            seeds.setdefault(r.seed, []).append(r.run_id)
    return seeds


def tuning_config(cfg: ExperimentConfig, *, models=None, optimizers=None) -> TuningConfig:
    """The validated tuning block, optionally restricted to some models / optimizers.

    Raises:
        ConfigError: no ``tuning`` block; an unknown model, optimizer or knob key; a model without
            ``report.targets`` (the tuning selects on steps to that target); a knob without a start
            value; or a tuning seed the grid also trains a tuned model with (a tuning seed is never
            an evaluation seed).
    """
    from brownformer.optim.registry import REGISTRY

    block = cfg.raw.get("tuning")
    if not block:
        raise ConfigError("the config has no 'tuning' block (seeds, models, optimizers, knobs)")
    models = tuple(models or block["models"])
    optimizers = tuple(optimizers or block["optimizers"])
    for m in models:
        if m not in cfg.models:
            raise ConfigError(f"key 'tuning.models': unknown model {m!r}; known: {sorted(cfg.models)}")
        if m not in cfg.report.targets:
            raise ConfigError(f"key 'report.targets': no target for model {m!r}; the tuning selects on steps to it")
    knobs = {}
    for o in optimizers:
        if o not in cfg.optimizers:
            raise ConfigError(f"key 'tuning.optimizers': unknown optimizer {o!r}; known: {sorted(cfg.optimizers)}")
        if o not in block["knobs"]:
            raise ConfigError(f"key 'tuning.knobs.{o}': missing (every tuned optimizer names its knobs)")
        allowed = {"lr", *REGISTRY[cfg.optimizers[o].type].keys}
        knobs[o] = tuple(Knob(k["key"], float(k["step"]), k.get("scale", "log"), k.get("center"))
                         for k in block["knobs"][o])
        for k in knobs[o]:
            if k.key not in allowed:
                raise ConfigError(f"key 'tuning.knobs.{o}': {k.key!r} is not a setting of optimizer type "
                                  f"{cfg.optimizers[o].type!r}; its settings: {', '.join(sorted(allowed))}")
    seeds = tuple(block["seeds"])
    overlap = sorted(set(seeds) & set(_grid_seeds(cfg, models)))
    if overlap:
        runs = _grid_seeds(cfg, models)[overlap[0]]
        raise ConfigError(f"key 'tuning.seeds': seed(s) {overlap} are also evaluation seeds of the grid (e.g. run "
                          f"{runs[0]}); tuning seeds must be disjoint from the seeds claim 4 is evaluated on")
    tc = TuningConfig(seeds=seeds, models=models, optimizers=optimizers, trials=int(block.get("trials", 9)),
                      eval_every=int(block.get("eval_every", 5)), knobs=knobs)
    for m in models:
        for o in optimizers:
            start_settings(cfg, tc, m, o)  # every knob has a start value
    return tc


def start_settings(cfg: ExperimentConfig, tc: TuningConfig, model: str, optimizer: str) -> dict[str, float]:
    """Each knob's start value for (model, optimizer): its ``center``, else the setting the config trains with.

    Raises:
        ConfigError: when a knob has neither (e.g. a step bound that is off, ``null``) or its start is
            outside its scale (``<= 0``; ``>= 1`` for a complement knob).
    """
    ocfg = cfg.optimizer_for(model, optimizer)
    settings = {"lr": ocfg.lr, **ocfg.params}
    out = {}
    for k in tc.knobs[optimizer]:
        start = k.center if k.center is not None else settings.get(k.key)
        ok = isinstance(start, (int, float)) and start > 0 and (k.scale != "complement" or start < 1)
        if not ok or not math.isfinite(start):
            raise ConfigError(f"key 'tuning.knobs.{optimizer}': knob {k.key!r} has no usable start value for model "
                              f"{model!r} (config value {start!r}); give it a 'center'")
        out[k.key] = float(start)
    return out
