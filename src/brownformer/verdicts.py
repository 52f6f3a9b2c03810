"""The claims.json contract: one typed schema shared by the statistics (writer) and the report (reader).

claims.json (written by `brownformer stats summary`) is::

    {"schema": 4,
     "claims": {"1": ClaimRecord, "2": ..., "3a": ..., "3b": ..., "3c": ..., "4": ...},
     "did_not_train": [{"run", "reason"}],          # runs left out of every claim, shown in the report
     "calibration": {"path", "available", "sha256"},
     "runs": [run ids analysed]}

Each ClaimRecord::

    {"claim": "3b", "title": "...", "verdict": one of VERDICTS, "reason": "one sentence",
     "estimate": {"name", "value", "confidence_interval": [lo, hi], "confidence_level"} | null,  # EffectResult
                                                 # in its "headline" layout (brownformer.statsfile)
     "margin": [lo, hi] | null,                  # equivalence margin the verdict used
     "calibration": {"shape", "size", "size_se", "power": {alternative: value}, "n_replicates"} | null,
                                                 # written from stats/claims/details.py's RuleCalibration (claims
                                                 # 1, 2) or WorstCalibration (claim 3, with its size bounds)
     "pvalue_holm": float | null,
     "tests": [{"name", "statistic", "pvalue", "rejected"}],
     "per_run": {run_id: ClaimRecord without per_run/per_optimizer},
     "per_optimizer": {optimizer: ClaimRecord without per_run/per_optimizer},
     "per_model": {model variant: ClaimRecord} (claim 4: one verdict per model variant; claims 1 and 2: one per
                   training configuration "<model>__<optimizer>", decided on its seeds, beside the pooled verdict),
     "seeds": SeedUnit | null,                   # how many seeds the headline interval is over, and the nesting
     "details": ClaimDetails}                    # typed per claim and level (below); {} when a record has none

ClaimDetails: one frozen record per claim and level (brownformer.stats.claims.details; the JSON key is the field's
name; a key marked [opt] is left out when it does not apply). Readers get them back typed with
`read_claims(path, parse_details=brownformer.stats.claims.details.parse_details)` (brownformer.results does).
Numbers that JSON cannot hold (NaN, inf) are null.

- Claim 1. headline Claim1Details {"pvalue", "not_applicable": {run: why}, "deciding_configuration",
  "decided_on": {ln placement: what}, "margins": {criterion: [lo, hi]}, "rule", "rule_history", "did_not_train"};
  per_model Claim1ConfigurationDetails {"ln", "decided_on", "criteria": {criterion: Criterion}, "seeds", "pvalue"}
  or (unit "inputs") Claim1FixedModelDetails {"ln", "decided_on", "criteria", "description": Claim1SeedDetails,
  "unit", "pvalue"}; per_run Claim1SeedDetails {"ln", "decided_on", "judged_from_step", "n_captures",
  "per_layer": {criterion: [L]}, "within_seed": {criterion: WithinSeed}, "definitional": {"label",
  "min_fraction_on_sphere"}, "residual_stream" [opt], "affine_map" [opt], "gauge_dependent" [opt, pre-LN]}
  (a fixed model's per_run record is its per_model one).
- Claim 2. headline Claim2Details {"pvalue", "deciding_configuration", "rule_history", "rule"}; per_model
  Claim2ConfigurationDetails {"pvalue", "causal", "criteria", "vmf_fit", "seeds", "verdict_head_isotropy",
  "verdict_vmf_output_error", "verdict_reversibility"} or Claim2FixedModelDetails (the same and "unit",
  "description"); per_run Claim2SeedDetails {"values", "worst_head", "within_seed", "head_isotropy", "vmf_fit",
  "whole_sphere_fit", "causal", "margins", "n_inputs", "n_captures", "step0_baseline", "head_averaged"}, its
  "worst_head" a WorstHead {"layer", "head", "n_heads"} or {"why_undefined"}, its "head_isotropy" a HeadCheck
  {"verdict", "estimate", "step", "layer", "head", ...} or UndefinedHeadCheck {"verdict", "why_undefined", "margin"}.
- Criterion (claims 1, 2), by layout: SeedCriterion {"verdict", "estimate", "confidence_interval", "layer",
  "margin", "n_layers", "n_seeds", "why", "per_layer", "pvalue"}; InputCriterion (claim 1, one fixed model) {...,
  "capture", "n_cells", "interval_over", "power" (InputPower {"true_value", "standard_error", "power", "method"})};
  PooledCriterion (claim 2) {"verdict", "estimate", "confidence_interval", "margin", "why", "pool", "pvalue"};
  InputCriterion2 (claim 2, one fixed model) {..., "interval_over"}; UndecidedCriterion {"verdict", "margin",
  "why" [opt], "why_undefined" [opt]}.
- Claims 3a/3b/3c. headline Claim3Details {"pvalue", "per_configuration": {configuration: seed pool},
  "pvalue_note", "pooling": ClaimPooling | {}, "run_q_values_bh", "rule", "pooling_rule", "rule_history", "n_runs",
  "unit_of_replication", "estimate_se", "estimate_df", "estimate_method", "single_path" [opt]: {run: {"n_files",
  "rule_verdicts", "msd_exponent_mean"}}, "single_path_note" [opt]}; ClaimPooling {"rule", "run_size_bounds",
  "m_claim", "size", "n_not_supported", "pvalue"}; per_run Claim3RunDetails {"files": [FileRow], "n_brownian",
  "n_not_brownian", "n_files", "pooling": {"rule", "file_sizes", "k_run", "size_bound", "n_not_brownian",
  "pvalue"}, "pvalue", "classifications", "estimate_se", "estimate_df", "estimate_method", "spread_over_files"
  (an estimate, headline layout)}; FileRow {"path", "verdict", "reason", "msd_exponent", "shape_id", "size",
  "size_fitted", "classification", "window", "window_description", "ensemble_exponent", "full_range_exponent",
  "window_null_size", "walkers", "walker_rates"}; per_optimizer Claim3OptimizerDetails {"pooling", "pvalue"}.
- Claim 4. headline Claim4Details {"pvalue", "proposed", "baselines", "target_optimizer", "target_levels",
  "seconds_margin", "did_not_train", "scope", "estimate_bound", "estimate_text", "max_size", "rule_history"};
  per_model Claim4ModelDetails {"pvalue", "rule_error_rates", "levels", and the comparison's own record
  (stats/comparison/time_to_target.py): "model", "metric", "higher_is_better", "target", "proposed", "baseline",
  "baselines", "runs", "km_median_steps", "ratios", "verdicts", "final_at_budget", "verdict", "reason",
  "protocol_met"}, or Claim4EstimatedModelDetails where a steps ratio exists (the same and "estimate_bound",
  "estimate_text", "n_censored"); its blocks are stats/claims/comparison_records.py's records, each written key for
  key as its stats/comparison result writes itself: "km_median_steps" optimizer -> KMMedian {"estimate", "bound",
  "n", "n_censored", "text"}, "ratios" baseline -> clock -> MedianRatio {"estimate", "bound", "text"
  (the AFT log-rank point estimate), "confidence_interval", "confidence_level", "medians", "n", "n_censored",
  "margin", "statistic", "pvalue", "pvalue_slower", "km_median_ratio", "km_median_ratio_bound",
  "km_median_ratio_text" (the ratio of KM medians, descriptive), "method"} ("medians" on the ratio's clock: steps,
  or training seconds, KM median steps x each optimizer's seconds per step), "verdicts" baseline ->
  statsfile.Decision {"verdict", "reason"}, "rule_error_rates" RuleErrorSummary {"size", "size_not_supported",
  "max_size", "per_baseline": baseline -> BaselineRates}, "levels" share -> TargetLevel {"target", "best_baseline",
  "km_median_steps", "steps_ratios", "verdict", "reason"}. Claim 4's headline estimate, "estimate_bound" and
  "estimate_text" are the steps ratio's AFT point estimate against the best baseline.

SeedUnit (issue 32: seeds are the unit of inference)::

    {"unit": "training run (seed)", "n_seeds": {configuration: seeds pooled}, "min_seeds": int,
     "nesting": "what was averaged inside a seed, and the interval over seeds", "interval": "method",
     "decided": [configurations with at least min_seeds seeds]}

A configuration with fewer than min_seeds seeds is "inconclusive" with the reason "n seeds < minimum".

A verdict is never anything but the four strings in VERDICTS; `read_claims` rejects anything else
with a ValueError naming the claim, instead of guessing what "yes" or "pass" meant.

Names are scipy's, as in the per-run statistics contract (brownformer.statsfile): "pvalue",
"confidence_interval", "rejected", also inside "tests" and "details". Schema history: 2 spelt "p_value",
"ci", "reject" and "p_value_holm"; a record that uses one of them, at any depth, is refused (a writer
that still spells them would otherwise be read as "no p-value"), and so is a file of another schema. 3 had claim 4's
ratio of KM medians as the ratios' estimate (no "km_median_ratio" keys; issue 31) and then, until schema 4, a
seconds ratio whose "medians" were steps: read as 4 it would print steps as seconds, so it is refused too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

from brownformer.statsfile import CLAIM_VERDICTS, Decision, EffectResult, check_keys, plain_value

__all__ = ["VERDICTS", "Verdict", "Decision", "SUPPORTED", "NOT_SUPPORTED", "INCONCLUSIVE", "DID_NOT_TRAIN",
           "SeedUnit", "ClaimDetails", "NoDetails", "UntypedDetails", "ClaimRecord", "ClaimsFile", "read_claims",
           "SCHEMA_VERSION"]

SCHEMA_VERSION = 4
#: what a file of an older schema lacks, for the error that refuses it (the module docstring's schema history)
OLD_SCHEMAS = {2: "it spells p_value, ci, reject, p_value_holm",
               3: "claim 4's time ratios lack the AFT estimate's km_median_ratio keys or hold steps as seconds medians"}
#: schema 2's spellings, refused anywhere in a record
OLD_NAMES = ("p_value", "ci", "reject", "p_value_holm")
VERDICTS = CLAIM_VERDICTS
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, DID_NOT_TRAIN = VERDICTS
Verdict = Literal["supported", "not supported", "inconclusive", "did not train"]


def _old_names(obj: Any, where: str = "") -> list[str]:
    """The paths of keys spelt as schema 2 did (OLD_NAMES) anywhere in `obj`."""
    if isinstance(obj, dict):
        return [p for k, v in obj.items()
                for p in ([f"{where}{k}"] if k in OLD_NAMES else []) + _old_names(v, f"{where}{k}.")]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in _old_names(v, f"{where}{i}.")]
    return []


class ClaimDetails:
    """Base of a claim's typed `details` (brownformer.stats.claims.details holds one frozen dataclass per claim and
    level). The JSON key is the field's name; a field named in `_optional` is left out of the JSON when None (a key
    some records have and others lack), one named in `_empty` is written as {} when None (a block that can be
    empty); `_nested` names the parser of each field that holds nested records; `_order` the keys written first."""

    _nested: ClassVar[dict[str, Callable]] = {}
    _optional: ClassVar[frozenset[str]] = frozenset()
    _empty: ClassVar[frozenset[str]] = frozenset()
    _order: ClassVar[tuple[str, ...]] = ()  # keys written first, in this order (a subclass's own fields among them)

    def to_dict(self) -> dict:
        names = [f.name for f in fields(self)]
        out = {}
        for name in [*self._order, *(n for n in names if n not in self._order)]:
            v = getattr(self, name)
            if v is None and name in self._optional:
                continue
            out[name] = {} if v is None and name in self._empty else plain_value(v)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None):
        """The record from its JSON (ValueError naming `where` and any unknown or missing key); a record of this type
        is taken as it is."""
        if isinstance(d, cls):
            return d
        where = where or cls.__name__
        check_keys(cls, d, where, f"claims.json schema {SCHEMA_VERSION}, {cls.__name__}", optional=cls._optional)
        return cls(**{k: (None if k in cls._empty and v == {} else
                          cls._nested[k](v, f"{where}.{k}") if k in cls._nested and v is not None else v)
                      for k, v in d.items()})


@dataclass(frozen=True)
class NoDetails(ClaimDetails):
    """The details of a record that has none (a run that did not train, a claim not measured): {} in JSON."""


@dataclass(frozen=True)
class UntypedDetails(ClaimDetails):
    """Details read without their claim's parser (`read_claims` without `parse_details`): the JSON mapping as it is.
    The claim rules never write it; readers that know the claims pass brownformer.stats.claims.details.parse_details."""
    values: dict

    def to_dict(self) -> dict:
        return dict(self.values)


@dataclass(frozen=True)
class SeedUnit:
    """How a claim's headline interval treats seeds: how many per configuration, the minimum, and the nesting."""
    n_seeds: dict[str, int]
    min_seeds: int
    nesting: str
    interval: str
    unit: str = "training run (seed)"

    @property
    def decided(self) -> list[str]:
        """The configurations with enough seeds to decide."""
        return sorted(k for k, n in self.n_seeds.items() if n >= self.min_seeds)

    @classmethod
    def from_dict(cls, d: dict | None) -> SeedUnit | None:
        if not d:
            return None
        return cls({str(k): int(v) for k, v in (d.get("n_seeds") or {}).items()}, int(d.get("min_seeds", 0)),
                   str(d.get("nesting", "")), str(d.get("interval", "")), str(d.get("unit", "training run (seed)")))

    def to_dict(self) -> dict:
        return {"unit": self.unit, "n_seeds": dict(self.n_seeds), "min_seeds": self.min_seeds,
                "nesting": self.nesting, "interval": self.interval, "decided": self.decided}


