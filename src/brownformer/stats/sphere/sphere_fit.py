"""Claim 1 on the geometry attention sees: is the LayerNorm image a sphere, and is it centred at the origin?

LayerNorm before its affine map lies on the sphere |z| = sqrt(d sigma^2/(sigma^2 + eps)) in the hyperplane
1^T z = 0 by definition. What the next layer reads is y = gamma * z + beta: an ellipsoid with centre beta and
semi-axes |gamma_k| sqrt(d), a sphere only when |gamma| is constant. For one layer's tokens y_1..y_N about a
centre c (beta for an LN output, recovered by `affine_map_fit`; the token mean for the residual stream):

  radius spread  s = sd(|y - c|) / E|y - c|, 0 on a sphere about c;
  Gaussian null  s_0 = sqrt(tr S^2 / 2) / tr S with S = E[(y - c)(y - c)^T]: the spread of |x| for x ~ N(0, S)
      to first order (|x|^2 has mean tr S and variance 2 tr S^2), i.e. what concentration of measure gives
      any cloud of this covariance; for tokens spread evenly on the ellipsoid s / s_0 ~ v / sqrt(1 + v^2) with
      v = CV of gamma_k^2 over dimensions [derived in docs/methods/claims12.md], so s / s_0 reads the
      ellipsoid's anisotropy on the scale where 1 means "no more a sphere than a Gaussian cloud";
  offset         o = |c| / sqrt(E|y - c|^2), the centre's distance from the origin in radii: tokens seen from
      the origin (u = y/|y|, as an isotropic kernel of y compares them) gain a common cosine ~ o^2 / (1 + o^2).

Intervals: t-intervals over probe inputs (tokens of one input are dependent), stats/core/bootstrap.py; the centre
and s_0 are held fixed (the centre is a model parameter, s_0 a smooth function of a d x d moment).
"""
from __future__ import annotations

import numpy as np

from brownformer.io import to_jsonable
from brownformer.stats.core.bootstrap import ClusterBootstrap, group_labels
from brownformer.statsfile import AboutLayers, AffineMap, LayerValues, SphereAbout

__all__ = ["sphere_about", "affine_map_fit", "gaussian_null_spread", "ABOUT_QUANTITIES"]

ABOUT_QUANTITIES = ("radius_spread", "radius_spread_ratio", "offset")
#: resampling units beyond this are merged into contiguous blocks (as stats/sphere/sphere_distance.py does): the bootstrap's
#: cost and memory grow with units x tokens, and 64 blocks already give a stable interval
MAX_CLUSTERS = 64


def _spread(m):
    """sd / mean of the radius from walker means m[..., 0] = E r, m[..., 1] = E r^2."""
    return np.sqrt(np.clip(m[..., 1] - m[..., 0] ** 2, 0.0, None)) / m[..., 0]


def gaussian_null_spread(S: np.ndarray) -> float:
    """s_0 = sqrt(tr S^2 / 2) / tr S: the first-order radius CV of x ~ N(0, S) (module docstring)."""
    tr = float(np.trace(S))
    return float(np.sqrt(np.sum(S * S) / 2) / tr) if tr > 0 else float("nan")


