"""The figures of the report: file stem -> (number, title). The Snakemake rule and the report
notebook both read this list, so a figure cannot be drawn without being declared and captioned
(workflow/report/<stem>.rst holds the caption Snakemake's report shows)."""
from __future__ import annotations

__all__ = ["FIGURES"]

FIGURES: dict[str, str] = {
    "training_curves": "Training curves: loss and accuracy (bits per character for text) against steps and wall-clock",
    "time_to_target": "Steps and seconds to reach AdamW's final validation metric, and K-FAC overhead",
    "sphere_norms": "Norms of LayerNorm outputs before and after the affine map",
    "markov_spectra": "Attention as a Markov chain: spectral gap, stationary entropy, reversibility, Dobrushin",
    "depth_cosine": "Depth trajectories: mean cosine against the spherical Brownian law; Gram off-diagonal",
    "training_msd": "Training trajectories: mean squared displacement, variance ratio and Hurst exponents",
    "increments_tails": "Increment distributions and tail indices against matched Gaussian surrogates; gradient noise",
    "calibration": "Calibration of the test battery: size on Brownian motion and power against alternatives",
    "claims_overview": "Verdict per claim, run and optimizer",
}
