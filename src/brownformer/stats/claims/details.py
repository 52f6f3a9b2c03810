"""Each claim's `details` in claims.json as typed records: one frozen dataclass per claim and level.

The claim rules build these; claims.json writes their `to_dict()` (the JSON key is the field's name, so the file's
layout is these fields); the report and the figures read them back through `parse_details` (brownformer.results'
reader passes it to `verdicts.read_claims`) and use attributes. Blocks that are description only and that no reader
digs into (rule histories, seed pools, a seed's nulls, claim 4's per-run rows) stay plain JSON mappings; claim 4's
comparison blocks are stats/claims/comparison_records.py's records.

Levels (verdicts.LEVELS): "claim" (the headline record), "per_model" (claims 1, 2: one training configuration or one
fixed model; claim 4: one model variant), "per_run" (claims 1, 2: one seed; claim 3: one run or replica set),
"per_optimizer" (claim 3). A record with no details (a run that did not train) is verdicts.NoDetails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from brownformer.io import to_jsonable
from brownformer.statsfile import Decision, EffectResult
from brownformer.verdicts import ClaimDetails, NoDetails

from .claim_inputs import SizeBounds
from .comparison_records import (SECONDS, STEPS, KMMedian, MedianRatio, RuleErrorSummary, TargetLevel,
                                 records_of)

__all__ = ["InputPower", "SeedPower", "UndecidedCriterion", "SeedCriterion", "InputCriterion", "PooledCriterion", "InputCriterion2",
           "WithinSeed", "GaugeDependent", "Definitional", "Claim1SeedDetails", "Claim1ConfigurationDetails",
           "Claim1FixedModelDetails", "Claim1Details", "Claim2Margins", "HeadAveraged", "WorstHead", "HeadCheck", "UndefinedHeadCheck", "Claim2SeedDetails", "Claim2ConfigurationDetails",
           "Claim2FixedModelDetails", "Claim2Details", "FileRow", "RunPooling", "ClaimPooling", "SinglePath",
           "Claim3RunDetails", "Claim3OptimizerDetails", "Claim3Details", "AttentionShape", "RuleCalibration",
           "WorstCalibration", "Claim4ModelDetails", "Claim4EstimatedModelDetails", "Claim4Details",
           "parse_details", "parse_criterion", "criteria_of"]


def _headline(d: Any, where: str) -> EffectResult | None:
    return EffectResult.from_dict(d, where, form="headline")


# --- power of claims 1 and 2 where the claim is true but not trivially (halfway between the ideal and the edge) ----

@dataclass(frozen=True)
class InputPower(ClaimDetails):
    """A fixed model's power (unit "inputs"): P(the interval over its inputs lies inside the margin) with the estimate
    N(true value, its standard error^2) (common.interval_power); None where the standard error is undefined."""
    true_value: float
    standard_error: float | None
    power: float | None
    method: str
    n_inputs: int | None = None  # claim 2: the probe inputs the interval is over
    _optional = frozenset({"n_inputs"})
    _order = ("true_value", "standard_error", "power", "n_inputs", "method")


@dataclass(frozen=True)
class SeedPower(ClaimDetails):
    """A configuration's power over seeds (noncentral t: per-seed estimates N(true value, observed seed SD^2)) at its
    own seed count, at MIN_SEEDS and at the design count, keyed by the seed count ("3")."""
    true_value: float
    seed_sd: float | None
    power_at_n_seeds: dict[str, float | None]
    method: str


# --- criteria of claims 1 and 2 (a decided configuration's or fixed model's `criteria`) ---------------------------

@dataclass(frozen=True)
class UndecidedCriterion(ClaimDetails):
    """A criterion without values (no data, seeds that differ in their layers, no W_Q/W_K): inconclusive."""
    verdict: str
    margin: list
    why: str | None = None
    why_undefined: str | None = None
    _optional = frozenset({"why", "why_undefined"})
    estimate = None
    confidence_interval = None
    pvalue = None


@dataclass(frozen=True)
class SeedCriterion(ClaimDetails):
    """Claim 1, one configuration: the seed-level interval of the worst layer, intersection-union over layers."""
    verdict: str
    estimate: float
    confidence_interval: list
    layer: int
    margin: list
    n_layers: int
    n_seeds: int
    why: str | None
    per_layer: list  # each layer's seed pool (stats/core/pooling.py SeedPoolResult.to_dict())
    pvalue: float | None


@dataclass(frozen=True)
class InputCriterion(ClaimDetails):
    """Claim 1, one fixed model: every (capture, layer) interval over its probe inputs; the power at the worst."""
    verdict: str
    estimate: float
    confidence_interval: list
    layer: int
    capture: int | None
    margin: list
    n_cells: int
    interval_over: str
    why: str | None
    pvalue: float | None
    power: InputPower
    _nested = {"power": InputPower.from_dict}


@dataclass(frozen=True)
class PooledCriterion(ClaimDetails):
    """Claim 2, one configuration: the t-interval over seeds of one criterion."""
    verdict: str
    estimate: float
    confidence_interval: list
    margin: list
    why: str | None
    pool: dict  # SeedPoolResult.to_dict()
    pvalue: float | None


@dataclass(frozen=True)
class InputCriterion2(ClaimDetails):
    """Claim 2, one fixed model: one criterion's interval over its probe inputs (head isotropy exact)."""
    verdict: str
    estimate: float
    confidence_interval: list
    margin: list
    why: str | None
    interval_over: str
    pvalue: float | None


