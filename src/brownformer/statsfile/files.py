"""The per-run statistics files (one per trajectory file) and a run's summary.json (the package docstring says
which blocks are records and which stay mappings)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ._results import (RULE_VERDICTS, SCHEMA_VERSION, Decision, EffectResult, Keyed, KeyedValue, Record,
                       check_version, list_of, plain_value)
from .attention import ByQuantity, HeadAveragedFit, HeadKernels, NullModels, QuantityAggregates
from .sphere_summary import SphereSummary

__all__ = ["CalibrationShape", "ShapeSummary", "ShapeCalibration", "ProcessRates", "EuclideanCurves", "SphereCurves",
           "BatterySettings", "IndexEntry", "Clock", "Curvature", "MomentumBias", "EnsembleExponent", "WindowSpec", "SphereNormalisation", "InputFile", "SlopeWindow", "Envelope", "FileError", "LocalSlopes", "WalkerType", "WalkerPositions", "WalkerDiagnostic", "WalkerReading", "ReplicaContrast", "FittedModel", "FittedCalibration", "FittedNullInfo", "BatteryStats", "SphereStats", "PairedDifference", "InitComparison", "NullModelsInfo", "CriterionVerdict", "AttentionVerdicts", "AttentionStats", "NoiseCapture",
           "NoiseStats", "SummaryRow", "RunStatsSummary", "RunStatsFile", "parse_stats_file"]


@dataclass(frozen=True)
class InputFile(Record):
    """The array a statistics file was computed from: its path and sha256 (and, from `stats trajectory`, whether a
    sidecar was read with it)."""

    path: str
    sha256: str
    sidecar: bool | None = None


@dataclass(frozen=True)
class IndexEntry(Record):
    """One file of a run's trajectories/index.json as the extract stage writes it (probes/extract.py,
    probes/replicas.py, pretrained/trajectories.py), and the "entry" each statistics file records: its `path`
    (relative to the index's folder), `category` ("depth", "training", "weights", "attention", "gradnoise"),
    `kind`, `time`, `layer`, `tensor`, `capture` and, for a replica set's contrasts, `unit` ("replica")."""

    path: str | None = None
    category: str | None = None
    kind: str | None = None
    time: str | None = None
    layer: Any = None
    tensor: str | None = None
    capture: int | None = None
    unit: str | None = None  # written only when set

    def to_dict(self) -> dict:
        """The entry as the extract stage writes it: every key, `unit` only when set."""
        out = asdict(self)
        if self.unit is None:
            del out["unit"]
        return out

    def get(self, key: str, default=None):
        """A key of the entry as written (the mapping view of readers that took the entry's JSON)."""
        return self.to_dict().get(key, default)

    def resolve(self, traj_dir) -> Path:
        """The file's path: `path` as it is when absolute, else under the index's folder."""
        rel = Path(self.path)
        return rel if rel.is_absolute() else Path(traj_dir) / rel


@dataclass(frozen=True)
class Clock(Record):
    """The clock a training-time file is analysed on (its sidecar's "time"), why, and the warm-up it skips."""

    time: str | None
    why: str | None
    warmup: Any


@dataclass(frozen=True)
class SphereNormalisation(Record):
    """What `kind="sphere"` did to the vectors (stats/diffusion/brownian.py): the norms found, and a note when they
    were rescaled to unit length."""

    rescaled_to_unit_length: bool
    norm_min: float
    norm_max: float
    norm_mean: float
    tolerance: float
    note: str | None = None


@dataclass(frozen=True)
class SlopeWindow(Record):
    """Where claim 3's window lies (stats/diffusion/local_slope.py FittingWindow): its first capture and the lags it
    fits, in captures, steps and the file's clock; `why` says how the start was chosen."""

    start_index: int
    used_indices: list
    n_points: int
    start_step: int | None
    min_lag_steps: int | None
    start_clock: float | None
    why: str | None
    lag_range: list | None = None  # [first, last] lag on the file's clock (a window with lags)
    step_range: list | None = None  # [start, last] step (a training file)


@dataclass(frozen=True)
class Envelope(Record):
    """The Brownian null's pointwise band of the local slope: quantiles over simulated replicates at each lag."""

    low: list
    median: list
    high: list
    n_replicates: int
    level: float


@dataclass(frozen=True)
class WindowSpec:
    """What the window exponent of a file needs besides its trajectory: the window's capture indices and the
    parameters of the Brownian motions whose median bias it subtracts. Part of the calibration shape
    (shapes.CalibrationShape.window), so that the calibration simulates the very rule the verdict applies; the
    window reading's "spec" (stats/diffusion/window_reading.py window_spec builds it, spec_window gives its window).
    Hashable (tuples); its JSON keeps every key, "steps" null included."""

    start: int
    used: tuple[int, ...]
    null_rho: float
    null_decay: float  # sphere: total decay of the simulated Brownian motions; 1 euclidean
    envelope_replicates: int
    local_decades: float
    seed: int
    #: the heavy-ball beta of the optimizer that produced the file (sidecar "momentum"; 0: none) and the training
    #: steps of all its captures: the null is then Brownian motion through that momentum (simulate.heavy_ball_brownian)
    momentum: float = 0.0
    steps: tuple[int, ...] | None = None
    #: a replica-contrast file of tokens on the sphere (stats/sphere/replica_null.py): R (0: none), the clock's share
    #: from the common start at the first capture, the sphere in LayerNorm's hyperplane; null_decay: from the start
    replicas: int = 0
    replica_start: float = 0.0
    replica_hyperplane: bool = False

    @property
    def carries_physics(self) -> bool:
        """Whether the null differs from plain Brownian motion in a way every key effect must be corrected for
        (momentum, the sphere of a replica-contrast file): brownian.null_bias."""
        return bool(self.momentum or self.replicas)

    def to_dict(self) -> dict:
        return {**asdict(self), "used": list(self.used), "steps": None if self.steps is None else list(self.steps)}

    @classmethod
    def from_dict(cls, d: dict | WindowSpec | None, where: str | None = None) -> WindowSpec | None:
        """The spec from its JSON (older files lack the momentum and replica keys: their defaults); None for none."""
        if not d or isinstance(d, cls):
            return d or None
        steps = d.get("steps")
        return cls(int(d["start"]), tuple(int(i) for i in d["used"]), float(d["null_rho"]), float(d["null_decay"]),
                   int(d["envelope_replicates"]), float(d["local_decades"]), int(d["seed"]),
                   float(d.get("momentum") or 0.0), None if steps is None else tuple(int(i) for i in steps),
                   int(d.get("replicas") or 0), float(d.get("replica_start") or 0.0),
                   bool(d.get("replica_hyperplane") or False))


@dataclass(frozen=True)
class ShapeSummary(Record):
    """A calibration shape as summaries write it (CalibrationShape.summary): its id, the kind and the geometry its
    null's walkers live on, T, N, d, G, the hyperplane, drift, within-group correlation, decay and window."""

    id: str
    kind: str
    geometry: str
    T: int
    N: int
    d: int
    G: int
    hyperplane: bool
    drift: str
    rho: float
    decay: float
    window: WindowSpec | None

    _nested = {"window": WindowSpec.from_dict}


@dataclass(frozen=True)
class CalibrationShape:
    """Everything the calibration reproduces of one trajectory file (hashable; `id` names it): a battery file's
    "calibration_shape" and its summary row's (stats/core/shapes.py shape_of builds it from the data)."""

    kind: str
    times: tuple[float, ...]  # elapsed share of the clock, 0..1, 4 significant digits
    group_sizes: tuple[int, ...]
    d: int
    hyperplane: bool
    drift: str
    rho: float
    decay: float  # sphere, and the walks of a sphere replica-contrast file (window.replicas): their total decay; else 0
    #: the fitting window the verdict's MSD effect is read on (window_reading.WindowSpec); None: the full-range
    #: exponent (a shape without a window reading)
    window: WindowSpec | None = None

    @property
    def id(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]

    @property
    def n_walkers(self) -> int:
        return int(sum(self.group_sizes))

    def labels(self) -> np.ndarray:
        """(N,) the group of each walker."""
        import numpy as np  # only the calibration needs it; the contract's readers do not
        return np.repeat(np.arange(len(self.group_sizes)), self.group_sizes)

    @property
    def geometry(self) -> str:
        """Where the null's walkers live: "sphere" (a sphere file, or the walks behind a sphere replica-contrast
        file: window.replicas), else "euclidean"."""
        return "sphere" if self.kind == "sphere" or getattr(self.window, "replicas", 0) else "euclidean"

    def summary(self) -> ShapeSummary:
        """The shape as summaries write it (no times or group sizes)."""
        return ShapeSummary(self.id, self.kind, self.geometry, len(self.times), self.n_walkers, self.d,
                            len(self.group_sizes), self.hyperplane, self.drift, self.rho, self.decay, self.window)

    def to_dict(self, *, full: bool = True) -> dict:
        """The summary's fields (id, kind, geometry, T, N, d, G, ...) and, when `full`, the times and group sizes
        `from_dict` needs to rebuild the shape (per-file JSON -> calibration stage)."""
        out = self.summary().to_dict()
        if full:
            out.update(times=list(self.times), group_sizes=list(self.group_sizes))
        return out

    @classmethod
    def from_dict(cls, d: dict | CalibrationShape | None, where: str | None = None) -> CalibrationShape | None:
        """Inverse of to_dict(full=True) (the summary keys are derived, not read); ValueError when a field is
        missing; a CalibrationShape is taken as it is, an empty mapping (no shape recorded) is None."""
        if isinstance(d, cls) or not d:
            return d or None
        try:
            return cls(str(d["kind"]), tuple(float(t) for t in d["times"]), tuple(int(g) for g in d["group_sizes"]),
                       int(d["d"]), bool(d["hyperplane"]), str(d["drift"]), float(d["rho"]), float(d["decay"]),
                       WindowSpec.from_dict(d.get("window")))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where or 'calibration shape'} {d!r} lacks a field ({exc})") from None


