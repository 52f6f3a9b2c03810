"""Statistics for the paper's claims: sphere (1), Markov attention (2), Brownian motion (3), optimizer (4).

Every verdict is backed by effect sizes with confidence intervals and by tests whose size and
power were measured on simulated processes of the same shape (calibration.py).

Names are imported lazily (PEP 562) so that `brownformer stats trajectory` starts without loading
pandas, statsmodels or the Markov and claims code it does not use.
"""
import importlib

_EXPORTS = {
    "load_trajectory": "trajectory_io", "analyze_trajectory": "brownian", "analyze_noise": "descriptive",
    "analyze_attention": "markov", "attention_null_models": "markov", "weight_isotropy": "markov",
    "sphere_summary": "sphere", "run_calibration": "calibration", "simulate": "simulate",
    "stats_for_run": "run_stats", "optimizer_claim": "claims", "TestResult": "results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