_CRITERIA = {frozenset(f.name for f in cls.__dataclass_fields__.values()): cls
             for cls in (SeedCriterion, InputCriterion, PooledCriterion, InputCriterion2)}


def parse_criterion(d: Any, where: str = "criterion") -> ClaimDetails:
    """A criterion from its JSON, its record chosen by its keys (ValueError naming `where` for an unknown layout)."""
    if isinstance(d, ClaimDetails):
        return d
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
    cls = _CRITERIA.get(frozenset(d))
    if cls is None and set(d) <= {"verdict", "margin", "why", "why_undefined"}:
        cls = UndecidedCriterion
    if cls is None:
        raise ValueError(f"{where}: keys {sorted(d)} match no claim-1/2 criterion layout")
    return cls.from_dict(d, where)


#: a record's criteria: criterion name -> its record. A name-keyed map (not a record of named fields): each claim
#: iterates its own CRITERIA table to build it and the report iterates it alike, so the names are the table's data
_criteria = records_of(parse_criterion)


# --- claim 1 --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WithinSeed(ClaimDetails):
    """The worst (capture, layer) of one quantity within a seed, interval over its probe inputs ({} when none)."""
    estimate: float | None = None
    confidence_interval: list | None = None
    capture: int | None = None
    layer: int | None = None
    n_cells: int | None = None
    interval_over: str | None = None
    _optional = frozenset({"estimate", "confidence_interval", "capture", "layer", "n_cells", "interval_over"})


#: quantity -> its worst cell within the seed (the CRITERIA table's names, as `_criteria`)
_within = records_of(WithinSeed.from_dict)


@dataclass(frozen=True)
class GaugeDependent(ClaimDetails):
    """Pre-LN: the after-affine geometry, gauge-dependent description."""
    label: str
    radius_spread_ratio: WithinSeed
    offset: WithinSeed
    _nested = {"radius_spread_ratio": WithinSeed.from_dict, "offset": WithinSeed.from_dict}


@dataclass(frozen=True)
class Definitional(ClaimDetails):
    """The raw LayerNorm output's fraction on the sphere: the definition, not evidence."""
    label: str
    min_fraction_on_sphere: float | None


@dataclass(frozen=True)
class Claim1SeedDetails(ClaimDetails):
    """Claim 1, one seed (per_run): description, never a decision."""
    ln: str
    decided_on: str
    judged_from_step: float
    n_captures: int
    per_layer: dict[str, list]
    within_seed: dict[str, WithinSeed]
    definitional: Definitional
    affine_map: dict | None = None  # (in the order the depth files list them: ln_affine before resid)
    residual_stream: dict | None = None
    gauge_dependent: GaugeDependent | None = None
    _optional = frozenset({"residual_stream", "affine_map", "gauge_dependent"})
    _nested = {"within_seed": _within, "definitional": Definitional.from_dict,
               "gauge_dependent": GaugeDependent.from_dict}


