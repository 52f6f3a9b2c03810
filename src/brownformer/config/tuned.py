"""The config's ``tuned`` block, typed: model -> optimizer -> the settings the equal-budget tuning chose.

The schema validates the block (each entry is an ``$defs.optimizer_settings``) and config.checks checks that
every model, optimizer and key exists; this module turns the validated mapping into `TunedConfig` entries and
back (the spelling the config writes, for `brownformer tune`'s writer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["TunedConfig", "SCHEDULE_KEYS", "read_tuned", "tuned_settings"]

#: keys of a ``tuned`` entry that set the run's learning-rate schedule (``train.<key>`` for that (model, optimizer)),
#: not the optimizer: the warm-up and the step at which the cosine reaches its floor (ExperimentConfig.plan: RunPlan.train)
SCHEDULE_KEYS = ("warmup_steps", "horizon")


@dataclass(frozen=True)
class TunedConfig:
    """``tuned.<model>.<optimizer>``: the settings the equal-budget tuning chose for one (model, optimizer)
    pair (benchmarks/results/tuning.md); they override the optimizer's own settings for that model only."""
    model: str
    optimizer: str
    lr: float | None = None  # None: the optimizer's own lr
    params: Mapping[str, Any] = field(default_factory=dict)  # every other optimizer key
    schedule: Mapping[str, int] = field(default_factory=dict)  # SCHEDULE_KEYS set for this pair: train.<key> of its runs

    def settings(self) -> dict[str, Any]:
        """The keys as the config writes them."""
        return {**({"lr": self.lr} if self.lr is not None else {}), **self.params, **self.schedule}


def read_tuned(block: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> dict[str, dict[str, TunedConfig]]:
    """The validated ``tuned`` block (None: absent) as model -> optimizer -> TunedConfig."""
    return {model: {name: _entry(model, name, settings) for name, settings in per_opt.items()}
            for model, per_opt in (block or {}).items()}


def tuned_settings(tuned: Mapping[str, Mapping[str, TunedConfig]]) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> optimizer -> settings, as the config writes them (the inverse of `read_tuned`)."""
    return {model: {name: entry.settings() for name, entry in per_opt.items()} for model, per_opt in tuned.items()}


def _entry(model: str, optimizer: str, settings: Mapping[str, Any]) -> TunedConfig:
    params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in settings.items()
              if k != "lr" and k not in SCHEDULE_KEYS}
    schedule = {k: int(settings[k]) for k in SCHEDULE_KEYS if k in settings}
    # lr as written (not cast): run_slice hashes these settings, so 1 and 1.0 must not differ from the config's
    return TunedConfig(model=model, optimizer=optimizer, lr=settings.get("lr"), params=params, schedule=schedule)