#: the levels a ClaimRecord sits at in claims.json: the headline claim, and its records per run, optimizer, model
LEVELS = ("claim", "per_run", "per_optimizer", "per_model")
#: (claim id, level, details JSON) -> the typed details record (brownformer.stats.claims.details.parse_details)
DetailsParser = Callable[[str, str, dict], ClaimDetails]


def _untyped(claim: str, level: str, d: dict) -> ClaimDetails:
    return UntypedDetails(dict(d)) if d else NoDetails()


@dataclass(frozen=True)
class ClaimRecord:
    """One verdict: a headline claim, or the same claim on one run or one optimizer."""
    claim: str
    title: str
    verdict: Verdict
    reason: str = ""
    estimate: EffectResult | None = None  # the "headline" layout
    margin: tuple[float, float] | None = None
    # the rule's size and power: a typed record as the claim rules build it (stats/claims/details.py), its JSON mapping
    # as claims.json is read back (the report reads the mapping: results.claims_frame.calibration_fields)
    calibration: ClaimDetails | dict | None = None
    pvalue_holm: float | None = None
    tests: list[dict] = field(default_factory=list)
    per_run: dict[str, ClaimRecord] = field(default_factory=dict)
    per_optimizer: dict[str, ClaimRecord] = field(default_factory=dict)
    per_model: dict[str, ClaimRecord] = field(default_factory=dict)
    details: ClaimDetails = field(default_factory=NoDetails)
    seeds: SeedUnit | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.claim!r}: verdict {self.verdict!r} is not one of {VERDICTS}")
        if not isinstance(self.details, ClaimDetails):
            raise ValueError(f"claim {self.claim!r}: details must be a typed record (brownformer.stats.claims."
                             f"details), got {type(self.details).__name__}")
        old = _old_names({"tests": self.tests, "details": self.details.to_dict()})
        if old:
            raise ValueError(f"claim {self.claim!r}: schema {SCHEMA_VERSION} spells scipy's names (pvalue, "
                             f"confidence_interval, rejected), found {old}")

    @classmethod
    def from_dict(cls, d: dict, *, claim: str | None = None, title: str | None = None, level: str = "claim",
                  parse_details: DetailsParser | None = None) -> ClaimRecord:
        """The record from its JSON; `parse_details` types its details (without it they stay UntypedDetails)."""
        cid = str(d.get("claim", claim or ""))
        if "verdict" not in d:
            raise ValueError(f"claim {cid!r} has no verdict")
        ttl = str(d.get("title", title or cid))
        margin = d.get("margin")
        parse = parse_details or _untyped

        def subs(lvl: str) -> dict[str, ClaimRecord]:
            return {k: cls.from_dict(v, claim=cid, title=ttl, level=lvl, parse_details=parse_details)
                    for k, v in (d.get(lvl) or {}).items()}

        return cls(
            claim=cid, title=ttl, verdict=d["verdict"], reason=str(d.get("reason") or ""),
            estimate=EffectResult.from_dict(d.get("estimate"), f"claim {cid}.estimate", form="headline"),
            margin=(float(margin[0]), float(margin[1])) if margin else None,
            calibration=d.get("calibration"), pvalue_holm=d.get("pvalue_holm"),
            tests=list(d.get("tests") or []),
            per_run=subs("per_run"), per_optimizer=subs("per_optimizer"), per_model=subs("per_model"),
            details=parse(cid, level, dict(d.get("details") or {})), seeds=SeedUnit.from_dict(d.get("seeds")))

    def to_dict(self) -> dict:
        return {"claim": self.claim, "title": self.title, "verdict": self.verdict, "reason": self.reason,
                "estimate": self.estimate.to_dict() if self.estimate else None,
                "margin": list(self.margin) if self.margin else None,
                "calibration": plain_value(self.calibration), "pvalue_holm": self.pvalue_holm, "tests": self.tests,
                "per_run": {k: v.to_dict() for k, v in self.per_run.items()},
                "per_optimizer": {k: v.to_dict() for k, v in self.per_optimizer.items()},
                "per_model": {k: v.to_dict() for k, v in self.per_model.items()},
                "seeds": self.seeds.to_dict() if self.seeds else None, "details": self.details.to_dict()}