@dataclass(frozen=True)
class Claim1ConfigurationDetails(ClaimDetails):
    """Claim 1, one training configuration (per_model), decided on its seeds."""
    ln: str
    decided_on: str
    criteria: dict[str, ClaimDetails]
    seeds: list[str]
    pvalue: float | None
    _nested = {"criteria": _criteria}


@dataclass(frozen=True)
class Claim1FixedModelDetails(ClaimDetails):
    """Claim 1, one fixed model (unit "inputs"; per_model and per_run), decided on its probe inputs."""
    ln: str
    decided_on: str
    criteria: dict[str, ClaimDetails]
    description: Claim1SeedDetails
    unit: str
    pvalue: float | None
    _nested = {"criteria": _criteria, "description": Claim1SeedDetails.from_dict}


@dataclass(frozen=True)
class Claim1Details(ClaimDetails):
    """Claim 1, the headline record."""
    pvalue: float | None
    not_applicable: dict[str, str]
    deciding_configuration: str | None
    decided_on: dict[str, str]
    margins: dict[str, list]
    rule: str
    rule_history: list
    did_not_train: list[str]


# --- claim 2 --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim2Margins(ClaimDetails):
    """A seed's criteria margins, fixed before the data, and the row-shuffled null's lower bounds beside them."""
    vmf_output_error: tuple[float, float]
    reversibility_residual: tuple[float, float]
    head_isotropy: tuple[float, float]
    null_bounds: dict[str, float]


@dataclass(frozen=True)
class HeadAveraged(ClaimDetails):
    """The head-averaged attention's vMF fit over a seed's captures (description)."""
    vmf_output_error_mean: float | None
    vmf_kappa_mean: float | None


@dataclass(frozen=True)
class WorstHead(ClaimDetails):
    """Claim 2, one seed: where its worst head is (per (layer, head) the mean iota_relative over the late captures,
    then the minimum), or why no head could be read."""
    layer: int | None = None
    head: int | None = None
    n_heads: int | None = None
    why_undefined: str | None = None
    _optional = frozenset({"layer", "head", "n_heads", "why_undefined"})


@dataclass(frozen=True)
class HeadCheck(ClaimDetails):
    """Claim 2, one seed: every head of its late captures against the head-isotropy margin (description; the worst
    head's value, how many heads lie inside, the heads' asymmetry and the step-0 baseline's)."""
    verdict: str
    estimate: float
    step: int | None
    layer: int
    head: int
    judged_from_step: float
    margin: list
    n_heads_checked: int
    n_heads_inside: int
    median_iota_relative: float
    rank_bound: int | None
    asymmetry_median: float
    asymmetry_max: float
    step0_iota_relative_max: float | None
    step0_asymmetry_median: float | None
    note: str


@dataclass(frozen=True)
class UndefinedHeadCheck(ClaimDetails):
    """Claim 2, one seed whose heads cannot be read (no W_Q, W_K, or projected weights): inconclusive."""
    verdict: str
    why_undefined: str
    margin: list


def _head_check(d: dict, where: str) -> ClaimDetails:
    return (HeadCheck if "estimate" in d else UndefinedHeadCheck).from_dict(d, where)


@dataclass(frozen=True)
class Claim2SeedDetails(ClaimDetails):
    """Claim 2, one seed (per_run): its nested values and description, never a decision."""
    values: dict[str, float | None]
    worst_head: WorstHead
    within_seed: dict
    head_isotropy: HeadCheck | UndefinedHeadCheck
    vmf_fit: str
    whole_sphere_fit: dict
    causal: bool
    margins: Claim2Margins
    n_inputs: int
    n_captures: int
    step0_baseline: dict
    head_averaged: HeadAveraged | None
    _nested = {"margins": Claim2Margins.from_dict, "head_averaged": HeadAveraged.from_dict,
               "worst_head": WorstHead.from_dict, "head_isotropy": _head_check}


@dataclass(frozen=True)
class Claim2ConfigurationDetails(ClaimDetails):
    """Claim 2, one training configuration (per_model), decided on its seeds."""
    pvalue: float | None
    causal: bool
    criteria: dict[str, ClaimDetails]
    vmf_fit: list[str]
    seeds: list[str]
    verdict_head_isotropy: str
    verdict_vmf_output_error: str
    verdict_reversibility: str
    _nested = {"criteria": _criteria}


