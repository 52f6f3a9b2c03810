"""What the claim rules read of the per-file statistics and the calibration, parsed once into typed records.

The producers (stats/diffusion, stats/sphere, stats/markov, stats/core/shapes.py) hand the claims JSON mappings:
a per-file battery output (brownformer.statsfile.BatteryStats's JSON), the calibration at a file's shape
(shapes.calibration_for), a file's sphere summary, its attention statistics. Each record below takes the fields a
rule reads, by name (`view`: the field's name is the key; a key the mapping lacks is the field's default), so the
rule code uses attributes and a misspelt key is an AttributeError where it is read, not a silent None. The
producer's own functions (window_reading.window_effects, rule.decide_one, replica_sets.split_by_unit) still take the
mapping; the records keep it beside the parsed fields (`result`).
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping, TypeVar

from brownformer.stats.diffusion.replica_sets import is_replica_file
from brownformer.stats.diffusion.window_reading import window_effects
from brownformer.statsfile import (AffineMap, AttentionStats, ByQuantity, EffectResult, FittedCalibration, HeadIsotropy,
                                   HeadKernels, LayerValues, NullModels, QuantityAggregates, ShapeCalibration,
                                   SphereSummary)

__all__ = ["view", "shape_id", "SizeBounds", "Exponent", "WindowNull", "WindowReading", "FileCalibration", "TrajectoryFile",
           "trajectory_files"]

T = TypeVar("T")


def view(cls: type[T], d: Mapping | None, **known) -> T | None:
    """`cls` from the keys of `d` that are its fields (nested records through their own `view` in `cls._views`);
    None for a missing or empty mapping. `known` sets fields computed by the caller."""
    if not d and not known:
        return None
    d = d or {}
    nested = getattr(cls, "_views", {})
    values = {}
    for f in fields(cls):
        if f.name in known:
            values[f.name] = known[f.name]
        elif f.name in d:
            v = d[f.name]
            values[f.name] = view(nested[f.name], v) if f.name in nested and isinstance(v, Mapping) else v
        elif f.default is MISSING and f.default_factory is MISSING:
            values[f.name] = None
    return cls(**values)


def _float(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


@dataclass(frozen=True)
class Exponent:
    """An MSD exponent as a file stores it ("effect" layout): the estimate and its interval."""
    estimate: float | None = None
    confidence_interval: list | None = None

    @property
    def value(self) -> float:
        """The estimate as a float (NaN when undefined)."""
        return _float(self.estimate)


def _exponent(e: EffectResult | None) -> Exponent | None:
    """The MSD effect the verdict reads (window_reading.window_effects' record) as an Exponent."""
    if e is None:
        return None
    return Exponent(e.estimate, None if e.confidence_interval is None else list(e.confidence_interval))


@dataclass(frozen=True)
class WindowNull:
    """The window exponent's own rule on simulated Brownian motion at the file's shape."""
    size: float
    n_replicates: int


@dataclass(frozen=True)
class _WindowEffect:
    null: WindowNull | None = None
    _views = {"null": WindowNull}


@dataclass(frozen=True)
class WindowReading:
    """A file's local-slope window reading (stats/diffusion/window_reading.py), what the claim reads of it."""
    classification: str | None = None
    description: str | None = None
    ensemble_exponent: Exponent | None = None
    effect: _WindowEffect | None = None
    _views = {"ensemble_exponent": Exponent, "effect": _WindowEffect}

    @property
    def null(self) -> WindowNull | None:
        return self.effect.null if self.effect else None


@dataclass(frozen=True)
class _Walkers:
    reading: Any = None
    rates: Any = None


@dataclass(frozen=True)
class _Settings:
    confidence_level: float | None = None


@dataclass(frozen=True)
class _Identified:
    """A block known by its "id" (a calibration shape, a fitted null)."""
    id: str | None = None


def shape_id(shape: Mapping | None) -> str | None:
    """The id of a calibration shape (stats/core/shapes.py CalibrationShape's JSON); None without one."""
    return view(_Identified, shape).id if shape else None


class SizeBounds:
    """What a calibration's size reads as when claims pool it (a file's `FileCalibration`, a level's
    `details.WorstCalibration`): needs the fields `size`, `size_upper`, `shape`."""

    @property
    def upper(self) -> float:
        """The size's upper bound (the size itself for a table without bounds)."""
        return self.size if self.size_upper is None else self.size_upper

    @property
    def shape_id(self) -> str | None:
        return shape_id(self.shape)


@dataclass(frozen=True)
class FileCalibration(SizeBounds):
    """The rule's size and power at a file's exact shape (shapes.calibration_for), with its fitted null beside it;
    also a run's or claim's least favourable calibration (`claim3_brownian._worst_calibration`)."""
    shape: dict
    size: float
    size_se: float
    n_replicates: int
    equivalence_power: float
    power: dict[str, float]
    size_upper: float | None = None
    power_lower: dict[str, float] | None = None
    power_n_replicates: int | None = None
    fitted: FittedCalibration | None = None  # (shapes.fitted_calibration_for)
    # a run's or claim's calibration: the worst fitted size over its files and how many had one
    size_fitted: float | None = None
    size_fitted_upper: float | None = None
    n_fitted: int | None = None
    n_files: int | None = None
    raw: dict = field(default_factory=dict, repr=False)  # the mapping as the calibration gave it (claims.json)
    _views = {"fitted": FittedCalibration}

    @classmethod
    def at_shape(cls, cal: ShapeCalibration, fitted: FittedCalibration | None) -> FileCalibration:
        """A file's calibration: the table's at its shape (shapes.calibration_for) with its fitted null's beside it;
        `raw` is what claims.json writes of it."""
        raw = {**cal.to_dict(), "fitted": fitted.to_dict() if fitted else None}
        return cls(shape=raw["shape"], size=cal.size, size_se=cal.size_se, n_replicates=cal.n_replicates,
                   equivalence_power=cal.equivalence_power, power={p.key: p.value for p in cal.power},
                   size_upper=cal.size_upper, power_lower={p.key: p.value for p in cal.power_lower},
                   power_n_replicates=cal.power_n_replicates, fitted=fitted, raw=raw)



@dataclass(frozen=True)
class TrajectoryFile:
    """One per-file battery output of a claim-3 family, as the rule reads it.

    Attributes:
        run: the run (or replica set's base run) it belongs to; path: the trajectory file.
        result: the battery's JSON mapping (for the producer's functions that take it).
        kind, n_times, n_groups, classification: as the file states them.
        exponent: the window exponent (the verdict's MSD effect), else the full-range one.
        full_range: the full-range MSD exponent; window: the window reading; walkers: per-walker reading and rates.
        calibration_shape: the shape the calibration simulated; fitted_id: the fitted null's id.
        confidence_level: the level its intervals are at (its settings; None: the claim's).
        replica: whether it holds replica contrasts.
    """
    run: str
    path: str
    result: Mapping
    kind: str | None
    n_times: int | None
    n_groups: int | None
    classification: str | None
    exponent: Exponent
    full_range: Exponent | None
    window: WindowReading | None
    walkers: _Walkers | None
    calibration_shape: dict | None
    fitted_id: str | None
    confidence_level: float | None
    replica: bool

    @property
    def shape_id(self) -> str | None:
        return shape_id(self.calibration_shape)

    @classmethod
    def from_result(cls, run: str, path: str, result: Mapping) -> TrajectoryFile:
        """The file from its battery JSON (parsed once)."""
        effects = window_effects(result)
        full = view(Exponent, result.get("msd_exponent"))
        settings = view(_Settings, result.get("settings"))
        fitted = view(_Identified, result.get("fitted_null"))
        return cls(run=run, path=path, result=result, kind=result.get("kind"), n_times=result.get("n_times"),
                   n_groups=result.get("n_groups"), classification=result.get("classification"),
                   exponent=_exponent(effects.get("msd_exponent")) or full or Exponent(), full_range=full,
                   window=view(WindowReading, result.get("local_slopes")), walkers=view(_Walkers, result.get("walkers")),
                   calibration_shape=result.get("calibration_shape") or None, fitted_id=fitted.id if fitted else None,
                   confidence_level=settings.confidence_level if settings else None,
                   replica=is_replica_file(result))


def trajectory_files(files: list[Mapping]) -> list[TrajectoryFile]:
    """[{"run", "path", "result"}] (stats_stage/summary.py) as typed records."""
    return [f if isinstance(f, TrajectoryFile) else TrajectoryFile.from_result(f["run"], f["path"], f["result"])
            for f in files]


@dataclass(frozen=True)
class SphereFile:
    """One depth file's sphere summary (stats/sphere/sphere_distance.py), as claim 1 reads it.

    Attributes:
        run, path, capture: where it comes from; ln: the LayerNorm placement its sidecar states (None: unknown).
        tensor: "ln_raw", "ln_affine" or "resid"; step: the training step of the capture.
        per_layer: quantity -> LayerValues of the geometry about the fitted centre (empty when not measured).
        centre: the fitted centre; fraction_on_sphere: the pooled fraction of tokens on the sphere (None: not
        measured); affine_map: the recovered affine map's quantities (None: not recovered).
    """
    run: str
    path: str | None
    capture: int | None
    ln: str | None
    tensor: str | None
    step: int | None
    per_layer: dict[str, LayerValues]
    measured_about: bool
    centre: Any
    fraction_on_sphere: float | None
    affine_map: AffineMap | None

    @classmethod
    def from_entry(cls, f: Mapping) -> SphereFile:
        """The file from the summary's entry {"run", "path", "capture", "sphere": its statsfile.SphereSummary}."""
        s: SphereSummary = f["sphere"]
        layers = s.about.per_layer
        return cls(run=f["run"], path=f.get("path"), capture=f.get("capture"), ln=s.ln, tensor=s.tensor, step=s.step,
                   per_layer={q.name: getattr(layers, q.name) for q in fields(layers)},
                   measured_about=True, centre=s.about.centre,
                   fraction_on_sphere=float(s.geometry.pooled.fraction_on_sphere.estimate), affine_map=s.affine_map)


@dataclass(frozen=True)
class PerMatrix:
    """Per-matrix values of an attention file or of a fit (one value per matrix of each quantity) and their shape."""
    per_matrix: ByQuantity[list]
    shape: list | None  # (..., n, n); None when the file does not say


@dataclass(frozen=True)
class AttentionFile:
    """One attention file's statistics (stats_stage/attention_files.py, brownformer.statsfile.AttentionStats), as
    claim 2 reads it.

    Attributes:
        step: the training step of the capture (0: the baseline); causal: a causal mask.
        values: its per-matrix values and shape; aggregate: each quantity's aggregate over its matrices.
        null_models: each null's aggregates; head_layers: the weights' head isotropy per layer (empty when
        not measured); heads_undefined: why head isotropy is undefined (None: measured, or no head kernels at all);
        has_head_kernels: whether head kernels were computed; subspace_fit: the per-head subspace vMF fit's values
        (None: not fitted); head_averaged: the head-averaged kernel's aggregates.
    """
    step: int | None
    causal: bool
    values: PerMatrix
    aggregate: QuantityAggregates
    null_models: NullModels
    has_head_kernels: bool
    heads_undefined: str | None
    head_layers: list[HeadIsotropy]
    subspace_fit: PerMatrix | None
    head_averaged: QuantityAggregates | None

    @classmethod
    def from_result(cls, result: AttentionStats | Mapping) -> AttentionFile:
        """The file from its record (or its JSON, parsed once)."""
        r = AttentionStats.from_dict(result, "attention file")
        hk = r.head_kernels or HeadKernels()
        fit = hk.subspace_vmf if hk.subspace_vmf is not None and hk.subspace_vmf.per_matrix is not None else None
        return cls(step=r.step, causal=bool(r.causal), values=PerMatrix(r.per_matrix, r.shape),
                   aggregate=r.aggregate, null_models=r.null_models or NullModels(),
                   has_head_kernels=r.head_kernels is not None, heads_undefined=hk.why_undefined,
                   head_layers=list(hk.per_layer or []),
                   subspace_fit=PerMatrix(fit.per_matrix, fit.shape) if fit else None,
                   head_averaged=r.head_averaged.aggregate if r.head_averaged else None)
