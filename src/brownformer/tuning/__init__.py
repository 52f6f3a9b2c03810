"""Equal-budget tuning of every optimizer on the claim's own metric (steps to the fixed target).

- space.py: the config's tuning block, the knobs' log grids or ranges, the fairness checks (seeds disjoint);
- search.py: the coordinate search with a fixed trial budget and the censored score;
- quasi_random.py: the quasi-random (Halton) search in knob ranges and the neighbourhood-smoothed selection;
- trial.py: one trial (a setting on every tuning seed, each run stopped at the target);
- run.py: `tune_optimizers`, the stage function of `brownformer tune`;
- write.py: the `tuned:` block and the tuning table.
"""
from brownformer.tuning.run import PairResult, tune_optimizers
from brownformer.tuning.space import TuningConfig, tuning_config

__all__ = ["tune_optimizers", "tuning_config", "TuningConfig", "PairResult"]