@dataclass(frozen=True)
class ProcessRates(Record):
    """How often the rule gave each verdict (RULE_VERDICTS) on one simulated `process` at a file's shape; JSON: the
    rates by verdict, under the process's name."""

    brownian: float
    not_brownian: float
    inconclusive: float
    process: str = ""
    _key = "process"

    def to_dict(self) -> dict:
        return dict(zip(RULE_VERDICTS, (self.brownian, self.not_brownian, self.inconclusive)))

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> ProcessRates:
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict) or sorted(d) != sorted(RULE_VERDICTS):
            raise ValueError(f"{where or 'rates'}: expected the rate of each of {list(RULE_VERDICTS)}, got {d!r}")
        return cls(*(d[v] for v in RULE_VERDICTS))


@dataclass(frozen=True)
class ShapeCalibration(Record):
    """The rule's size and power at a file's exact shape (stats/core/shapes.py calibration_for, from the calibration
    table): size (rate of "not brownian" on Brownian motion) with its gate's upper bound and SE, the rate of
    "brownian" on it, per alternative the power (a verdict other than "brownian") and its lower bound (KeyedValues by
    alternative process), every process's verdict rates, and the replicates of the null and (least) of the
    alternatives."""

    shape: ShapeSummary
    size: float
    size_upper: float
    size_se: float
    equivalence_power: float
    power: Keyed  # of KeyedValue, by alternative process
    power_lower: Keyed  # of KeyedValue, by alternative process
    rates: Keyed  # of ProcessRates
    n_replicates: int
    power_n_replicates: int | None

    _nested = {"shape": ShapeSummary.from_dict, "power": Keyed.parser(KeyedValue.from_dict),
               "power_lower": Keyed.parser(KeyedValue.from_dict), "rates": Keyed.parser(ProcessRates.from_dict)}