@dataclass(frozen=True)
class Claim2FixedModelDetails(Claim2ConfigurationDetails):
    """Claim 2, one fixed model (unit "inputs"), decided on its probe inputs: a configuration's fields (in the same
    JSON order), then the unit and its seed description beside it."""
    unit: str
    description: ClaimDetails
    _nested = {"criteria": _criteria,
               "description": lambda d, where: Claim2SeedDetails.from_dict(d, where) if d else NoDetails()}


@dataclass(frozen=True)
class Claim2Details(ClaimDetails):
    """Claim 2, the headline record."""
    pvalue: float | None
    deciding_configuration: str | None
    rule_history: list
    rule: str


# --- claim 3 --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileRow(ClaimDetails):
    """Claim 3, one file of a run: the calibrated rule's verdict and what the window reading shows."""
    path: str
    verdict: str
    reason: str
    msd_exponent: float
    shape_id: str | None
    size: float | None
    size_fitted: float | None
    classification: str | None
    window: str | None
    window_description: str | None
    ensemble_exponent: float | None
    full_range_exponent: float | None
    window_null_size: float | None
    walkers: Any
    walker_rates: Any


@dataclass(frozen=True)
class RunPooling(ClaimDetails):
    """Claim 3, one run: the Markov count rule over its dependent files."""
    rule: str
    file_sizes: list[float]
    k_run: int | None
    size_bound: float
    n_not_brownian: int
    pvalue: float | None


@dataclass(frozen=True)
class ClaimPooling(ClaimDetails):
    """Claim 3 over runs (the claim, one optimizer): the Poisson-binomial count rule over independent runs."""
    rule: str
    run_size_bounds: list[float]
    m_claim: int | None
    size: float
    n_not_supported: int
    pvalue: float | None


@dataclass(frozen=True)
class SinglePath(ClaimDetails):
    """Claim 3b/3c, one run's single-path files where replicas decide: description only."""
    n_files: int
    rule_verdicts: dict[str, int]
    msd_exponent_mean: float | None


def _files(d: Any, where: str) -> list[FileRow]:
    return [FileRow.from_dict(v, f"{where}[{i}]") for i, v in enumerate(d)]


@dataclass(frozen=True)
class Claim3RunDetails(ClaimDetails):
    """Claim 3, one run or replica set (per_run)."""
    files: list[FileRow]
    n_brownian: int
    n_not_brownian: int
    n_files: int
    pooling: RunPooling
    pvalue: float | None
    classifications: dict[str, int]
    estimate_se: float
    estimate_df: float
    estimate_method: str
    spread_over_files: EffectResult
    _nested = {"files": _files, "pooling": RunPooling.from_dict, "spread_over_files": _headline}


@dataclass(frozen=True)
class Claim3OptimizerDetails(ClaimDetails):
    """Claim 3, the runs of one optimizer (per_optimizer)."""
    pooling: ClaimPooling | None
    pvalue: float | None
    _empty = frozenset({"pooling"})
    _nested = {"pooling": ClaimPooling.from_dict}


@dataclass(frozen=True)
class Claim3Details(ClaimDetails):
    """Claim 3a/3b/3c, the headline record."""
    pvalue: float | None
    per_configuration: dict[str, dict]  # configuration -> SeedPoolResult.to_dict()
    pvalue_note: str
    pooling: ClaimPooling | None
    run_q_values_bh: dict[str, float]
    rule: str
    pooling_rule: str
    rule_history: list
    n_runs: int
    unit_of_replication: str
    estimate_se: float
    estimate_df: float
    estimate_method: str
    single_path: dict[str, SinglePath] | None = None
    single_path_note: str | None = None
    _optional = frozenset({"single_path", "single_path_note"})
    _empty = frozenset({"pooling"})
    _nested = {"pooling": ClaimPooling.from_dict,
               "single_path": records_of(SinglePath.from_dict)}


