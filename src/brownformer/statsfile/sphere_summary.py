"""Claim 1's sphere summary of one depth file (stats/sphere/sphere_distance.py tensor_sphere_summary): the definitional
check of a tensor, its distance from the sphere per layer, the geometry about a centre and a LayerNorm's recovered
affine map, as records of the per-run statistics contract (files.py's BatteryStats and SphereStats hold one)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from ._results import Record, build_record

__all__ = ["AffineMap", "Quantiles", "Distribution", "PerLeading", "SphereMargins", "TensorDistribution", "LayerValues",
           "PooledValue", "GeometryLayers", "SphereGeometry", "AboutLayers", "SphereAbout", "SphereSummary"]


@dataclass(frozen=True)
class AffineMap(Record):
    """A LayerNorm's gain and bias recovered from its input-output pairs (stats/sphere/sphere_fit.py affine_map_fit):
    `gamma`, `beta` per layer and dimension; per layer the gain's coefficient of variation and condition number,
    Wielandt's cosine bound, the centre's offset in radii and the fit's relative residual (null where undefined)."""

    gamma: list
    beta: list
    gain_cv: list
    gain_condition: list
    wielandt_cosine: list
    offset_ratio: list
    relative_residual: list


@dataclass(frozen=True)
class Quantiles:
    """Quantiles keyed by their level as JSON writes it ("0.01", "0.5", ...): `levels` and one value (a number, or a
    list over layers) per level."""

    levels: tuple[str, ...]
    values: tuple

    def to_dict(self) -> dict:
        return dict(zip(self.levels, self.values))

    @classmethod
    def from_dict(cls, d: Any, where: str = "quantiles") -> Quantiles:
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a JSON object of quantiles by level, got {type(d).__name__}")
        return cls(tuple(d), tuple(d.values()))


@dataclass(frozen=True)
class Distribution(Record):
    """One per-token quantity's distribution (|z|/sqrt(d) or 1^T z/sqrt(d)): mean, sd, quantiles, the largest
    deviation from the sphere's value, the number of tokens."""

    mean: float
    sd: float | None
    quantiles: Quantiles
    max_abs_deviation: float
    n: int

    _nested = {"quantiles": Quantiles.from_dict}


@dataclass(frozen=True)
class PerLeading(Record):
    """Per leading index (layer) of a tensor: mean and sd of |z|/sqrt(d), the largest |1^T z|/sqrt(d)."""

    radius_mean: list
    radius_sd: list
    sum_abs_max: list


@dataclass(frozen=True)
class SphereMargins(Record):
    """The definitional check's margins (stats.margins sphere_radius, sphere_sum): (low, high) each."""

    sphere_radius: list
    sphere_sum: list


@dataclass(frozen=True, kw_only=True)
class TensorDistribution(Record):
    """The definitional check of one tensor (stats/sphere/sphere_distance.py): the radius and sum distributions and
    the share of tokens inside each margin and inside both (`fraction_on_sphere`); per layer for (L, N, d)."""

    dim: int
    radius: Distribution
    sum: Distribution
    fraction_radius_in_margin: float
    fraction_sum_in_margin: float
    per_leading: PerLeading | None = None
    fraction_on_sphere: float

    _nested = {"radius": Distribution.from_dict, "sum": Distribution.from_dict, "per_leading": PerLeading.from_dict}


@dataclass(frozen=True)
class LayerValues(Record):
    """One quantity per layer: the estimate and its interval (null where undefined)."""

    estimate: list
    ci_low: list
    ci_high: list

    def cells(self):
        """(layer, estimate, low, high) for each layer."""
        return enumerate(zip(self.estimate, self.ci_low, self.ci_high))


@dataclass(frozen=True)
class PooledValue(Record):
    """One quantity averaged over layers, with its interval."""

    estimate: float
    confidence_interval: list


@dataclass(frozen=True)
class GeometryLayers(Record):
    """stats/sphere/sphere_distance.py GEOMETRY_QUANTITIES, per layer or pooled over layers."""

    fraction_on_sphere: Any
    radius_mean: Any
    radius_cv: Any
    mean_offset: Any
    sum_abs_mean: Any

    @classmethod
    def parser(cls, value) -> Callable:
        """from_dict with each quantity parsed by `value` (LayerValues or PooledValue)."""
        return lambda d, where: build_record(cls, d, where, {f.name: value.from_dict for f in fields(cls)})


@dataclass(frozen=True)
class SphereGeometry(Record):
    """How far token states of each layer are from the sphere (stats/sphere/sphere_distance.py sphere_geometry),
    with percentile-bootstrap intervals over `cluster`s."""

    n_layers: int
    n_walkers: int
    dim: int
    n_clusters: int
    cluster: str
    margins: SphereMargins
    confidence_level: float
    n_resamples: int
    per_layer: GeometryLayers  # of LayerValues
    pooled: GeometryLayers  # of PooledValue
    radius_quantiles: Quantiles
    sum_quantiles: Quantiles
    mean_offset_floor: list
    method: str

    _nested = {"margins": SphereMargins.from_dict, "per_layer": GeometryLayers.parser(LayerValues),
               "pooled": GeometryLayers.parser(PooledValue), "radius_quantiles": Quantiles.from_dict,
               "sum_quantiles": Quantiles.from_dict}


@dataclass(frozen=True)
class AboutLayers(Record):
    """stats/sphere/sphere_fit.py's quantities about the centre, per layer (in the order written)."""

    radius_spread: LayerValues
    offset: LayerValues
    radius_spread_ratio: LayerValues

    _nested = {"radius_spread": LayerValues.from_dict, "offset": LayerValues.from_dict,
               "radius_spread_ratio": LayerValues.from_dict}


@dataclass(frozen=True)
class SphereAbout(Record):
    """The geometry about a centre (stats/sphere/sphere_fit.py sphere_about): radius spread, its ratio to the
    Gaussian-cloud null and the centre's offset per layer; `centre`: "given" (beta, the origin) or "token mean"."""

    n_layers: int
    n_walkers: int
    dim: int
    n_clusters: int
    confidence_level: float
    n_resamples: int
    centre: str
    per_layer: AboutLayers
    null_spread: list
    method: str

    _nested = {"per_layer": AboutLayers.from_dict}


@dataclass(frozen=True)
class SphereSummary(Record):
    """Claim 1 on one depth file (stats/sphere/sphere_distance.py tensor_sphere_summary and the capture it came from)."""

    tensor: str  # "ln_raw" | "ln_affine" | "resid"
    distribution: TensorDistribution
    geometry: SphereGeometry
    about: SphereAbout
    margins: SphereMargins
    definitional: bool
    affine_map: AffineMap | None = None
    ln: str | None = None
    step: int | None = None
    capture: int | None = None
    times: list | None = None

    _nested = {"affine_map": AffineMap.from_dict, "distribution": TensorDistribution.from_dict,
               "geometry": SphereGeometry.from_dict, "about": SphereAbout.from_dict, "margins": SphereMargins.from_dict}