@dataclass(frozen=True)
class Curvature(Record):
    """Late minus early half-window exponent (mean over walkers; a power law has 0), with the early and late values,
    the flat margin the classification reads it against and the Brownian null's 95% range of it."""

    estimate: float
    confidence_interval: list
    tost_interval: list
    early: float
    late: float
    flat_margin: float
    null_range: list


@dataclass(frozen=True)
class MomentumBias(Record):
    """What the file's momentum (or the sphere of a replica-contrast file) alone gives a key effect: the median on the
    simulated null less the Brownian value (`bias`), and that value (`null_value`)."""

    bias: float
    null_value: float
    effect: str = ""  # its key (LocalSlopes.momentum_bias)
    _key = "effect"


@dataclass(frozen=True)
class EnsembleExponent(Record):
    """The descriptive fit y = c + D tau^alpha of the window's ensemble curve: alpha (`estimate`) with its interval,
    the fitted offset c, D, and how it was fitted."""

    estimate: float
    confidence_interval: list
    fitted_offset: float
    D: float
    fit: str


@dataclass(frozen=True)
class LocalSlopes(Record):
    """Claim 3's reading on the window fixed before the data (stats/diffusion/window_reading.py)."""

    classification: str
    description: str
    effect: EffectResult
    window: SlopeWindow | None = None
    curvature: Curvature | None = None
    ensemble_exponent: EnsembleExponent | None = None  # descriptive
    storage_offset: float | None = None
    tau: list | None = None
    curve: list | None = None
    local_slope: list | None = None
    envelope: Envelope | None = None
    null_decay: float | None = None
    spec: WindowSpec | None = None  # the window as the calibration simulates it
    momentum_bias: Keyed | None = None  # of MomentumBias: what the file's momentum alone gives each key effect

    _nested = {"effect": EffectResult.effect_from_dict, "window": SlopeWindow.from_dict, "envelope": Envelope.from_dict,
               "curvature": Curvature.from_dict, "momentum_bias": Keyed.parser(MomentumBias.from_dict),
               "spec": WindowSpec.from_dict, "ensemble_exponent": EnsembleExponent.from_dict}