# --- claim 4 --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim4ModelDetails(ClaimDetails):
    """Claim 4, one model variant (per_model): the gate's simulated error rates, the other target shares (keyed by
    the share, "0.5"), and the comparison at the deciding target, key for key the JSON of stats/comparison/
    time_to_target.py TimeToTargetResult.to_dict with its medians, ratios (baseline -> clock -> ratio) and verdicts
    as records (comparison_records); the per-run rows and final metrics stay table rows."""
    pvalue: float | None
    rule_error_rates: RuleErrorSummary | None
    levels: dict[str, TargetLevel]
    model: str
    metric: str
    higher_is_better: bool
    target: float | None
    proposed: str
    baseline: str | None
    baselines: list[str]
    runs: list[dict]  # one row per run (optimizer, seed, run, steps, seconds, reached, final, censored_at, ...)
    km_median_steps: dict[str, KMMedian]
    ratios: dict[str, dict[str, MedianRatio]]
    verdicts: dict[str, Decision]
    final_at_budget: dict[str, dict]  # optimizer -> {"median", "n", ...} of the final metric at the budget
    verdict: str
    reason: str
    protocol_met: bool
    _nested = {"rule_error_rates": RuleErrorSummary.from_dict, "levels": records_of(TargetLevel.from_dict),
               "km_median_steps": records_of(KMMedian.from_dict),
               "ratios": records_of(records_of(MedianRatio.from_dict)),
               "verdicts": records_of(Decision.from_dict)}

    @classmethod
    def of(cls, res, **extra) -> Claim4ModelDetails:
        """From the deciding target's time_to_target.TimeToTargetResult and this record's own fields (`extra`:
        pvalue, rule_error_rates, levels and, for Claim4EstimatedModelDetails, the headline's bound and text)."""
        return cls(**extra, model=res.model, metric=res.metric, higher_is_better=bool(res.higher_is_better),
                   target=to_jsonable(res.target), proposed=res.proposed, baseline=res.baseline,
                   baselines=list(res.baselines), runs=to_jsonable(res.runs.replace([np.inf], None).to_dict("records")),
                   km_median_steps={o: KMMedian.of(m) for o, m in res.medians.items()},
                   ratios={o: {u: MedianRatio.of(r) for u, r in ((STEPS, v.steps), (SECONDS, v.seconds))}
                           for o, v in res.ratios.items()},
                   verdicts=dict(res.verdicts),
                   final_at_budget=to_jsonable({o: v.to_dict() for o, v in res.final.items()}), verdict=res.verdict,
                   reason=res.reason, protocol_met=bool(res.protocol_met))


@dataclass(frozen=True)
class Claim4EstimatedModelDetails(Claim4ModelDetails):
    """Claim 4, a model variant with a steps ratio against its best baseline: the headline's bound side and text."""
    estimate_bound: str | None  # "<" or ">" when the data cannot bound the AFT estimate (it is a bound), else None
    estimate_text: str
    n_censored: dict[str, int]
    #: the JSON's key order: the headline's bound beside the gate's rates, before the comparison's record
    _order = ("pvalue", "rule_error_rates", "estimate_bound", "estimate_text", "n_censored", "levels")


@dataclass(frozen=True)
class Claim4Details(ClaimDetails):
    """Claim 4, the headline record."""
    pvalue: float | None
    proposed: str
    baselines: list[str]
    target_optimizer: str
    target_levels: list[float]
    seconds_margin: list[float]
    did_not_train: list[str]
    scope: list[str]
    estimate_bound: str | None
    estimate_text: str | None
    max_size: float
    rule_history: list


# --- calibration (ClaimRecord.calibration) -------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionShape(ClaimDetails):
    """The shape a claim-2 seed's calibration is at: its attention array's shape and its trained captures."""
    attention: list | None  # (..., n, n) as the attention file states it
    n_captures: int


@dataclass(frozen=True)
class RuleCalibration(ClaimDetails):
    """Size and power of a claim-1/2 record's rule (verdicts.ClaimRecord.calibration).

    shape: a seed's AttentionShape; {"n_seeds": n} for a claim-2 configuration; {"n_cells": {criterion: n}} for a
    claim-1 fixed model; a text where the shape is per configuration (claim 2's headline). power: alternative ->
    rate (a claim-2 seed), criterion -> power record (claims 1 and 2 decided), configuration -> its power (claim 2's
    headline): keyed by what varies, as claims.json writes it. size None: not simulated."""
    shape: AttentionShape | dict | str
    size: float | None
    size_se: float | None
    power: dict
    n_replicates: int
    method: str

    @classmethod
    def over_configurations(cls, per_model: dict, power: Callable[[Any], Any], method: str) -> RuleCalibration:
        """A claim's calibration from its configurations' (per_model: configuration -> record): the largest size,
        since the configurations pool by intersection-union (none passes more often than its own rule), with that
        configuration's standard error; ``power(record)`` per configuration; the replicates summed."""
        recs = {c: rec for c, rec in per_model.items() if rec.calibration is not None}
        cals = {c: rec.calibration for c, rec in recs.items()}
        largest = max((c for c in cals.values() if c.size is not None), key=lambda c: c.size, default=None)
        return cls(shape="per configuration (see per_model)", size=largest and largest.size,
                   size_se=largest and largest.size_se, power={c: power(rec) for c, rec in recs.items()},
                   n_replicates=sum(c.n_replicates for c in cals.values()), method=method)