@dataclass(frozen=True)
class ClaimsFile:
    """The whole claims.json."""
    claims: dict[str, ClaimRecord]
    did_not_train: list[dict] = field(default_factory=list)
    calibration: dict = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict, *, parse_details: DetailsParser | None = None) -> ClaimsFile:
        if not isinstance(d, dict) or "claims" not in d:
            raise ValueError("claims.json has no 'claims' mapping")
        return cls(claims={str(k): ClaimRecord.from_dict(v, claim=str(k), parse_details=parse_details)
                           for k, v in d["claims"].items()},
                   did_not_train=list(d.get("did_not_train") or []), calibration=dict(d.get("calibration") or {}),
                   runs=list(d.get("runs") or []))

    def to_dict(self) -> dict:
        return {"schema": SCHEMA_VERSION, "claims": {k: v.to_dict() for k, v in self.claims.items()},
                "did_not_train": self.did_not_train, "calibration": self.calibration, "runs": self.runs}


def read_claims(path: str | Path, *, parse_details: DetailsParser | None = None) -> ClaimsFile:
    """Read and validate claims.json (ValueError naming the problem on a malformed file); `parse_details`
    (brownformer.stats.claims.details.parse_details, which brownformer.results' reader passes) types each record's
    details."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if isinstance(data, dict) and data.get("schema") != SCHEMA_VERSION:
        found = data.get("schema")
        why = OLD_SCHEMAS.get(found) if isinstance(found, int) else None
        raise ValueError(f"{path}: claims.json schema {found!r}; this version reads {SCHEMA_VERSION} only"
                         + (f" (schema {found}: {why})" if why else "") + "; regenerate it: rerun `brownformer stats "
                         "summary` on its results")
    return ClaimsFile.from_dict(data, parse_details=parse_details)
