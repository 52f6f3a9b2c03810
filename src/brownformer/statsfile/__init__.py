"""The per-run statistics contract: what `brownformer stats run` writes for each trajectory file (and `stats
trajectory` for one array), typed, shared by the statistics (writer) and the summary, the results reader, the
figures and the report (readers).

Every file carries "schema_version" (SCHEMA_VERSION). A JSON key is always the field's name, and result objects
use scipy.stats' names: `statistic`, `pvalue`, `confidence_interval` (and `tost_interval`, the (1 - 2 alpha)
interval the equivalence rule reads). `EffectResult` is the one effect type (a test, a key effect, an exponent, a
claim's headline estimate), each in its JSON layout. `from_dict` rejects a file of another schema version and names any
unknown or missing key; `to_dict` writes plain JSON (NaN and inf as null, by the one converter brownformer.io.to_jsonable).

One file is one of (`parse_stats_file` picks by "category" and content):
- `BatteryStats`: the Brownian battery of a depth, training or weights file, or of any array (`stats trajectory`);
  depth files add `sphere` (claim 1).
- `SphereStats`: a depth file analysed for claim 1 only (after-affine LN output, or too few layers for the battery).
- `AttentionStats`: an attention file (claim 2); `NoiseStats`: a gradient-noise file.
`RunStatsSummary` is the run's summary.json.

Blocks of a fixed layout are records: the calibration shape (`CalibrationShape`, with its window `WindowSpec`; its
`ShapeSummary`), the calibration at it (`ShapeCalibration`, with `ProcessRates`), the window reading (`LocalSlopes`:
`SlopeWindow`, `Curvature`, `Envelope`, `EnsembleExponent`, `MomentumBias` per key effect), a battery's curves
(`EuclideanCurves` or `SphereCurves`) and settings (`BatterySettings`), a test's `EffectExtra`, the clock, the input,
its index.json entry (`IndexEntry`), the sphere normalisation, claim 1's sphere summary (`SphereSummary`:
`TensorDistribution`, `SphereGeometry`, `SphereAbout`, `SphereMargins`, a LayerNorm's recovered `AffineMap`), the fitted
null (`FittedNullInfo`: `FittedCalibration`, `FittedModel`, `ReplicaContrast`), the walkers' reading
(`WalkerReading`: `WalkerType`, `WalkerPositions`, `WalkerDiagnostic`), the attention null models' description
(`NullModelsInfo`), `stats attention`'s verdicts (`AttentionVerdicts` of `CriterionVerdict`) and step-0 comparison
(`InitComparison` of `PairedDifference`), an attention file's blocks (attention.py: per quantity `ByQuantity`, the
per-matrix values, why undefined, the uniform reference, and `QuantityAggregates` of `MatrixAggregate`; the heads'
`HeadKernels` of `HeadIsotropy` with their `SubspaceFit`; the `HeadAveragedFit`; the `NullModels`), every effect
(`EffectResult`, with the window exponent's `WindowRuleNull`).
Every record checks its keys with `check_keys` (claims.json's records too).

A block keyed by a name the data choose is a `Keyed` tuple of records that carry their key (JSON: one object by key,
as always): a battery's "effects" and "clock_check" (EffectResults by test, by clock), "momentum_bias" (MomentumBias
by key effect), the walkers' "by_type" (WalkerType by token type) and "diagnostics" (WalkerDiagnostic), a step-0
comparison's "quantities" (PairedDifference), a calibration's "rates" (ProcessRates by process), and, of plain values
(`KeyedValue`), a calibration's "power" and "power_lower" (by alternative) and the settings' "margins" (by margin
name).
A reader parses a file once (`parse_stats_file`); a writer builds the records and writes their `to_dict`.

Schema history: 1 (unversioned): "p_value", "ci", "tost_ci", "reject", a float "diffusion_coefficient" with
"diffusion_coefficient_ci", the sphere distribution under the tensor's name. 2: scipy's names, "rejected",
"diffusion_coefficient" an estimate object, the sphere distribution under "distribution".
"""
from __future__ import annotations

from ._results import (CLAIM_VERDICTS, RULE_VERDICTS, SCHEMA_VERSION, Decision, EffectResult, Keyed, KeyedValue,
                       EffectExtra, WindowRuleNull, check_keys, plain_value)
from .attention import (QUANTITY_NAMES, ByQuantity, HeadAveragedFit, HeadIsotropy, HeadKernels, MatrixAggregate,
                        NullModels, QuantityAggregates, SubspaceFit)
from .sphere_summary import (AboutLayers, AffineMap, Distribution, GeometryLayers, LayerValues, PerLeading, PooledValue, Quantiles,
                     SphereAbout, SphereGeometry, SphereMargins, SphereSummary, TensorDistribution)
from .files import (AttentionStats, AttentionVerdicts, BatterySettings, BatteryStats, EuclideanCurves, ProcessRates,
                    SphereCurves, CalibrationShape, Clock, CriterionVerdict, Curvature,
                    EnsembleExponent, Envelope, FileError, FittedCalibration, FittedModel, FittedNullInfo, IndexEntry,
                    InitComparison, InputFile, LocalSlopes, MomentumBias, NoiseCapture, NoiseStats, NullModelsInfo,
                    PairedDifference, ReplicaContrast, RunStatsFile, RunStatsSummary, SlopeWindow, SphereNormalisation,
                    ShapeCalibration, ShapeSummary, SphereStats, SummaryRow, WalkerDiagnostic, WalkerPositions, WalkerReading, WalkerType, WindowSpec,
                    parse_stats_file)

__all__ = ["SCHEMA_VERSION", "EffectResult", "EffectExtra", "Keyed", "KeyedValue", "WindowRuleNull", "Decision", "check_keys", "plain_value", "CLAIM_VERDICTS", "RULE_VERDICTS", "CalibrationShape", "ShapeSummary", "ShapeCalibration", "ProcessRates",
           "EuclideanCurves", "SphereCurves", "BatterySettings", "IndexEntry", "Clock", "Curvature", "MomentumBias", "EnsembleExponent", "WindowSpec", "SphereNormalisation", "InputFile", "SlopeWindow", "Envelope", "FileError", "LocalSlopes", "AffineMap", "Quantiles", "Distribution", "PerLeading", "SphereMargins", "TensorDistribution", "LayerValues", "PooledValue", "GeometryLayers", "SphereGeometry", "AboutLayers", "SphereAbout", "SphereSummary", "WalkerType", "WalkerPositions", "WalkerDiagnostic", "WalkerReading", "ReplicaContrast", "FittedModel", "FittedCalibration", "FittedNullInfo", "BatteryStats",
           "SphereStats", "PairedDifference", "InitComparison", "NullModelsInfo", "CriterionVerdict", "AttentionVerdicts", "AttentionStats", "QUANTITY_NAMES", "ByQuantity", "MatrixAggregate", "QuantityAggregates", "HeadIsotropy", "SubspaceFit", "HeadAveragedFit", "HeadKernels", "NullModels", "NoiseCapture", "NoiseStats", "SummaryRow", "RunStatsSummary",
           "RunStatsFile", "parse_stats_file"]
