"""What every claim module shares: unit-level intervals, the equivalence verdict, pooling and Holm.

One decision rule for claims 1, 2 and 4 (the Brownian claims use the calibrated battery rule):
an effect's confidence interval (StatsConfig.confidence_level, over independent units: probe inputs
within a run, seeds, or runs) lies inside its margin -> "supported"; entirely outside -> "not
supported"; otherwise "inconclusive". A run pools into a claim only when it trained
(stats/core/training_status.py). Across runs the claims are universal statements ("every trained model's
LayerNorm output is on the sphere"), so the pooled verdict is an intersection-union test:
supported when every run is supported (its p-value is the largest per-run p-value), not supported
when some run is not supported, else inconclusive.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from brownformer.config import ConfigError, RunSpec
from brownformer.verdicts import (DID_NOT_TRAIN, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord, SeedUnit)
from brownformer.statsfile import Decision, EffectResult

from brownformer.stats.core.bootstrap import ClusterBootstrap
from brownformer.stats.core.multiple import holm_adjust
from brownformer.stats.core.pooling import MIN_SEEDS, NESTING, SeedPoolResult, seed_pool
from brownformer.stats.diffusion.replica_sets import base_run

__all__ = ["unit_mean_interval", "independent_mean_interval", "equivalence_verdict", "equivalence_pvalue", "pool_runs",
           "headline_holm", "did_not_train_record", "finite_or_none", "configuration_of", "seed_unit",
           "seed_verdict", "family_interval", "configuration_pools", "ConfigurationPool", "UNITS", "check_unit",
           "FIXED_MODEL_UNIT", "fixed_model_unit", "se_from_interval", "interval_power"]

#: the unit of inference of claims 1 and 2. "seeds" (the default): training runs of one configuration, the
#: population a trained model is one draw of. "inputs": the probe inputs of ONE fixed model (a pretrained checkpoint:
#: one model, not a sample of seeds), answering "does this model have the property" and nothing about other trainings.
UNITS = ("seeds", "inputs")
#: what the "inputs" unit is, in claims.json (SeedUnit.unit) and in every fixed-model reason
FIXED_MODEL_UNIT = "probe inputs of one fixed model; says nothing about other trainings"
_FIXED_MODEL_NESTING = ("tokens (and layers, heads) are averaged inside each probe input into one value per input; the "
                        "interval is the cluster-bootstrap t-interval over the probe inputs of the one model; weights "
                        "(head isotropy) are known exactly, with no sampling error")


def finite_or_none(x) -> float | None:
    """float(x) when finite, else None (JSON has no NaN)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def unit_mean_interval(values, *, stats, name: str) -> tuple[EffectResult, float]:
    """Mean over independent units with its cluster-bootstrap t-interval (stats/core/bootstrap.py).

    Args:
        values: one number per unit (NaN units are dropped).
        stats: StatsConfig (confidence_level, n_resamples, seed).
        name: what the estimate is.

    Returns:
        (EffectResult, standard error); the interval is NaN with fewer than 3 units, a point with no spread.
    """
    v = np.asarray([x for x in np.ravel(np.asarray(values, float)) if np.isfinite(x)], float)
    if v.size == 0:
        return EffectResult.headline(name, math.nan, (math.nan, math.nan), stats.confidence_level), math.nan
    if np.ptp(v) == 0:
        return EffectResult.headline(name, float(v[0]), (float(v[0]), float(v[0])), stats.confidence_level), 0.0
    boot = ClusterBootstrap(np.arange(v.size), n_resamples=stats.n_resamples, rng=stats.seed)
    est = boot.estimate(v[:, None], lambda m: m[..., 0])
    lo, hi = est.interval(stats.confidence_level)
    se = float(est.standard_error[0]) * math.sqrt(v.size / max(v.size - 1, 1))
    return EffectResult.headline(name, float(est.estimate[0]), (float(lo[0]), float(hi[0])), stats.confidence_level), se