@dataclass(frozen=True)
class WalkerType(Record):
    """One token type's walkers (stats/diffusion/walkers.py token_types): how many, and the quantiles of their
    window exponents and rates (None: no walker with a usable slope)."""

    n: int
    exponent_quantiles: list | None
    rate_quantiles: list | None
    token_type: str = ""  # its key (WalkerReading.by_type)
    _key = "token_type"


@dataclass(frozen=True)
class WalkerPositions(Record):
    """Per token position, the walkers' median window exponent and rate (files with positions)."""

    median_exponent: list
    median_rate: list


@dataclass(frozen=True)
class WalkerDiagnostic(Record):
    """One per-walker diagnostic of the window (stats/diffusion/walkers.py andi_diagnostics): the data's value and the
    Brownian null's 2.5, 50 and 97.5% quantiles of it (None: undefined on the null)."""

    estimate: float
    null: list | None
    name: str = ""  # its key (WalkerReading.diagnostics)
    _key = "name"


@dataclass(frozen=True)
class WalkerReading(Record):
    """A file's "walkers" block (stats/diffusion/walkers.py walker_reading): the per-walker window exponents and rates
    against their range on Brownian motion at the file's shape, and the reading ("mixed", "anomalous",
    "brownian-like", or "undefined" with only `why`). Numbers are written as they are (NaN as null)."""

    reading: str
    why: str
    rates: str | None = None
    quantile_levels: list | None = None
    exponent_quantiles: list | None = None
    rate_quantiles: list | None = None
    null_exponent_range: list | None = None
    null_exponent_quantiles: list | None = None
    share_outside: float | None = None
    null_share_outside_limit: float | None = None
    log10_rate_iqr: float | None = None
    null_log10_rate_iqr_limit: float | None = None
    exponent_iqr: float | None = None
    null_exponent_iqr_limit: float | None = None
    n_valid: int | None = None
    by_type: Keyed | None = None  # of WalkerType, by the token types the data have
    by_position: WalkerPositions | None = None
    diagnostics: Keyed | None = None  # of WalkerDiagnostic (walkers.andi_diagnostics)

    _nested = {"by_type": Keyed.parser(WalkerType.from_dict), "by_position": WalkerPositions.from_dict,
               "diagnostics": Keyed.parser(WalkerDiagnostic.from_dict)}

    def to_dict(self) -> dict:
        """{"reading", "why"} when undefined; else every key in the producer's order; "by_position" and
        "diagnostics" when set."""
        optional = ("by_position", "diagnostics")
        if self.reading == "undefined":
            out = {"reading": self.reading, "why": self.why}
        else:
            names = [f.name for f in fields(self) if f.name not in ("reading", "why", "rates", *optional)]
            out = {"reading": self.reading, "rates": self.rates, "why": self.why,
                   **{k: plain_value(getattr(self, k)) for k in names}}
        out.update({k: plain_value(getattr(self, k)) for k in optional if getattr(self, k) is not None})
        return out


