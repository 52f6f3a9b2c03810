"""Multiple testing: Benjamini-Hochberg within a family, Holm across headline claims."""
from __future__ import annotations

import numpy as np
from scipy.stats import false_discovery_control
from statsmodels.stats.multitest import multipletests

__all__ = ["bh_adjust", "holm_adjust"]


def bh_adjust(pvalues, *, method: str = "bh") -> np.ndarray:
    """Benjamini-Hochberg (or 'by', Benjamini-Yekutieli) adjusted p-values; NaN entries stay NaN.

    scipy.stats.false_discovery_control (Benjamini & Hochberg 1995).
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = false_discovery_control(p[ok], method=method)
    return out


def holm_adjust(pvalues) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values (statsmodels multipletests); NaN entries stay NaN."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return out
