"""Claim 4's optimizer comparison in claims.json as typed records: what a model variant's record holds of
stats/comparison's results (Kaplan-Meier medians, time ratios: the AFT estimate with its interval and the ratio of
KM medians beside it, per-baseline verdicts, the size gate's rates and the other target shares).

Each record's `to_dict()` is, key for key, the JSON its result writes (survival.CensoredMedian,
survival.MedianRatioResult, time_to_target_size.RuleErrorRates), so claims.json keeps its layout; `of(result)` builds
the record from the result's attributes and `from_dict` reads it back from claims.json (verdicts.ClaimDetails), so the
claim rule and the report hold the same types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from brownformer.io import to_jsonable
from brownformer.verdicts import ClaimDetails


__all__ = ["KMMedian", "MedianRatio", "BaselineRates", "RuleErrorSummary", "TargetLevel",
           "records_of", "STEPS", "SECONDS"]

#: the clocks of a comparison's ratios (time_to_target: one ratio per clock and baseline)
STEPS, SECONDS = "steps", "seconds"


def records_of(parse: Callable[[Any, str], Any]) -> Callable[[dict, str], dict]:
    """A `_nested` parser of a mapping key -> record (each read with `parse`, its place named)."""
    return lambda d, where: {k: parse(v, f"{where}.{k}") for k, v in d.items()}


@dataclass(frozen=True)
class KMMedian(ClaimDetails):
    """One optimizer's Kaplan-Meier median time to the target (survival.CensoredMedian): "> budget" (bound ">") when
    the median is not reached; estimate None where undefined, "inf"/"-inf" for an infinity (to_jsonable's
    infinity="string")."""
    estimate: float | str | None
    bound: str | None
    n: int
    n_censored: int
    text: str

    @classmethod
    def of(cls, m) -> KMMedian:
        return cls(to_jsonable(float(m.estimate), infinity="string"), m.bound, int(m.n), int(m.n_censored), m.text())

    @property
    def reached(self) -> bool:
        """Whether the median is a number (reached, finite), not a bound."""
        return self.bound is None and isinstance(self.estimate, (int, float)) and math.isfinite(self.estimate)


@dataclass(frozen=True)
class MedianRatio(ClaimDetails):
    """Proposed / baseline time to the target (survival.MedianRatioResult): the AFT log-rank point estimate (or its
    bound; `estimate`, `bound`, `text`), the inverted AFT log-rank interval around it, the one-sided p-values at the
    margin, and the ratio of KM medians (or its bound), descriptive only (`km_median_ratio`, `km_median_ratio_bound`,
    `km_median_ratio_text`). `medians` are on the record's clock: steps, or training seconds in a seconds ratio (each
    optimizer's KM median steps times its own median training seconds per step; schema 4)."""
    estimate: float | str | None
    bound: str | None
    text: str
    confidence_interval: list
    confidence_level: float
    medians: list[KMMedian]  # (proposed, baseline)
    n: list[int]
    n_censored: list[int]
    margin: float
    statistic: float | str | None
    pvalue: float | str | None
    pvalue_slower: float | str | None
    km_median_ratio: float | str | None
    km_median_ratio_bound: str | None
    km_median_ratio_text: str
    method: str
    _nested = {"medians": lambda v, where: [KMMedian.from_dict(m, f"{where}.{i}") for i, m in enumerate(v)]}

    @classmethod
    def of(cls, r) -> MedianRatio:
        def number(x):  # an infinite end or median the data cannot bound stays "inf" in claims.json
            return to_jsonable(float(x), infinity="string")
        return cls(estimate=number(r.estimate), bound=r.bound, text=r.text(),
                   confidence_interval=[number(c) for c in r.confidence_interval],
                   confidence_level=r.confidence_level, medians=[KMMedian.of(m) for m in r.medians], n=list(r.n),
                   n_censored=[m.n_censored for m in r.medians], margin=r.margin, statistic=number(r.statistic),
                   pvalue=number(r.pvalue), pvalue_slower=number(r.pvalue_slower),
                   km_median_ratio=number(r.km_median_ratio), km_median_ratio_bound=r.km_median_ratio_bound,
                   km_median_ratio_text=r.km_median_ratio_text(), method=r.method)


@dataclass(frozen=True)
class BaselineRates(ClaimDetails):
    """The steps rule's simulated verdict rates at one comparison's shape (time_to_target_size.RuleErrorRates):
    `rates` maps a true ratio ("0.5") to the rate of each verdict."""
    n: list[int]
    budget: float
    eval_every: float
    log_mu: float
    log_sigma: float
    margin: float
    replicates: int
    size: float
    size_not_supported: float
    max_size: float
    rates: dict[str, dict[str, float]]
    critical: list[float] | None = None  # (faster, slower) critical values the rates were simulated at

    @classmethod
    def of(cls, r) -> BaselineRates:
        return cls(**r.to_dict())  # RuleErrorRates' JSON is flat: its keys are this record's fields


@dataclass(frozen=True)
class RuleErrorSummary(ClaimDetails):
    """The size gate of one model variant: the largest rates over the baselines (what one number can say), each
    baseline's beside them."""
    size: float
    size_not_supported: float
    max_size: float
    per_baseline: dict[str, BaselineRates]
    _nested = {"per_baseline": records_of(BaselineRates.from_dict)}

    @classmethod
    def of(cls, rates: dict, max_size: float) -> RuleErrorSummary:
        """From baseline -> time_to_target_size.RuleErrorRates."""
        return cls(size=max(r.size for r in rates.values()),
                   size_not_supported=max(r.size_not_supported for r in rates.values()), max_size=max_size,
                   per_baseline={b: BaselineRates.of(r) for b, r in rates.items()})


@dataclass(frozen=True)
class TargetLevel(ClaimDetails):
    """One target share of a model variant (reported, not deciding): the target, KM medians and every baseline's
    steps ratio."""
    target: float | None
    best_baseline: str | None
    km_median_steps: dict[str, KMMedian]
    steps_ratios: dict[str, MedianRatio]
    verdict: str
    reason: str
    _nested = {"km_median_steps": records_of(KMMedian.from_dict), "steps_ratios": records_of(MedianRatio.from_dict)}

    @classmethod
    def of(cls, res) -> TargetLevel:
        """From time_to_target.TimeToTargetResult at that share's target."""
        return cls(target=res.target, best_baseline=res.baseline,
                   km_median_steps={o: KMMedian.of(m) for o, m in res.medians.items()},
                   steps_ratios={b: MedianRatio.of(r.steps) for b, r in res.ratios.items()},
                   verdict=res.verdict, reason=res.reason)