@dataclass(frozen=True)
class ReplicaContrast(Record):
    """What a fitted null of a sphere replica-contrast file carries of the sphere (stats/sphere/replica_null.py):
    the replicas R, the clock's share from the common start, the walks' total decay, LayerNorm's hyperplane."""

    replicas: int
    replica_start: float
    decay: float
    hyperplane: bool


@dataclass(frozen=True)
class FittedModel(Record):
    """A file's fitted Brownian null as described in JSON (stats/diffusion/fitted_null.py FittedNull.summary): no
    arrays of walkers, the spread of their rates and the anisotropy of the coordinates instead."""

    kind: str
    drift: str
    rho_within: float
    rho_between: float
    walker_rate_spread: float | None
    walker_rate_cv: float | None
    anisotropy: float
    storage: str
    storage_factor: float
    momentum: float
    contrast: ReplicaContrast | None

    _nested = {"contrast": ReplicaContrast.from_dict}


@dataclass(frozen=True)
class FittedCalibration(Record):
    """The rule's size under a file's fitted null (stats/core/shapes.py fitted_calibration_for: the calibration
    table's "fitted" rows): the rate of "not brownian" (`size`) with its gate's upper bound, the rate of "brownian",
    the replicates, and the model simulated (None: the table does not describe it)."""

    id: str
    size: float
    size_upper: float
    n_replicates: int
    equivalence_power: float
    model: FittedModel | None

    _nested = {"model": FittedModel.from_dict}


@dataclass(frozen=True)
class FittedNullInfo(Record):
    """A battery file's fitted null: its id (the calibration table's shape_id), the calibration under it (None: not
    simulated) and, from `stats trajectory --calibrate`, the model fitted."""

    id: str
    calibration: FittedCalibration | None
    model: FittedModel | None = None

    _nested = {"calibration": FittedCalibration.from_dict, "model": FittedModel.from_dict}


@dataclass(frozen=True)
class EuclideanCurves(Record):
    """A euclidean file's curves (stats/diffusion/brownian.py): the MSD against the lag `tau`, and the log-log slope
    over the first and second half of the lags (the classification's mean-reversion check)."""

    msd: list
    tau: list
    early_slope: float | None
    late_slope: float | None


@dataclass(frozen=True)
class SphereCurves(Record):
    """A sphere file's curves (stats/diffusion/brownian.py): the mean cosine and second harmonic against the lag
    `tau`, how many lags are above the noise floor, the mean off-diagonal Gram cosine per capture with its prediction
    under spherical Brownian motion, and the early and late slopes of the linearised cosine."""

    mean_cos: list
    second_harmonic: list
    tau: list
    n_usable_times: int
    gram_offdiagonal: list
    gram_offdiagonal_bm_prediction: list
    early_slope: float | None
    late_slope: float | None


def _curves(d: Any, where: str) -> EuclideanCurves | SphereCurves:
    """A file's "curves" as the record of its kind (told by its keys)."""
    if isinstance(d, (EuclideanCurves, SphereCurves)):
        return d
    cls = SphereCurves if isinstance(d, dict) and "mean_cos" in d else EuclideanCurves
    return cls.from_dict(d, where)


@dataclass(frozen=True)
class BatterySettings(Record):
    """The StatsConfig values a battery file was computed with: its levels, resamples and walker cap, every margin
    (KeyedValues of (low, high) by margin name, the config's stats.margins) and how intervals are built."""

    confidence_level: float
    alpha: float
    tost_level: float
    n_resamples: int
    max_walkers: int
    margins: Keyed  # of KeyedValue, by margin name
    interval: str

    _nested = {"margins": Keyed.parser(KeyedValue.from_dict)}


