"""What the tuning searches: its config block, the knobs' log grids, and the checks that make it fair.

The config's ``tuning`` block (schema: workflow/schemas/config.schema.yaml) names the tuning seeds,
the models and optimizers, the number of settings tried per (model, optimizer) (``trials``, the same
for every optimizer) and, per optimizer, its knobs in search order. A knob's grid is logarithmic
around its start value ``c`` (the setting the config trains the model with, or the knob's ``center``):

- ``scale: log``:        ``value(i) = c * step^i``             (lr, damping, a step bound);
- ``scale: complement``: ``value(i) = 1 - (1 - c) * step^-i``  (momentum: log grid on ``1 - momentum``).

``i`` is a grid index; refinement halves its spacing (``i = 1/2`` lies between 0 and 1 on the log scale).

With ``method: quasi-random`` (tuning/quasi_random.py) every knob is a range ``[low, high]`` instead, searched
by the same number of quasi-random points per optimizer. AdamW's two betas are the knobs ``beta1`` and
``beta2`` (the optimizer's ``betas`` pair; :func:`optimizer_settings`). Every optimizer may also search the
schedule: ``warmup_steps`` and ``horizon`` (the step at which the cosine reaches its floor), integers, which
the ``tuned`` entry routes to the train settings of its runs (config_tuned.SCHEDULE_KEYS).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from brownformer.config import ConfigError, ExperimentConfig
from brownformer.config.tuned import SCHEDULE_KEYS

__all__ = ["Knob", "TuningConfig", "METHODS", "tuning_config", "start_settings", "grid_value", "optimizer_settings"]

#: the searches `tuning.method` names
METHODS = ("coordinate", "quasi-random")
#: knobs that are one element of a pair setting: knob -> (setting, position)
PAIR_KNOBS = {"beta1": ("betas", 0), "beta2": ("betas", 1)}

_SIGNIFICANT = 4  # digits kept in a tuned value: the grid steps are >= 1.19x apart even after 3 halvings


@dataclass(frozen=True)
class Knob:
    """One searched setting: config key, grid step (factor > 1), scale, optional start value."""

    key: str
    step: float | None = None  # coordinate search: grid ratio
    scale: str = "log"
    center: float | None = None
    low: float | None = None  # quasi-random search: the range
    high: float | None = None

    @property
    def integer(self) -> bool:
        """A schedule knob (warm-up, horizon: config_tuned.SCHEDULE_KEYS) counts steps: its values are integers."""
        return self.key in SCHEDULE_KEYS


@dataclass(frozen=True)
class TuningConfig:
    """The config's ``tuning`` block (module docstring)."""

    seeds: tuple[int, ...]
    models: tuple[str, ...]
    optimizers: tuple[str, ...]
    trials: int
    eval_every: int
    knobs: Mapping[str, tuple[Knob, ...]]
    method: str = "coordinate"  # METHODS
    search_seed: int = 0  # quasi-random: the scrambling seed of the points (the same points for every optimizer)


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
    method = block.get("method", "coordinate")
    if method not in METHODS:
        raise ConfigError(f"key 'tuning.method': {method!r}; known: {', '.join(METHODS)}")
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
        keys = {"lr", *REGISTRY[cfg.optimizers[o].type].keys}
        # the schedule's warm-up and horizon are knobs of every optimizer (a tuned entry routes them to train)
        allowed = keys | {k for k, (pair, _) in PAIR_KNOBS.items() if pair in keys} | set(SCHEDULE_KEYS)
        knobs[o] = tuple(_knob(k, method, o) for k in block["knobs"][o])
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
                      eval_every=int(block.get("eval_every", 5)), knobs=knobs, method=method,
                      search_seed=int(block.get("search_seed", 0)))
    if method == "coordinate":
        for m in models:
            for o in optimizers:
                start_settings(cfg, tc, m, o)  # every knob has a start value
    return tc


def _knob(k: Mapping, method: str, optimizer: str) -> Knob:
    """One knob of the config, checked for what its search needs (a grid step, or a range inside its scale)."""
    knob = Knob(k["key"], None if k.get("step") is None else float(k["step"]), k.get("scale", "log"),
                k.get("center"), k.get("low"), k.get("high"))
    where = f"key 'tuning.knobs.{optimizer}': knob {knob.key!r}"
    if method == "coordinate":
        if knob.integer:
            raise ConfigError(f"{where}: the schedule's {knob.key} is searched by the quasi-random method only "
                              "(a range of steps, not a log grid around a start value)")
        if knob.step is None or knob.scale == "linear":
            raise ConfigError(f"{where} needs a 'step' and scale log or complement for the coordinate search")
        return knob
    if knob.low is None or knob.high is None or not knob.low < knob.high:
        raise ConfigError(f"{where} needs a range low < high for the quasi-random search (got {knob.low}, {knob.high})")
    if (knob.scale == "log" and knob.low <= 0) or (knob.scale == "complement" and not 0 <= knob.low < knob.high < 1):
        raise ConfigError(f"{where}: range [{knob.low}, {knob.high}] is outside scale {knob.scale!r}")
    return knob


def optimizer_settings(values: Mapping[str, float], base: Mapping) -> dict:
    """Knob values as optimizer settings: ``beta1``/``beta2`` into the ``betas`` pair (the rest of it from
    ``base``, the optimizer's configured settings; AdamW's own (0.9, 0.999) when it has none)."""
    out = {k: v for k, v in values.items() if k not in PAIR_KNOBS}
    for knob, (pair, i) in PAIR_KNOBS.items():
        if knob in values:
            current = list(out.get(pair) or base.get(pair) or (0.9, 0.999))
            current[i] = values[knob]
            out[pair] = current
    return out


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