def independent_mean_interval(values, ses, dfs, *, stats, name: str) -> tuple[EffectResult, float, float]:
    """Mean of independent estimates (runs: independent training runs) with its t-interval from their own errors.

    SE = sqrt(sum_r SE_r^2) / R, degrees of freedom by Welch-Satterthwaite, (sum SE_r^2)^2 / sum(SE_r^4 / df_r).
    The target is the mean over these runs (a fixed set, not a sample of configurations), so the uncertainty is each
    run's own sampling error, not the spread between runs (which a bootstrap over 2-5 heterogeneous runs would
    estimate, and could not with fewer than 3).

    Args:
        values, ses, dfs: per unit its estimate, standard error and degrees of freedom (units without a finite
            estimate are dropped; one without a finite SE or df leaves the interval undefined).
        stats: StatsConfig (confidence_level); name: what the estimate is.

    Returns:
        (EffectResult, SE, df); SE and df NaN when undefined.
    """
    rows = [(float(v), _num(s), _num(d)) for v, s, d in zip(values, ses, dfs) if math.isfinite(_num(v))]
    nan = math.nan
    if not rows:
        return EffectResult.headline(name, nan, (nan, nan), stats.confidence_level), nan, nan
    v, s, d = (np.asarray(c, float) for c in zip(*rows))
    mean = float(v.mean())
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(d)) and np.all(d > 0)):
        return EffectResult.headline(name, mean, (nan, nan), stats.confidence_level), nan, nan
    se = float(np.sqrt(np.sum(s ** 2)) / s.size)
    df = float(np.sum(s ** 2) ** 2 / np.sum(s ** 4 / d)) if np.any(s > 0) else float(d.min())
    half = float(sps.t.ppf(0.5 + stats.confidence_level / 2, df)) * se
    return EffectResult.headline(name, mean, (mean - half, mean + half), stats.confidence_level), se, df


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def equivalence_verdict(ci, margin) -> str:
    """CI inside [lo, hi] -> supported; entirely outside -> not supported; else (or undefined) inconclusive."""
    lo, hi = (float(c) if c is not None else math.nan for c in ci)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return INCONCLUSIVE
    if lo >= margin[0] and hi <= margin[1]:
        return SUPPORTED
    if hi < margin[0] or lo > margin[1]:
        return NOT_SUPPORTED
    return INCONCLUSIVE


def equivalence_pvalue(estimate: float, se: float, margin, df: int | None = None) -> float | None:
    """TOST p-value of H0 "the effect lies outside the margin": the larger of the two one-sided
    p-values (Schuirmann 1987), Student t with df degrees of freedom (normal when df is None).
    A zero standard error gives 0 inside the margin and 1 outside; None when undefined."""
    if estimate is None or not math.isfinite(estimate) or se is None or not math.isfinite(se):
        return None
    inside = margin[0] <= estimate <= margin[1]
    if se == 0:
        return 0.0 if inside else 1.0
    dist = sps.t(df) if df else sps.norm()
    p_low = dist.sf((estimate - margin[0]) / se) if math.isfinite(margin[0]) else 0.0
    p_high = dist.sf((margin[1] - estimate) / se) if math.isfinite(margin[1]) else 0.0
    return float(max(p_low, p_high))


#: the rule `pool_runs` decides by, as its Decision names it
POOL_RULE = "intersection-union over the pooled records"


def pool_runs(per_run: dict[str, ClaimRecord], *, excluded: dict[str, str],
              unit: str = "runs") -> tuple[Decision, str | None]:
    """Intersection-union pooling of per-run verdicts (module docstring).

    Args:
        per_run: run -> record (records of runs that did not train are ignored here).
        excluded: run -> reason, the runs that did not train.
        unit: what the keys are, for the reason ("runs", "model variants").

    Returns:
        (Decision, deciding run): the run whose record decides the verdict (the first run not supported, else the
        least certain supported run), or None.
    """
    pooled = {r: rec for r, rec in per_run.items() if r not in excluded and rec.verdict != DID_NOT_TRAIN}
    left_out = f"; {len(excluded)} run(s) that did not train left out" if excluded else ""
    if not pooled:
        return Decision(INCONCLUSIVE, f"no {unit} with data for this claim" + left_out, rule=POOL_RULE), None
    counts = {v: sum(rec.verdict == v for rec in pooled.values()) for v in (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)}
    text = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    bad = sorted(r for r, rec in pooled.items() if rec.verdict == NOT_SUPPORTED)
    if bad:
        return Decision(NOT_SUPPORTED, f"{len(bad)} of {len(pooled)} {unit} not supported ({text}){left_out}",
                        rule=POOL_RULE), bad[0]
    if counts[SUPPORTED] == len(pooled):
        return Decision(SUPPORTED, f"all {len(pooled)} {unit} supported{left_out}", rule=POOL_RULE), None
    return Decision(INCONCLUSIVE, f"not all {len(pooled)} {unit} decided ({text}){left_out}", rule=POOL_RULE), None