@dataclass(frozen=True)
class BatteryStats(Record):
    """The Brownian battery, verdict and description of one trajectory (brownian.trajectory_battery, the window
    reading, the clock and input; run_id, category and entry when written by `stats run`)."""

    kind: str
    n_times: int
    n_walkers: int
    n_walkers_total: int
    n_groups: int
    dim: int
    span_dimension: int
    hyperplane: bool
    times: list
    drift_removed: str
    msd_exponent: EffectResult
    diffusion_coefficient: EffectResult
    tests: list[EffectResult]
    effects: Keyed  # of EffectResult ("effect" layout), by test name: the key effects with their margins
    key_effects: list[str]
    verdict: str  # "brownian" | "not brownian" | "inconclusive"
    reason: str
    brownian: bool
    classification: str | None
    flags: list[str]
    within_group_correlation: float | None
    calibration_shape: CalibrationShape
    curves: EuclideanCurves | SphereCurves
    settings: BatterySettings
    calibration: ShapeCalibration | None
    schema_version: int = SCHEMA_VERSION
    calibration_note: str | None = None
    classification_note: str | None = None
    clock_check: Keyed | None = None  # of EffectResult ("effect" layout), by clock: the MSD exponent on it
    sphere_normalisation: SphereNormalisation | None = None
    local_slopes: LocalSlopes | None = None
    walkers: WalkerReading | None = None
    verdict_full_range: str | None = None
    reason_full_range: str | None = None
    classification_full_range: str | None = None
    time: str | None = None
    clock: Clock | None = None
    input: InputFile | None = None
    fitted_null: FittedNullInfo | None = None
    rule_verdict: str | None = None  # `stats trajectory --calibrate`: the rule's verdict before the gates
    rule_reason: str | None = None
    calibration_seconds: float | None = None
    run_id: str | None = None
    category: str | None = None
    entry: IndexEntry | None = None
    sphere: SphereSummary | None = None

    def test(self, name: str) -> EffectResult | None:
        return next((t for t in self.tests if t.name == name), None)

    @property
    def decision(self) -> Decision:
        """The file's verdict as written (the rule's, on the window exponent; after the gates where calibrated)."""
        return Decision(self.verdict, self.reason, alpha=self.settings.alpha if self.settings else None)

    _nested = {
            "msd_exponent": EffectResult.effect_from_dict, "diffusion_coefficient": EffectResult.effect_from_dict,
            "tests": list_of(EffectResult.from_dict), "effects": Keyed.parser(EffectResult.effect_from_dict),
            "clock_check": Keyed.parser(EffectResult.effect_from_dict), "local_slopes": LocalSlopes.from_dict,
            "curves": _curves, "settings": BatterySettings.from_dict,
            "sphere": SphereSummary.from_dict, "input": InputFile.from_dict, "clock": Clock.from_dict,
            "sphere_normalisation": SphereNormalisation.from_dict, "calibration_shape": CalibrationShape.from_dict,
            "entry": IndexEntry.from_dict, "fitted_null": FittedNullInfo.from_dict, "walkers": WalkerReading.from_dict,
            "calibration": ShapeCalibration.from_dict}


@dataclass(frozen=True)
class SphereStats(Record):
    """A depth file analysed for claim 1 only: the after-affine LN output (`battery` says why), or a file with
    too few layers for the battery (`battery_error`)."""

    sphere: SphereSummary
    kind: str | None = None
    battery: str | None = None
    battery_error: str | None = None
    schema_version: int = SCHEMA_VERSION
    run_id: str | None = None
    category: str | None = None
    entry: IndexEntry | None = None
    input: InputFile | None = None

    _nested = {"sphere": SphereSummary.from_dict, "input": InputFile.from_dict, "entry": IndexEntry.from_dict}


