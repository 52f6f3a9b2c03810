"""Claim 1 (tokens on a hypersphere): distances of LayerNorm outputs from the sphere, with CIs.

Before the affine map the LN output is on the sphere by definition (whenever a token's variance exceeds
~50 eps): `fraction_on_sphere` checks that definition and is labelled so, never evidence. The claim is
decided on the image after the affine map (sphere_fit.py: radius spread about the LN's centre beta, its
Gaussian-cloud null, the offset of the centre) in stats/claims/claim1_sphere.py.

The laws of spherical Brownian motion (claim 3) live in sphere_battery.py; `gram_offdiagonal` is shared
by both and by the depth figure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from brownformer.config import DEFAULT_MARGINS, DEFAULT_STATS

from brownformer.io import to_jsonable
from brownformer.stats.core.bootstrap import ClusterBootstrap
from brownformer.statsfile import (Distribution, GeometryLayers, LayerValues, PerLeading, PooledValue, Quantiles,
                                   SphereGeometry, SphereMargins, SphereSummary, TensorDistribution)

__all__ = ["gram_offdiagonal", "sphere_summary", "SphereCheck", "sphere_geometry", "tensor_sphere_summary", "SPHERE_MARGIN_KEYS",
           "SPHERE_TENSORS", "GEOMETRY_QUANTITIES", "SPHERE_MAX_RESAMPLES"]

#: the margins of the definitional check (stats.margins; their values live in the schema): ||z||/sqrt(d) and
#: 1^T z / sqrt(d) of the raw LN output
SPHERE_MARGIN_KEYS = ("sphere_radius", "sphere_sum")
#: the most resamples claim 1's bootstrap draws per tensor (the stage caps stats.n_resamples at it): its cost grows
#: linearly in them, a (B, G) x (G, L (7 + d)) product per tensor
SPHERE_MAX_RESAMPLES = 999


def _sphere_margins(margins: Mapping | SphereMargins) -> SphereMargins:
    """The definitional check's margins: those given, else the schema's."""
    if isinstance(margins, SphereMargins):
        return margins
    return SphereMargins(*(list(margins[k] if k in margins else DEFAULT_MARGINS[k]) for k in SPHERE_MARGIN_KEYS))


def gram_offdiagonal(U: np.ndarray) -> np.ndarray:
    """Mean off-diagonal cosine mean_{i != j} <u_i(t), u_j(t)> for each t, in O(T N d).

    Uses sum_{i != j} <u_i, u_j> = |sum_i u_i|^2 - N. Independent spherical BMs decay it as
    exp(-2(d-1) D t) toward 0; clustering / rank collapse pushes it toward 1.
    """
    T, N, d = U.shape
    s = U.sum(axis=1)
    return (np.sum(s * s, axis=-1) - N) / (N * (N - 1))


#: the levels of a distribution's quantiles, as written
_LEVELS = ("0.001", "0.01", "0.5", "0.99", "0.999")


def _distribution(x: np.ndarray, center: float) -> Distribution:
    q = np.quantile(x, [float(v) for v in _LEVELS])
    return Distribution(to_jsonable(float(x.mean())), to_jsonable(float(x.std(ddof=1)) if x.size > 1 else np.nan),
                        Quantiles(_LEVELS, tuple(to_jsonable(q.tolist()))),
                        to_jsonable(float(np.max(np.abs(x - center)))), int(x.size))


def _one_summary(z: np.ndarray, margins: SphereMargins) -> TensorDistribution:
    z = np.asarray(z, dtype=float)
    if z.ndim < 1 or z.shape[-1] < 2:
        raise ValueError(f"expected an array (..., d) with d >= 2, got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("input contains non-finite values")
    d = z.shape[-1]
    flat = z.reshape(-1, d)
    radius = np.linalg.norm(flat, axis=1) / np.sqrt(d)
    ssum = flat.sum(axis=1) / np.sqrt(d)
    (rlo, rhi), (slo, shi) = margins.sphere_radius, margins.sphere_sum
    in_r = (radius >= rlo) & (radius <= rhi)
    in_s = (ssum >= slo) & (ssum <= shi)
    per_leading = None
    if z.ndim >= 3:  # per leading index (e.g. layer)
        lead = z.reshape(z.shape[0], -1, d)
        per_leading = PerLeading(*(to_jsonable(v.tolist()) for v in (
            np.linalg.norm(lead, axis=-1).mean(1) / np.sqrt(d), np.linalg.norm(lead, axis=-1).std(1) / np.sqrt(d),
            np.abs(lead.sum(-1)).max(1) / np.sqrt(d))))
    return TensorDistribution(dim=d, radius=_distribution(radius, 1.0), sum=_distribution(ssum, 0.0),
                              fraction_radius_in_margin=float(in_r.mean()), fraction_sum_in_margin=float(in_s.mean()),
                              per_leading=per_leading,
                              fraction_on_sphere=float((in_r & in_s).mean()))  # the definitional check; no verdict


def sphere_summary(ln_raw, ln_affine=None, resid=None, *, margins: Mapping = DEFAULT_MARGINS) -> SphereCheck:
    """The definitional check of claim 1: is the LayerNorm output on the sphere of radius sqrt(d) in 1^T z = 0?

    For z of shape (..., d): the distributions of |z|/sqrt(d) (1 on the sphere) and 1^T z/sqrt(d)
    (0 in the hyperplane) and the share of tokens inside both margins (stats.margins sphere_radius for
    |z|/sqrt(d), sphere_sum for 1^T z/sqrt(d)). Raw LN output has radius sqrt(d sigma^2/(sigma^2 + eps)),
    so this holds by definition; no verdict is given here (stats/claims/claim1_sphere.py decides claim 1 on
    the image after the affine map).

    Args:
        ln_raw: LayerNorm output before the affine, (..., d) (NOT divided by sqrt(d)).
        ln_affine: optional output after gamma, beta.
        resid: optional residual stream (contrast).
        margins: StatsConfig.margins (only SPHERE_MARGIN_KEYS are read; a key not given keeps the schema's).

    Returns:
        SphereCheck: one statsfile.TensorDistribution per tensor given (None for a tensor not given), the margins.
    """
    m = _sphere_margins(margins)
    return SphereCheck(_one_summary(ln_raw, m), m, _one_summary(ln_affine, m) if ln_affine is not None else None,
                       _one_summary(resid, m) if resid is not None else None)


@dataclass(frozen=True)
class SphereCheck:
    """`sphere_summary`'s result: the definitional check of each tensor given (None: not given), and its margins."""

    ln_raw: TensorDistribution
    margins: SphereMargins
    ln_affine: TensorDistribution | None = None
    resid: TensorDistribution | None = None

    def to_dict(self) -> dict:
        return {"ln_raw": self.ln_raw.to_dict(), "margins": self.margins.to_dict(),
                "ln_affine": self.ln_affine.to_dict() if self.ln_affine else None,
                "resid": self.resid.to_dict() if self.resid else None}


#: per-layer quantities of `sphere_geometry` (values for z of shape (N, d) per layer)
GEOMETRY_QUANTITIES = ("fraction_on_sphere", "radius_mean", "radius_cv", "mean_offset", "sum_abs_mean")


def _cluster_labels(N: int, n_inputs: int | None, n_tokens: int | None, max_clusters: int) -> tuple[np.ndarray, str]:
    """Resampling unit per walker: the probe input (tokens of one input are dependent), else the walker;
    contiguous units are merged so that at most `max_clusters` remain (a bootstrap over blocks)."""
    if n_inputs and n_tokens and int(n_inputs) * int(n_tokens) == N:
        labels, unit = np.arange(N) // int(n_tokens), "probe input"
    else:
        labels, unit = np.arange(N), "walker"
    G = int(labels.max()) + 1
    if G > max_clusters:
        labels, unit = labels * max_clusters // G, f"contiguous block of {unit}s"
    return labels, unit


def _geometry_stats(m: np.ndarray, d: int) -> GeometryLayers:
    """Per-layer statistics from cluster-mean features m (..., L, 7 + d) (see `sphere_geometry`), each (..., L)."""
    c = m[..., 0]
    r, r2 = m[..., 1] / c, m[..., 2] / c
    with np.errstate(invalid="ignore", divide="ignore"):
        return GeometryLayers(fraction_on_sphere=m[..., 4] / c, radius_mean=r,
                              radius_cv=np.sqrt(np.clip(r2 - r * r, 0.0, None)) / r,
                              mean_offset=np.linalg.norm(m[..., 7:] / c[..., None], axis=-1) / np.sqrt(d),
                              sum_abs_mean=m[..., 3] / c)


def sphere_geometry(z, *, margins: Mapping = DEFAULT_MARGINS, n_inputs: int | None = None, n_tokens: int | None = None,
                    confidence_level: float = DEFAULT_STATS.confidence_level, n_resamples: int = DEFAULT_STATS.n_resamples,
                    max_clusters: int = 64, rng=DEFAULT_STATS.seed) -> SphereGeometry:
    """How far token states of each layer are from the sphere of radius sqrt(d) (claim 1), with CIs.

    For z of shape (L, N, d) (layers, tokens, dims) and each layer: with r = |z|/sqrt(d) and
    s = 1^T z / sqrt(d),
      fraction_on_sphere = share of tokens with r and s inside the margins (the equivalence statistic),
      radius_mean = E r (1 on the sphere),
      radius_cv = sd(|z|) / E|z| (0 on any sphere; the spread an affine map or an unnormalised stream adds),
      mean_offset = |E z| / sqrt(d) (0 for a cloud centred at the origin; raised by beta and by tokens
          sharing a direction, so compare tensors rather than reading it alone),
      sum_abs_mean = E |s| (0 in the hyperplane 1^T z = 0).
    Intervals: percentile bootstrap over probe inputs (tokens of one input are dependent), via
    multinomial weights on per-input sums (ratio estimators); "pooled" averages each statistic over
    layers inside every resample. mean_offset_floor = sqrt(mean |z - E z|^2 / (G d)) is the offset
    that G independent units would show by chance.

    Args:
        z: (L, N, d) or (N, d), NOT divided by sqrt(d).
        margins: StatsConfig.margins (SPHERE_MARGIN_KEYS read, the schema's where not given).
        n_inputs, n_tokens: walker i*n_tokens + t is token t of input i (sidecar fields); else walkers are units.

    Returns:
        statsfile.SphereGeometry: per_layer (LayerValues over layers) and pooled (PooledValue) for each of
        GEOMETRY_QUANTITIES, radius_quantiles, sum_quantiles, mean_offset_floor, n_clusters, cluster, ...
    """
    z = np.asarray(z, dtype=float)
    if z.ndim == 2:
        z = z[None]
    if z.ndim != 3 or z.shape[-1] < 2:
        raise ValueError(f"expected an array (L, N, d) with d >= 2, got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("input contains non-finite values")
    m = _sphere_margins(margins)
    L, N, d = z.shape
    r = np.linalg.norm(z, axis=-1) / np.sqrt(d)  # (L, N)
    s = z.sum(-1) / np.sqrt(d)
    in_r = (r >= m.sphere_radius[0]) & (r <= m.sphere_radius[1])
    in_s = (s >= m.sphere_sum[0]) & (s <= m.sphere_sum[1])
    feats = np.concatenate([np.stack([np.ones_like(r), r, r * r, np.abs(s), in_r & in_s, in_r, in_s], -1), z], -1)
    labels, unit = _cluster_labels(N, n_inputs, n_tokens, max_clusters)
    G = int(labels.max()) + 1
    F = np.zeros((G, L, 7 + d))
    np.add.at(F, labels, np.swapaxes(feats, 0, 1))  # (G, L, 7 + d) per-cluster sums
    point = _geometry_stats(F.mean(0), d)
    boot = ClusterBootstrap(np.arange(G), n_resamples=n_resamples, rng=rng)
    reps = _geometry_stats((boot.weights @ F.reshape(G, -1) / G).reshape(-1, L, 7 + d), d)  # (B, L) each
    a = (1 - confidence_level) / 2
    per_layer, pooled = {}, {}
    for q in GEOMETRY_QUANTITIES:
        est, rep = getattr(point, q), getattr(reps, q)
        lo, hi = (np.nanquantile(rep, [a, 1 - a], axis=0) if G > 1 else (est, est))
        per_layer[q] = LayerValues(*(to_jsonable(v) for v in (est, lo, hi)))
        plo, phi = (np.nanquantile(rep.mean(-1), [a, 1 - a]) if G > 1 else (est.mean(),) * 2)
        pooled[q] = PooledValue(to_jsonable(float(est.mean())), to_jsonable([float(plo), float(phi)]))
    centred = z - z.mean(1, keepdims=True)
    qs = [0.01, 0.5, 0.99]
    levels = tuple(str(q) for q in qs)
    return SphereGeometry(
        n_layers=L, n_walkers=N, dim=d, n_clusters=G, cluster=unit, margins=m,
        confidence_level=confidence_level, n_resamples=n_resamples,
        per_layer=GeometryLayers(**per_layer), pooled=GeometryLayers(**pooled),
        radius_quantiles=Quantiles(levels, tuple(to_jsonable(list(np.quantile(r, qs, axis=1))))),
        sum_quantiles=Quantiles(levels, tuple(to_jsonable(list(np.quantile(s, qs, axis=1))))),
        mean_offset_floor=to_jsonable(np.sqrt(np.mean(np.sum(centred**2, -1), 1) / (G * d))),
        method="percentile bootstrap over " + unit + "s; pooled = mean over layers")


#: the three tensors claim 1 compares, as named in the stats JSON
SPHERE_TENSORS = ("ln_raw", "ln_affine", "resid")


def tensor_sphere_summary(z, *, tensor: str, z_raw=None, margins: Mapping = DEFAULT_MARGINS,
                          n_inputs: int | None = None, n_tokens: int | None = None,
                          confidence_level: float = DEFAULT_STATS.confidence_level,
                          n_resamples: int = DEFAULT_STATS.n_resamples, rng=DEFAULT_STATS.seed) -> SphereSummary:
    """The definitional check, `sphere_geometry` and the geometry about the centre for one tensor of claim 1.

    Args:
        z: (L, N, d), NOT divided by sqrt(d).
        tensor: "ln_raw" (LN output before the affine: on the sphere by definition), "ln_affine" (after gamma,
            beta: what the next layer reads; the claim is decided here) or "resid" (residual stream).
        z_raw: for "ln_affine", the same tokens before the affine (L, N, d): gamma and beta are recovered from
            the pair (sphere_fit.affine_map_fit) and the spread is measured about beta; without it, about the
            token mean.

    Returns:
        statsfile.SphereSummary: tensor, distribution (the definitional check), geometry, about (sphere_fit.sphere_about),
        affine_map (the statsfile.AffineMap affine_map_fit recovered, or None), margins, definitional.
    """
    from brownformer.stats.sphere.sphere_fit import affine_map_fit, sphere_about
    if tensor not in SPHERE_TENSORS:
        raise ValueError(f"tensor must be one of {SPHERE_TENSORS}, got {tensor!r}")
    m = _sphere_margins(margins)
    summ = _one_summary(z, m)
    geom = sphere_geometry(z, margins=m, n_inputs=n_inputs, n_tokens=n_tokens, confidence_level=confidence_level,
                           n_resamples=n_resamples, rng=rng)
    z3 = np.asarray(z, float)
    z3 = z3[None] if z3.ndim == 2 else z3
    affine, centre = None, None
    if tensor == "ln_raw":
        centre = np.zeros(z3.shape[-1])  # the sphere of the definition is centred at the origin
    elif tensor == "ln_affine" and z_raw is not None:
        affine = affine_map_fit(np.asarray(z_raw, float).reshape(z3.shape), z3)
        centre = np.asarray(affine.beta, float)
    about = sphere_about(z3, centre, n_inputs=n_inputs, n_tokens=n_tokens, confidence_level=confidence_level,
                         n_resamples=n_resamples, rng=rng)
    return SphereSummary(tensor=tensor, distribution=summ, geometry=geom, about=about, margins=m,
                         definitional=tensor == "ln_raw", affine_map=affine)
