"""Statistics for the paper's claims: sphere (1), Markov attention (2), Brownian motion (3), optimizer (4).

Every verdict is backed by effect sizes with confidence intervals and by tests whose size and
power were measured on simulated processes of the same shape (calibration.py).

Everything here is a function of arrays, tables and typed results: no module reads or writes a file.
The statistics stage that reads trajectory files and writes the per-run statistics, the summary and the
calibration table is brownformer.stats_stage.

Names are imported lazily (PEP 562) so that `brownformer stats trajectory` starts without loading
pandas, statsmodels or the Markov and claims code it does not use.
"""
import importlib

_EXPORTS = {
    "validate_trajectory": "diffusion.trajectory_inputs", "trajectory_battery": "diffusion.brownian", "analyze_noise": "diffusion.descriptive",
    "analyze_attention": "markov.markov_chain", "attention_null_models": "markov.markov_chain", "weight_isotropy": "markov.markov_chain",
    "sphere_summary": "sphere.sphere_distance", "run_calibration": "core.calibration", "simulate": "diffusion.simulate",
    "optimizer_claim": "claims", "EffectResult": "core.batch_stat",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