@dataclass(frozen=True)
class PairedDifference(Record):
    """One attention quantity at a capture against step 0 (stats/markov/attention_capture.py paired_difference): the
    means of both, the mean paired difference with its confidence interval, over `n_units` units."""

    capture_mean: float
    init_mean: float
    difference: float
    confidence_interval: list
    n_units: int
    quantity: str = ""  # its key (InitComparison.quantities)
    _key = "quantity"


@dataclass(frozen=True)
class InitComparison(Record):
    """An attention file against the run's step-0 attention, per quantity; `unit`: what a resampled unit is."""

    quantities: Keyed  # of PairedDifference
    unit: str
    method: str

    _nested = {"quantities": Keyed.parser(PairedDifference.from_dict)}


@dataclass(frozen=True)
class NullModelsInfo(Record):
    """What the attention null models were computed on (a subsample of `n_matrices` of `of` matrices) and what each
    is (present where computed)."""

    n_matrices: int
    of: int
    row_shuffled: str | None = None
    shuffled_keys: str | None = None
    vmf_exact: str | None = None
    init: str | None = None


@dataclass(frozen=True)
class CriterionVerdict(Record):
    """One claim-2 criterion decided on a user's attention file (`stats attention`; stats/claims/claim2_markov.py
    file_verdicts): the verdict, its estimate and interval against the margin, or why it is undefined; the
    row-shuffled null's lower bound (output error and reversibility) or the heads' rank bound (head isotropy)."""

    verdict: str
    margin: list
    estimate: float | None = None
    confidence_interval: list | None = None
    null_row_shuffled_lower: float | None = None
    rank_bound: float | None = None
    why_undefined: str | None = None

    def to_dict(self) -> dict:
        """{"verdict", "margin", "why_undefined"} when undefined; else the verdict, the estimate (with its interval
        where it has one), the margin, then the null's lower bound (with an interval) or the rank bound."""
        if self.why_undefined is not None:
            return {"verdict": self.verdict, "margin": self.margin, "why_undefined": self.why_undefined}
        if self.confidence_interval is None:  # head isotropy: the worst head, no interval
            return {"verdict": self.verdict, "estimate": self.estimate, "margin": self.margin,
                    "rank_bound": self.rank_bound}
        return {"verdict": self.verdict, "estimate": self.estimate, "confidence_interval": self.confidence_interval,
                "margin": self.margin, "null_row_shuffled_lower": self.null_row_shuffled_lower}


@dataclass(frozen=True)
class AttentionVerdicts(Record):
    """`stats attention`'s verdict per claim-2 criterion (in the order written)."""

    reversibility_residual: CriterionVerdict
    vmf_output_error: CriterionVerdict
    head_isotropy: CriterionVerdict

    _nested = {"reversibility_residual": CriterionVerdict.from_dict, "vmf_output_error": CriterionVerdict.from_dict,
               "head_isotropy": CriterionVerdict.from_dict}


@dataclass(frozen=True)
class AttentionStats(Record):
    """Markov-chain statistics of attention matrices (stats/markov/markov_chain.py analyze_attention, the null models and the
    step-0 comparison of stats_stage/attention_files.py); `verdicts` only in `stats attention` output.
    per_matrix: each quantity's values in matrix order; aggregate: each one's MatrixAggregate; undefined: why a
    quantity is (a causal mask's pi-based ones); uniform_reference: the uniform chain's value."""

    shape: list
    n_matrices: int
    n: int
    causal: bool
    per_matrix: ByQuantity[list]
    aggregate: QuantityAggregates
    schema_version: int = SCHEMA_VERSION
    max_row_sum_error: float | None = None
    undefined: ByQuantity[str] | None = None
    uniform_reference: ByQuantity[float] | None = None
    head_averaged: HeadAveragedFit | None = None
    head_kernels: HeadKernels | None = None
    features_input: InputFile | None = None  # the token features the attention acts on
    step: int | None = None
    null_models: NullModels | None = None
    null_models_info: NullModelsInfo | None = None
    init_comparison: InitComparison | None = None
    verdicts: AttentionVerdicts | None = None
    run_id: str | None = None
    category: str | None = None
    entry: IndexEntry | None = None
    input: InputFile | None = None

    _nested = {"input": InputFile.from_dict, "features_input": InputFile.from_dict, "entry": IndexEntry.from_dict,
               "per_matrix": ByQuantity.from_dict, "aggregate": QuantityAggregates.from_dict,
               "undefined": ByQuantity.from_dict, "uniform_reference": ByQuantity.from_dict,
               "head_averaged": HeadAveragedFit.from_dict, "head_kernels": HeadKernels.from_dict,
               "null_models": NullModels.from_dict, "null_models_info": NullModelsInfo.from_dict,
               "init_comparison": InitComparison.from_dict, "verdicts": AttentionVerdicts.from_dict}


