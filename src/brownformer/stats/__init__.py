"""Statistics for the paper's claims: sphere (1), Markov attention (2), Brownian motion (3), optimizer (4).

Every verdict is backed by effect sizes with confidence intervals and by tests whose size and
power were measured on simulated processes of the same shape (calibration.py).
"""
from .brownian import analyze_noise, analyze_trajectory
from .calibration import run_calibration
from .claims import optimizer_claim
from .markov import analyze_attention, attention_null_models, weight_isotropy
from .pipeline import stats_for_run, summarize
from .results import TestResult
from .simulate import simulate
from .sphere import sphere_summary
from .trajectory_io import load_trajectory

__all__ = ["load_trajectory", "analyze_trajectory", "analyze_noise", "analyze_attention", "attention_null_models",
           "weight_isotropy", "sphere_summary", "run_calibration", "simulate", "stats_for_run", "summarize",
           "optimizer_claim", "TestResult"]