@dataclass(frozen=True)
class WorstCalibration(SizeBounds, ClaimDetails):
    """Claim 3, a run's, optimizer's or claim's least favourable calibration over its files' shapes
    (claim3_brownian._worst_calibration): the largest size under either null, the smallest power and power bound
    (alternative -> rate), the worst fitted size and how many files had a fitted null."""
    shape: dict  # the least favourable file's calibration shape (stats/core/shapes.py CalibrationShape's JSON)
    size: float
    size_upper: float | None
    size_se: float
    size_idealised: float
    size_fitted: float | None
    size_fitted_upper: float | None
    n_fitted: int
    n_files: int
    equivalence_power: float
    power: dict[str, float]
    power_lower: dict[str, float]
    n_replicates: int
    n_shapes: int
    rule: str
    #: read like a file's calibration (claim_inputs.FileCalibration) when the next level pools it: no fitted null
    #: of its own (its fitted sizes are `size_fitted`)
    fitted = None


# --- reading --------------------------------------------------------------------------------------------------------

def _claim1_model(d: dict, where: str) -> ClaimDetails:
    return (Claim1FixedModelDetails if "description" in d else Claim1ConfigurationDetails).from_dict(d, where)


def _claim2_model(d: dict, where: str) -> ClaimDetails:
    return (Claim2FixedModelDetails if "description" in d else Claim2ConfigurationDetails).from_dict(d, where)


def _claim1_run(d: dict, where: str) -> ClaimDetails:
    return _claim1_model(d, where) if "criteria" in d else Claim1SeedDetails.from_dict(d, where)


def _claim2_run(d: dict, where: str) -> ClaimDetails:
    return _claim2_model(d, where) if "criteria" in d else Claim2SeedDetails.from_dict(d, where)


#: (claim family, level) -> the parser of its details; claims "3a", "3b", "3c" share family "3"
_PARSERS: dict[tuple[str, str], Callable[[dict, str], ClaimDetails]] = {
    ("1", "claim"): Claim1Details.from_dict, ("1", "per_model"): _claim1_model, ("1", "per_run"): _claim1_run,
    ("2", "claim"): Claim2Details.from_dict, ("2", "per_model"): _claim2_model, ("2", "per_run"): _claim2_run,
    ("3", "claim"): Claim3Details.from_dict, ("3", "per_run"): Claim3RunDetails.from_dict,
    ("3", "per_optimizer"): Claim3OptimizerDetails.from_dict,
    ("4", "claim"): Claim4Details.from_dict,
    ("4", "per_model"): lambda d, where: (Claim4EstimatedModelDetails if "estimate_text" in d
                                          else Claim4ModelDetails).from_dict(d, where),
}


def parse_details(claim: str, level: str, d: dict) -> ClaimDetails:
    """The typed details of one claims.json record (verdicts.DetailsParser): {} is NoDetails; a claim or level
    without a record type is a ValueError naming it."""
    if not d:
        return NoDetails()
    family = "3" if claim in ("3a", "3b", "3c") else claim
    parse = _PARSERS.get((family, level))
    if parse is None:
        raise ValueError(f"claim {claim!r}: no details record for level {level!r} (brownformer.stats.claims.details)")
    return parse(d, f"claim {claim} {level} details")


def criteria_of(details: ClaimDetails) -> tuple[tuple[str, ClaimDetails], ...]:
    """The criteria a decided claim-1/2 record was judged on, as (criterion, its typed record) in the record's
    order; () for any other record."""
    return tuple((getattr(details, "criteria", None) or {}).items())