@dataclass(frozen=True)
class NoiseCapture(Record):
    """Tails and Gaussianity of one capture's gradient noise (stats/diffusion/descriptive.py analyze_noise)."""

    capture: int
    n: int
    excess_kurtosis: float | None = None
    normaltest_statistic: float | None = None
    normaltest_pvalue: float | None = None
    tail_index: EffectResult | None = None

    _nested = {"tail_index": EffectResult.from_dict}


@dataclass(frozen=True)
class NoiseStats(Record):
    """A gradient-noise file: one NoiseCapture per capture."""

    kind: str  # "gradient_noise"
    n_captures: int
    n_samples: int
    n_params: int
    per_capture: list[NoiseCapture]
    schema_version: int = SCHEMA_VERSION
    run_id: str | None = None
    category: str | None = None
    entry: IndexEntry | None = None
    input: InputFile | None = None

    _nested = {"per_capture": list_of(NoiseCapture.from_dict), "input": InputFile.from_dict,
               "entry": IndexEntry.from_dict}


RunStatsFile = BatteryStats | SphereStats | AttentionStats | NoiseStats


def parse_stats_file(d: Any, where: str = "statistics file") -> RunStatsFile:
    """One per-file statistics JSON (parsed) as its contract type.

    Raises:
        ValueError: another schema version, an unknown kind of file, or unknown/missing keys (naming them).
    """
    check_version(d, where)
    cat = d.get("category")
    if cat == "attention" or (cat is None and "per_matrix" in d):  # `stats attention` output has no category
        return AttentionStats.from_dict(d, where)
    if cat == "gradnoise" or d.get("kind") == "gradient_noise":
        return NoiseStats.from_dict(d, where)
    if "tests" in d:
        return BatteryStats.from_dict(d, where)
    if "sphere" in d:
        return SphereStats.from_dict(d, where)
    raise ValueError(f"{where}: neither a battery (no 'tests'), a sphere, an attention nor a gradient-noise file")


@dataclass(frozen=True)
class SummaryRow(Record):
    """One analysed file in a run's summary.json: where it is and its headline values."""

    path: str
    output: str
    category: str | None
    unit: str | None = None
    kind: str | None = None
    verdict: str | None = None
    classification: str | None = None
    brownian: bool | None = None
    msd_exponent: EffectResult | None = None
    battery_error: str | None = None
    calibration_shape: CalibrationShape | None = None
    window_exponent: float | None = None
    sphere_tensor: str | None = None

    _nested = {"msd_exponent": EffectResult.effect_from_dict, "calibration_shape": CalibrationShape.from_dict}


@dataclass(frozen=True)
class FileError(Record):
    """A trajectory file `stats run` could not analyse, and why."""

    path: str
    error: str


@dataclass(frozen=True)
class RunStatsSummary(Record):
    """A run's stats/summary.json: the files analysed (rows) and the files that failed. ``traj_dir``: the
    trajectories folder, relative to the summary's own folder (stats_stage.stages.trajectory_dir)."""

    run_id: str
    traj_dir: str
    index_sha256: str
    n_files: int
    files: list[SummaryRow]
    errors: list[FileError]
    schema_version: int = SCHEMA_VERSION

    _nested = {"files": list_of(SummaryRow.from_dict), "errors": list_of(FileError.from_dict)}

    @classmethod
    def from_dict(cls, d: dict, where: str = "summary.json") -> RunStatsSummary:
        check_version(d, where)
        return super().from_dict(d, where)