def did_not_train_record(claim: str, title: str, reason: str) -> ClaimRecord:
    """The per-run record of a run left out because it did not train."""
    return ClaimRecord(claim=claim, title=title, verdict=DID_NOT_TRAIN, reason=reason)


def headline_holm(claims: list[ClaimRecord]) -> tuple[ClaimRecord, ...]:
    """The headline claims (in their order) with their p-values (`details.pvalue`) Holm-adjusted into
    `pvalue_holm`; a claim without a finite p-value keeps pvalue_holm None."""
    pvalues = [c.details.pvalue for c in claims]
    tested = [i for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    adjusted = dict(zip(tested, holm_adjust([pvalues[i] for i in tested]))) if tested else {}
    return tuple(replace(c, pvalue_holm=float(adjusted[i])) if i in adjusted else c for i, c in enumerate(claims))


def configuration_of(run: str) -> tuple[str, str]:
    """(configuration, seed label) of a run id: "<model>__<optimizer>" and "s<seed>" (issue 32: seeds of one
    configuration are the unit of inference). A run id of another form (a user's pretrained model) is its own
    configuration with one seed. A replica set's key ("<run>__replicas") is its base run's seed."""
    try:
        spec = RunSpec.parse(base_run(run))
    except ConfigError:
        return run, run
    return f"{spec.model}__{spec.optimizer}", f"s{spec.seed}" + (f"r{spec.replica}" if spec.replica else "")


#: the rule seed_verdict decides by
SEED_RULE = ("equivalence: the t-interval over seeds inside the margin; outside it (refuted) also at the "
             "Bonferroni level over the claim's components")


def seed_verdict(pool: SeedPoolResult, margin, *, family: int = 1) -> Decision:
    """The Decision of a seed-level interval: equivalence_verdict of its interval (reason ""), "inconclusive" with
    the pool's reason below the seed minimum.

    ``family``: how many components (criteria x layers x configurations) the claim refutes by, one being enough. The
    claim says the property holds in every one of them, so "supported" needs every interval inside (intersection-
    union: no correction), but "not supported" needs only one outside: tested each at the one-sided level
    a = (1 - confidence_level) / 2, a claim true on every edge would be refuted with probability up to
    1 - (1 - a)^family. So "not supported" needs the interval at the Bonferroni level 1 - (1 - confidence_level) /
    family outside too (:func:`family_interval`); the claim is then refuted exactly when Holm's procedure over the
    family rejects some component (Holm's first step is Bonferroni's), at family-wise level a. Otherwise
    "inconclusive", saying so."""
    if not pool.decidable:
        return Decision(INCONCLUSIVE, pool.why_undecidable or "", rule=SEED_RULE)
    verdict = equivalence_verdict(pool.confidence_interval, margin)
    if verdict == NOT_SUPPORTED and family > 1 and equivalence_verdict(family_interval(pool, family),
                                                                       margin) != NOT_SUPPORTED:
        return Decision(INCONCLUSIVE, f"outside the margin at {pool.confidence_level:.0%}, not at the family-wise "
                        f"level over the claim's {family} components (Bonferroni)", rule=SEED_RULE)
    return Decision(verdict, rule=SEED_RULE)


def family_interval(pool: SeedPoolResult, family: int) -> tuple[float, float]:
    """The pool's t-interval over seeds at the Bonferroni level 1 - (1 - confidence_level) / family."""
    tail = (1 - pool.confidence_level) / (2 * family)
    half = float(sps.t.ppf(1 - tail, pool.df)) * pool.standard_error if pool.df else math.nan
    return pool.estimate - half, pool.estimate + half


def seed_unit(n_seeds: dict[str, int], *, nesting: str = NESTING,
              interval: str = "Student t-interval over per-seed estimates, per configuration") -> SeedUnit:
    """The claims.json record of how a claim's interval treats seeds (verdicts.SeedUnit)."""
    return SeedUnit(dict(sorted(n_seeds.items())), MIN_SEEDS, nesting, interval)


@dataclass(frozen=True)
class ConfigurationPool:
    """One training configuration ("<model>__<optimizer>") and the seed-level pool of its runs' estimates."""
    configuration: str
    pool: SeedPoolResult


def configuration_pools(values_by_run: dict[str, float], *, confidence_level: float,
                        nesting: str = NESTING) -> tuple[ConfigurationPool, ...]:
    """Per configuration (in the order of its first run, runs sorted), the seed-level pool (stats/core/pooling.py
    `seed_pool`) of one estimate per run.

    The entry point every claim shares for seeds as the unit: `values_by_run` holds each run's (or replica
    set's) own estimate with everything inside it already nested; runs group by `configuration_of`.
    """
    groups: dict[str, dict[str, float]] = {}
    for run, value in sorted(values_by_run.items()):
        config, seed = configuration_of(run)
        groups.setdefault(config, {})[seed] = value
    return tuple(ConfigurationPool(c, seed_pool(v, confidence_level=confidence_level, nesting=nesting))
                 for c, v in groups.items())


def check_unit(unit: str) -> str:
    """`unit` when it is one of UNITS, else ValueError naming the allowed ones."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    return unit


def fixed_model_unit(models) -> SeedUnit:
    """The claims.json record of the "inputs" unit: each model is one fixed model (n_seeds 1, which decides)."""
    return SeedUnit({str(m): 1 for m in sorted(models)}, 1, _FIXED_MODEL_NESTING,
                    "cluster-bootstrap t-interval over the probe inputs of one fixed model", unit=FIXED_MODEL_UNIT)


def se_from_interval(ci, confidence_level: float) -> float:
    """The standard error a two-sided normal interval of this width implies: (hi - lo) / (2 z_{(1 + cl)/2})."""
    lo, hi = (_num(c) for c in ci)
    return (hi - lo) / (2 * float(sps.norm.ppf(0.5 + confidence_level / 2))) if math.isfinite(hi - lo) else math.nan


def interval_power(se: float, true_value: float, margin, *, confidence_level: float) -> float | None:
    """P(a normal interval estimate +- z se lies inside `margin`) when the estimate is N(true_value, se^2): the power
    of a fixed model's interval over its inputs at that true value (1 - the two edges' failure probabilities, a lower
    bound). With se 0 (an exact quantity) it is 1 inside the margin, 0 outside; None when se is undefined."""
    if not math.isfinite(_num(se)):
        return None
    if se == 0:
        return float(margin[0] <= true_value <= margin[1])
    z = float(sps.norm.ppf(0.5 + confidence_level / 2))
    fail = sum(float(sps.norm.cdf(z - sign * (edge - true_value) / se))
               for edge, sign in ((margin[1], 1.0), (margin[0], -1.0)) if math.isfinite(edge))
    return max(0.0, 1.0 - fail)


def iut_pick(per_model: dict[str, ClaimRecord], decider: str | None) -> tuple[str | None, float | None]:
    """(the configuration that decides, the intersection-union p-value) of configurations pooled by `pool_runs`.

    The decider is the pool's own, else the configuration with the largest finite estimate (the one furthest from
    the ideal 0 of claims 1 and 2's criteria); the p-value is the largest configuration p-value, None unless every
    configuration has one (an intersection-union test rejects only if each does)."""
    decided = [c for c, rec in per_model.items() if rec.estimate is not None and math.isfinite(rec.estimate.estimate)]
    pick = decider or (max(decided, key=lambda c: per_model[c].estimate.estimate) if decided else None)
    pvals = [per_model[c].details.pvalue for c in per_model]
    return pick, (max(pvals) if per_model and all(p is not None for p in pvals) else None)