def sphere_about(z, centre=None, *, n_inputs: int | None = None, n_tokens: int | None = None,
                 confidence_level: float, n_resamples: int, rng) -> SphereAbout:
    """Radius spread, its ratio to the Gaussian-cloud null and the offset, per layer (module docstring).

    Args:
        z: (L, N, d) or (N, d) token states (raw scale).
        centre: (L, d) or (d,) the centre c; None: each layer's token mean ("mean-centred").
        n_inputs, n_tokens: walker i*n_tokens + t is token t of input i (the resampling unit); else tokens.

    Returns:
        statsfile.SphereAbout: per_layer (LayerValues over layers for each of ABOUT_QUANTITIES), null_spread [L],
        centre ("given" | "token mean"), n_clusters, ...
    """
    z = np.asarray(z, dtype=float)
    z = z[None] if z.ndim == 2 else z
    if z.ndim != 3 or z.shape[-1] < 2 or not np.all(np.isfinite(z)):
        raise ValueError(f"expected a finite array (L, N, d) with d >= 2, got shape {z.shape}")
    L, N, d = z.shape
    given = centre is not None
    c = np.broadcast_to(np.asarray(centre, float), (L, d)) if given else z.mean(1)
    if not np.all(np.isfinite(c)):
        raise ValueError("centre contains non-finite values")
    labels = group_labels(N, n_inputs=n_inputs, n_tokens=n_tokens) if n_inputs and n_tokens else np.arange(N)
    G = int(labels.max()) + 1
    if G > MAX_CLUSTERS:
        labels = labels * MAX_CLUSTERS // G  # contiguous blocks of units
    boot = ClusterBootstrap(labels, n_resamples=n_resamples, rng=rng)
    w = z - c[:, None, :]  # (L, N, d)
    r = np.linalg.norm(w, axis=-1)  # (L, N)
    cn = np.linalg.norm(c, axis=-1)  # (L,)
    null = np.array([gaussian_null_spread(w[l].T @ w[l] / N) for l in range(L)])
    feats = np.stack([r, r * r], -1)  # (L, N, 2): one trajectory per layer
    sp = boot.estimate(feats, _spread)
    off = boot.estimate(feats, lambda m: cn[:, None] / np.sqrt(m[..., 1]))  # m: (L, resamples, 2)
    per = {}
    for q, est in (("radius_spread", sp), ("offset", off)):
        lo, hi = est.interval(confidence_level)
        per[q] = (est.estimate, lo, hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        per["radius_spread_ratio"] = tuple(np.asarray(v) / null for v in per["radius_spread"])
    layers = AboutLayers(**{q: LayerValues(*(to_jsonable(v) for v in values)) for q, values in per.items()})
    return SphereAbout(L, N, d, to_jsonable(boot.n_groups), confidence_level, n_resamples,
                       "given" if given else "token mean", layers, to_jsonable(null),
                       "t-interval over probe inputs (cluster bootstrap); centre and null held fixed")


def affine_map_fit(z_raw, y) -> AffineMap:
    """The LayerNorm gain and bias recovered from its input-output pairs: y_k = gamma_k z_k + beta_k per dim.

    Per layer and dimension a least-squares line through the tokens (exact up to storage rounding, which
    "relative_residual" shows). The image of the sphere is an ellipsoid with semi-axes |gamma_k| sqrt(d) and
    centre beta; its distortion of angles is bounded by Wielandt's inequality: two orthogonal tokens can
    meet at cosine up to (k^2 - 1)/(k^2 + 1) after the map, k = max|gamma| / min|gamma| (Horn & Johnson
    2013, Section 7.4). offset_ratio = |beta| / sqrt(E|gamma * z|^2): the centre's distance from the origin in radii.

    Args:
        z_raw: (L, N, d) LN output before the affine (NOT divided by sqrt(d) or divided: the ratio is scale-free
            in gamma only up to that factor, so pass the raw output); y: (L, N, d) after the affine.

    Returns:
        statsfile.AffineMap: gamma, beta [L][d]; gain_cv, gain_condition, wielandt_cosine, offset_ratio,
        relative_residual [L] (plain lists, NaN as None).
    """
    z, y = np.asarray(z_raw, float), np.asarray(y, float)
    if z.shape != y.shape or z.ndim != 3:
        raise ValueError(f"z_raw {z.shape} and y {y.shape} must be equal (L, N, d) shapes")
    zc, yc = z - z.mean(1, keepdims=True), y - y.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        gamma = np.sum(zc * yc, 1) / np.sum(zc * zc, 1)  # (L, d)
        beta = y.mean(1) - gamma * z.mean(1)
        resid = y - (gamma[:, None] * z + beta[:, None])
        rel = np.sqrt(np.mean(resid**2, (1, 2)) / np.mean(yc**2, (1, 2)))
        g = np.abs(gamma)
        kappa = g.max(1) / g.min(1)
        radius = np.sqrt(np.mean(np.sum((gamma[:, None] * z) ** 2, -1), 1))
        wielandt, offset = (kappa**2 - 1) / (kappa**2 + 1), np.linalg.norm(beta, axis=1) / radius
        gain_cv = g.std(1) / g.mean(1)
    return AffineMap(*(to_jsonable(v) for v in (gamma, beta, gain_cv, kappa, wielandt, offset, rel)))
