"""Claim 1: LayerNorm outputs lie on a hypersphere, judged on what the model computes, with seeds as the unit.

Definitional check (not evidence). Raw LayerNorm z = (x - mu)/sigma has 1^T z = 0 and |z|^2 = d sigma^2/
(sigma^2 + eps): the sphere S^(d-2) of radius sqrt(d) in the hyperplane 1^T z = 0 whenever a token's
variance exceeds ~50 eps. `fraction_on_sphere` of the raw output checks this and is reported as
details.definitional; it is labelled as the definition it is.

What the model computes (gauge). The next layer reads y = gamma * z + beta. In a pre-LN block that output feeds
only linear maps (W_Q, W_K, W_V after LN1; fc1 after LN2; the head after the final LN), so gamma and beta fold
into them: W y + b = (W diag(gamma)) z + (W beta + b). Rescaling gamma by any s (per dimension, signs included)
with W -> W diag(1/s), or shifting beta by delta with b -> b - W delta, leaves every logit unchanged: gamma and
beta are a gauge, and every gauge-invariant function of the LayerNorm's data alone is a function of z. So for
pre-LN the quantity decided on is the geometry of z about the origin: the claim holds there by construction
(whenever the variance condition holds), and how the next layer *reads* that sphere is claim 2's head isotropy.
The after-affine geometry of a pre-LN block is reported as gauge-dependent description. In a post-LN block the
LN output is the residual stream itself (it is added to the next sublayer's output), so a per-dimension gamma is
no gauge there (only a common scalar is, with fc1 / fc2 rescaled: both criteria are scale-free); it is decided
after the affine map, about the centre beta (stats/sphere/sphere_fit.py):
  - radius_spread_ratio = sd|y - c| / E|y - c| over the Gaussian-cloud null s_0 = sqrt(tr S^2 / 2) / tr S:
    0 on a sphere, ~1 for a cloud no rounder than a Gaussian of the same covariance; margin
    `radius_spread_ratio` (upper 0.5: norms at least twice as concentrated as concentration of measure alone
    makes them; for evenly spread tokens this is the coefficient of variation of gamma^2 <~ 0.6);
  - offset = |c| / sqrt(E|y - c|^2), the centre's distance from the origin in radii; margin `sphere_offset`
    (upper 0.25: an offset o adds a common cosine ~ o^2/(1 + o^2) <= 0.06 between tokens seen from the origin,
    a third of the chance-level cosine 1/sqrt(32) at the default width).

Size and power of the seed rule, simulated at each configuration's shape (:func:`seed_rule_calibration`): its
seeds x (criterion, layer) table of per-seed estimates, redrawn as S seeds from a normal law with the table's own
between-seed covariance (layers and criteria of one seed move together), the rule itself (`seed_pool`,
`seed_verdict`) applied to each draw. Size: every component at its margin edge, the largest over components of
how often that component's interval lies inside (intersection-union: the rule says "supported" only if every
component does, so no configuration of true values at or past an edge passes more often). Power: every component
halfway between 0 and its edge, how often all pass. For normal seeds the size is the t-interval's exact one-sided
rate (1 - confidence_level) / 2, so the simulation checks the shape (seeds, layers, dependence); it cannot see a
non-normal law of the seeds, which 5-8 seeds could not estimate. The claim's size is the largest over its
configurations.

Seeds as the unit (stats/core/pooling.py `seed_pool`). Per seed (one training run) and layer, each quantity is the
mean over the captures of the trained model (second half of training, step 0 excluded) of its value over all
probe inputs and tokens: one number per (seed, layer). Per configuration (model, optimizer) and layer, the
t-interval over seeds; a criterion is supported when every layer's interval lies inside its margin, not
supported when some layer's lies entirely outside, also at the Bonferroni level over the claim's (configuration,
criterion, layer) components (common.seed_verdict: a refutation needs only one), else inconclusive
(intersection-union over layers). Fewer
than MIN_SEEDS seeds: inconclusive, "n seeds < minimum". A configuration is supported when both criteria are;
the claim pools configurations by intersection-union (claims/common.py), each configuration's record beside the
pooled verdict (per_model). Runs without LayerNorm (ln "none") are not applicable; runs that did not train are
left out. Each seed's record (per_run) keeps its within-seed intervals over probe inputs as description: one
seed is not the population, so it never decides.

One fixed model (unit "inputs", common.UNITS; `brownformer pretrained` only). A pretrained checkpoint is one model,
not a sample of seeds: each criterion is decided on its interval over that model's probe inputs, the record says
"probe inputs of one fixed model; says nothing about other trainings" (common.FIXED_MODEL_UNIT) and gives each
criterion's power halfway between its ideal and its margin edge (common.interval_power).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from brownformer.verdicts import DID_NOT_TRAIN, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord
from brownformer.statsfile import Decision, EffectResult

from brownformer.stats.core.pooling import MIN_SEEDS, NESTING, seed_pool
from brownformer.stats.core.rule_history import claim_rule_history
from .common import (FIXED_MODEL_UNIT, check_unit, configuration_of, did_not_train_record, equivalence_pvalue,
                    equivalence_verdict, finite_or_none, fixed_model_unit, interval_power, iut_pick, pool_runs,
                    se_from_interval, seed_unit, seed_verdict)
from .details import (Claim1ConfigurationDetails, Claim1Details, Claim1FixedModelDetails, Claim1SeedDetails,
                      Definitional, GaugeDependent, InputCriterion, InputPower, RuleCalibration, SeedCriterion,
                      UndecidedCriterion, WithinSeed)
from .claim_inputs import SphereFile

__all__ = ["sphere_claim", "TITLE", "CRITERIA", "DECIDING_TENSOR"]

TITLE = "LayerNorm outputs, as the model computes on them, lie on a sphere centred at the origin"
#: criterion -> margin key in StatsConfig.margins (the quantities of sphere_fit.sphere_about)
CRITERIA = {"radius_spread_ratio": "radius_spread_ratio", "offset": "sphere_offset"}
SPREAD = "radius_spread_ratio"  # the criterion the headline estimate and the seed's reason show
#: LN placement -> the tensor carrying what the model computes (module docstring: pre-LN folds gamma and beta into
#: the next linear maps, so z; post-LN cannot, so the image after the affine map)
DECIDING_TENSOR = {"pre": "ln_raw", "post": "ln_affine"}
#: the decision rule of each unit (common.UNITS), as claims.json states it
_RULE = {"seeds": "per configuration and layer, the t-interval over seeds of each quantity inside its margin; every "
                  "layer, both criteria; pooled: every configuration supported",
         "inputs": "per fixed model, every (capture, layer) interval over its probe inputs inside its margin; both "
                   "criteria; pooled: every model supported (" + FIXED_MODEL_UNIT + ")"}
_AFFINE_REPORTED = ("gain_cv", "gain_condition", "wielandt_cosine", "offset_ratio", "relative_residual")
_DEFINITIONAL = ("definitional check, not evidence: LayerNorm before its affine map is on the sphere whenever a "
                 "token's variance exceeds ~50 eps")
_GAUGE = ("gauge-dependent, after the affine map of a pre-LN block: gamma and beta fold into the next linear maps, so "
          "these move with an unobservable rescaling (description only)")


def _iut(parts) -> str:
    """Intersection-union of criterion (or layer) verdicts: one not supported fails, all supported holds."""
    return (NOT_SUPPORTED if NOT_SUPPORTED in parts else SUPPORTED if all(p == SUPPORTED for p in parts)
            else INCONCLUSIVE)


def _ln_placement(run: str, files: list[SphereFile]) -> str | None:
    """LN placement from the trajectory sidecars ("ln"), else from the run id's model name (vit-pre, lm-none...)."""
    for f in files:
        if f.ln:
            return f.ln
    return next((p for p in ("none", "post", "pre") if p in run.split("__")[0].split("-")), None)


def _trained(files: list[SphereFile]) -> tuple[list[SphereFile], float]:
    """Captures of the trained model: second half of training, step 0 excluded (all when steps are unknown)."""
    steps = [f.step for f in files if f.step is not None]
    half = 0.5 * max(steps) if steps else 0.0
    keep = [f for f in files if f.step is None or (f.step >= half and f.step != 0)]
    return keep or files, half


def _layer_means(files: list[SphereFile], quantity: str) -> np.ndarray:
    """Per layer, the mean over captures of one quantity's point estimate: a seed's nested estimate."""
    rows = [np.array([np.nan if e is None else float(e) for e in per.estimate], float)
            for f in files if (per := f.per_layer.get(quantity))]
    if not rows or len({r.size for r in rows}) != 1:
        return np.array([])
    with warnings.catch_warnings():  # an all-NaN layer stays NaN (undefined, dropped by seed_pool)
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.stack(rows), axis=0)


def _within_seed(files: list[SphereFile], quantity: str) -> WithinSeed:
    """The worst (capture, layer) of one quantity with its interval over probe inputs (description only)."""
    cells = []
    for f in files:
        per = f.per_layer.get(quantity)
        for layer, (e, lo, hi) in (per.cells() if per else ()):
            if e is not None and math.isfinite(float(e)):
                cells.append((float(e), [finite_or_none(lo), finite_or_none(hi)], f.capture, layer))
    if not cells:
        return WithinSeed()
    e, ci, capture, layer = max(cells, key=lambda c: c[0])
    return WithinSeed(estimate=e, confidence_interval=ci, capture=capture, layer=layer, n_cells=len(cells),
                      interval_over="probe inputs of this one seed")


def _capture_order(f: SphereFile) -> int:
    return f.capture if f.capture is not None else -1


def _reported(files: list[SphereFile]) -> tuple[dict | None, dict | None]:
    """The last capture's residual-stream geometry and recovered affine map, per layer (None: not captured)."""
    last = max((_capture_order(f) for f in files), default=None)
    residual = affine = None
    for f in files:
        if _capture_order(f) != last:
            continue
        if f.tensor == "resid" and f.measured_about:
            residual = {"radius_spread_ratio": f.per_layer[SPREAD].estimate, "centre": f.centre}
        if f.tensor == "ln_affine" and f.affine_map:
            affine = {q: getattr(f.affine_map, q) for q in _AFFINE_REPORTED}
    return residual, affine


def _definitional(files: list[SphereFile]) -> Definitional:
    fr = [f.fraction_on_sphere for f in files if f.fraction_on_sphere is not None]
    return Definitional(label=_DEFINITIONAL, min_fraction_on_sphere=min(fr) if fr else None)


def _seed_record(run: str, files: list[SphereFile], ln: str) -> tuple[ClaimRecord, dict]:
    """One seed's description (never a decision) and its nested per-layer estimates {quantity: [L]}."""
    deciding = DECIDING_TENSOR[ln]
    by_tensor = {t: _trained([f for f in files if f.tensor == t])[0] for t in ("ln_raw", "ln_affine")}
    _, half = _trained([f for f in files if f.tensor == deciding] or files)
    values = {q: _layer_means(by_tensor[deciding], q) for q in CRITERIA}
    within = {q: _within_seed(by_tensor[deciding], q) for q in CRITERIA}
    gauge = (GaugeDependent(_GAUGE, *(_within_seed(by_tensor["ln_affine"], q) for q in CRITERIA))
             if ln == "pre" else None)
    residual, affine = _reported(files)
    details = Claim1SeedDetails(ln=ln, decided_on=deciding, judged_from_step=half,
                                n_captures=len(by_tensor[deciding]),
                                per_layer={q: [finite_or_none(v) for v in vals] for q, vals in values.items()},
                                within_seed=within, definitional=_definitional(by_tensor["ln_raw"]),
                                residual_stream=residual, affine_map=affine, gauge_dependent=gauge)
    rs = within[SPREAD]
    reason = ("one seed does not decide (seeds are the unit of inference); within this seed the worst layer's "
              f"radius spread / Gaussian null on {deciding} is "
              + (f"{rs.estimate:.3g}" if rs.estimate is not None else "undefined"))
    if not by_tensor[deciding]:
        reason = f"no {deciding} LayerNorm output captured"
    return ClaimRecord("1", TITLE, INCONCLUSIVE, reason, details=details), values


def _criterion(per_seed: dict[str, np.ndarray], margin, stats, family: int = 1) -> SeedCriterion | UndecidedCriterion:
    """Seed-level intervals per layer of one quantity and the intersection-union verdict over layers; ``family``: the
    claim's components, which a refutation is corrected over (common.seed_verdict)."""
    one_sided = (-math.inf, margin[1])  # both quantities are >= 0: only the upper edge binds
    sizes = {v.size for v in per_seed.values() if v.size}
    if len(sizes) != 1:
        return UndecidedCriterion(INCONCLUSIVE, list(margin),
                                  why="no values" if not sizes else "seeds differ in their layers")
    L = sizes.pop()
    pools = [seed_pool({s: v[l] for s, v in per_seed.items() if v.size}, confidence_level=stats.confidence_level)
             for l in range(L)]
    verdicts = [seed_verdict(p, one_sided, family=family) for p in pools]
    pvals = [equivalence_pvalue(p.estimate, p.standard_error, one_sided, df=p.df or None) if p.decidable else None
             for p in pools]
    worst = max(range(L), key=lambda l: pools[l].estimate if math.isfinite(pools[l].estimate) else -math.inf)
    p = pools[worst]
    return SeedCriterion(verdict=_iut([d.verdict for d in verdicts]), estimate=p.estimate,
                         confidence_interval=list(p.confidence_interval), layer=worst, margin=list(margin),
                         n_layers=L, n_seeds=p.n_seeds, why=next((d.reason for d in verdicts if d.reason), None),
                         per_layer=[q.to_dict() for q in pools],
                         pvalue=None if any(v is None for v in pvals) else max(pvals))


#: the random stream of claim 1's seed-rule simulation (one stream per configuration, keyed by its name)
CALIBRATION_STREAM = 1
#: a component whose between-seed standard deviation is below this fraction of its scale is exact (rounding)
EXACT_RTOL = 1e-12


def seed_rule_calibration(per_seed: dict[str, dict[str, np.ndarray]], margins: dict[str, tuple], stats, *,
                          stream: tuple = ()) -> RuleCalibration:
    """Size and power of the seed rule at one configuration's shape (module docstring), by simulation.

    Args:
        per_seed: criterion -> {seed: that seed's per-layer estimates}.
        margins: criterion -> its margin (only the upper edge binds: both quantities are >= 0).
        stats: StatsConfig (confidence_level, seed, calibration_replicates).
        stream: extra keys of the random stream (the configuration), after ``stats.seed`` and CALIBRATION_STREAM.

    Returns:
        RuleCalibration; size None (not simulated) below MIN_SEEDS complete seeds or without a between-seed spread.
    """
    seeds = sorted(set.intersection(*(set(v) for v in per_seed.values()))) if per_seed else []
    columns = [(q, l) for q in per_seed for l in range(min((per_seed[q][s].size for s in seeds), default=0))]
    table = np.array([[per_seed[q][s][l] for q, l in columns] for s in seeds], float).reshape(len(seeds), len(columns))
    table = table[np.isfinite(table).all(axis=1)]
    S, R = table.shape[0], stats.calibration_replicates
    edges = np.array([margins[q][1] for q, _ in columns], float)
    # a spread below float64 resolution at the edge is rounding, not sampling: such a component is exact
    scale = np.maximum(np.abs(edges), np.abs(table).max(axis=0) if S else 0.0)
    varies = table.std(axis=0) > EXACT_RTOL * scale if S else np.zeros(len(columns), bool)
    shape = {"n_seeds": S, "n_components": len(columns), "n_exact": int((~varies).sum())}
    method = ("normal seeds with the observed between-seed covariance of every (criterion, layer), the rule itself "
              "(t-interval over seeds inside the margin) on each draw; size: each component at its margin edge, the "
              "largest rate over the components that vary between seeds (one that does not is exact: the rule reads "
              "it without error); power: every component at half its edge, all inside")
    if S < MIN_SEEDS or not columns or not varies.any():
        return RuleCalibration(shape=shape, size=None, size_se=None, power={}, n_replicates=0, method=method)
    rng = np.random.default_rng([stats.seed, CALIBRATION_STREAM, *stream])
    cov = np.atleast_2d(np.cov(table, rowvar=False))
    noise = rng.multivariate_normal(np.zeros(len(columns)), cov, size=(R, S), method="svd")  # (R, S, C)

    def inside(values: np.ndarray) -> np.ndarray:  # (S, C) -> (C,) bool: each component's rule says "supported"
        return np.array([seed_verdict(seed_pool(dict(enumerate(values[:, c])), confidence_level=stats.confidence_level),
                                      (-math.inf, edges[c])).verdict == SUPPORTED for c in range(values.shape[1])])
    at_edge = np.array([inside(edges + n) for n in noise])  # (R, C)
    at_half = np.array([inside(0.5 * edges + n).all() for n in noise])  # (R,)
    size = float(at_edge.mean(axis=0)[varies].max())
    return RuleCalibration(shape=shape, size=size, size_se=math.sqrt(size * (1 - size) / R),
                           power={"every component at half its margin edge": float(at_half.mean())}, n_replicates=R,
                           method=method)


def _n_components(seeds: dict[str, tuple[ClaimRecord, dict]]) -> int:
    """A configuration's (criterion, layer) components: what its refutation is corrected over."""
    return sum(min((vals[q].size for _, vals in seeds.values()), default=0) for q in CRITERIA)


def _configuration_record(config: str, seeds: dict[str, tuple[ClaimRecord, dict]], ln: str, stats,
                          family: int = 1) -> ClaimRecord:
    crit = {q: _criterion({s: vals[q] for s, (_, vals) in seeds.items()}, tuple(stats.margins[key]), stats, family)
            for q, key in CRITERIA.items()}
    decision, est, tests = _decided(crit, ln, stats, f"{len(seeds)} seed(s)", "mean over seeds", "over seeds")
    details = Claim1ConfigurationDetails(ln=ln, decided_on=DECIDING_TENSOR[ln], criteria=crit, seeds=sorted(seeds),
                                         pvalue=_largest([c.pvalue for c in crit.values()]))
    calibration = seed_rule_calibration({q: {s: vals[q] for s, (_, vals) in seeds.items()} for q in CRITERIA},
                                        {q: tuple(stats.margins[key]) for q, key in CRITERIA.items()}, stats,
                                        stream=tuple(config.encode()))
    return ClaimRecord("1", TITLE, decision.verdict, decision.reason, margin=tuple(crit[SPREAD].margin), estimate=est,
                       details=details, tests=tests, calibration=calibration)


def _input_criterion(files: list[SphereFile], quantity: str, margin, stats) -> InputCriterion | UndecidedCriterion:
    """A fixed model's criterion: every (capture, layer) interval over its probe inputs inside the margin
    (intersection-union); the power at the cell nearest the edge, where the claim is true but not trivially
    (the true value halfway between 0 and the margin edge, with that cell's standard error)."""
    one_sided = (-math.inf, margin[1])
    cells = []
    for f in files:
        per = f.per_layer.get(quantity)
        for layer, (e, lo, hi) in (per.cells() if per else ()):
            e, lo, hi = (math.nan if x is None else float(x) for x in (e, lo, hi))
            cells.append((e, (lo, hi), f.capture, layer))
    if not cells:
        return UndecidedCriterion(INCONCLUSIVE, list(margin), why="no values")
    parts = [equivalence_verdict(ci, one_sided) for _, ci, _, _ in cells]
    e, ci, capture, layer = max(cells, key=lambda c: c[1][1] if math.isfinite(c[1][1]) else math.inf)
    ses = [se_from_interval(c[1], stats.confidence_level) for c in cells]
    pvals = [equivalence_pvalue(c[0], se, one_sided) for c, se in zip(cells, ses)]
    se = se_from_interval(ci, stats.confidence_level)
    true = 0.5 * margin[1]
    return InputCriterion(
        verdict=_iut(parts), estimate=e, confidence_interval=list(ci), layer=layer, capture=capture,
        margin=list(margin), n_cells=len(cells), interval_over=FIXED_MODEL_UNIT,
        why=None if all(math.isfinite(c[1][1]) for c in cells) else "an interval over inputs is undefined",
        pvalue=None if any(p is None for p in pvals) else max(pvals),
        power=InputPower(true_value=true, standard_error=finite_or_none(se),
                         power=interval_power(se, true, one_sided, confidence_level=stats.confidence_level),
                         method="normal: the deciding cell's estimate N(true value, its standard error^2)"))


def _fixed_model_record(run: str, files: list[SphereFile], ln: str, stats) -> ClaimRecord:
    """Claim 1 on one fixed model (unit "inputs"): decided on its probe inputs, its seed record as description."""
    description, _ = _seed_record(run, files, ln)
    deciding = _trained([f for f in files if f.tensor == DECIDING_TENSOR[ln]])[0]
    crit = {q: _input_criterion(deciding, q, tuple(stats.margins[key]), stats) for q, key in CRITERIA.items()}
    decision, est, tests = _decided(crit, ln, stats, f"one fixed model ({FIXED_MODEL_UNIT})", "over its probe inputs",
                                    "over probe inputs")
    details = Claim1FixedModelDetails(ln=ln, decided_on=DECIDING_TENSOR[ln], criteria=crit,
                                      description=description.details, unit=FIXED_MODEL_UNIT,
                                      pvalue=_largest([c.pvalue for c in crit.values()]))
    return ClaimRecord("1", TITLE, decision.verdict, decision.reason, margin=tuple(crit[SPREAD].margin), estimate=est,
                       details=details, tests=tests,
                       calibration=RuleCalibration(
                           shape={"n_cells": {q: getattr(c, "n_cells", None) for q, c in crit.items()}}, size=None,
                           size_se=None, power={q: getattr(c, "power", None) for q, c in crit.items()}, n_replicates=0,
                           method="power of the interval over inputs at the deciding cell (normal)"))


def _largest(pvalues: list[float | None]) -> float | None:
    """The intersection-union p-value: the largest, None unless every one is defined."""
    return None if None in pvalues else max(pvalues)


def _decided(crit: dict, ln: str, stats, who: str, over: str, test_over: str):
    """(Decision, headline estimate, tests) of one configuration (over seeds) or one fixed model (over its inputs)."""
    r, o = crit[SPREAD], crit["offset"]
    reason = (f"{who}, decided on {DECIDING_TENSOR[ln]} ({ln}-LN); worst layer: radius spread / "
              f"Gaussian null {_f(r)} vs <= {r.margin[1]:g} ({r.verdict}); centre offset {_f(o)} radii vs <= "
              f"{o.margin[1]:g} ({o.verdict})")
    why = r.why or o.why
    if why:
        reason += f"; {why}"
    est = EffectResult.headline(f"radius spread / Gaussian-cloud null of {DECIDING_TENSOR[ln]} (worst layer; {over})",
                                math.nan if r.estimate is None else r.estimate,
                                tuple(r.confidence_interval or (math.nan, math.nan)), stats.confidence_level)
    tests = [{"name": f"{q} equivalence {test_over} (TOST, intersection-union over layers)",
              "statistic": finite_or_none(c.estimate), "pvalue": c.pvalue,
              "rejected": None if c.pvalue is None else bool(c.pvalue < stats.alpha)} for q, c in crit.items()]
    return Decision(_iut([c.verdict for c in crit.values()]), reason, rule="intersection-union over criteria and "
                    "layers", alpha=stats.alpha), est, tests


def _f(c) -> str:
    if c.estimate is None or not math.isfinite(c.estimate):
        return "undefined"
    lo, hi = c.confidence_interval
    return f"{c.estimate:.3g} CI [{lo:.3g}, {hi:.3g}]"


def sphere_claim(files: list[dict], stats, *, excluded: dict[str, str] | None = None,
                 unit: str = "seeds") -> ClaimRecord:
    """Claim 1 over every configuration, seeds as the unit (module docstring), or over fixed models (unit "inputs").

    Args:
        files: [{"run", "path", "capture", "sphere": stats.sphere_distance.tensor_sphere_summary output (with "ln",
            "step")}] for each run's depth files ("ln_raw" decides pre-LN and is the definitional check,
            "ln_affine" decides post-LN, "resid" reported).
        stats: StatsConfig (confidence_level, alpha, margins["radius_spread_ratio"], margins["sphere_offset"]).
        excluded: run -> reason for runs that did not train.
        unit: "seeds" (training runs of a configuration: toy runs) or "inputs" (each run is one fixed model, e.g. a
            pretrained checkpoint, decided on its probe inputs; the record says it says nothing about other
            trainings, common.FIXED_MODEL_UNIT).

    Returns:
        The claim's ClaimRecord: per_model one record per configuration (model__optimizer) decided on its seeds,
        per_run one descriptive record per seed (unit "inputs": per_model and per_run the fixed model's decided
        record); runs without LayerNorm in details.not_applicable.
    """
    check_unit(unit)
    excluded = dict(excluded or {})
    by_run: dict[str, list[SphereFile]] = {}
    for f in map(SphereFile.from_entry, files):
        by_run.setdefault(f.run, []).append(f)
    per_run, not_applicable, configs = {}, {}, {}
    for run, fs in sorted(by_run.items()):
        ln = _ln_placement(run, fs)
        if run in excluded:
            per_run[run] = did_not_train_record("1", TITLE, excluded[run])
        elif ln == "none" or ln not in DECIDING_TENSOR:
            not_applicable[run] = f"ln {ln!r} (no LayerNorm): the claim does not apply"
        elif unit == "inputs":
            per_run[run] = _fixed_model_record(run, fs, ln, stats)
        else:
            rec, values = _seed_record(run, fs, ln)
            per_run[run] = rec
            config, seed = configuration_of(run)
            configs.setdefault((config, ln), {})[seed] = (rec, values)
    family = max(1, sum(_n_components(s) for s in configs.values()))  # what a refutation is corrected over
    per_model = ({run: rec for run, rec in per_run.items() if rec.verdict != DID_NOT_TRAIN} if unit == "inputs" else
                 {config: _configuration_record(config, seeds, ln, stats, family)
                  for (config, ln), seeds in configs.items()})
    pooled, decider = pool_runs(per_model, excluded={}, unit="fixed models" if unit == "inputs" else "configurations")
    verdict, reason = pooled.verdict, pooled.reason
    short = {c: rec.details.criteria[SPREAD].why for c, rec in per_model.items()}
    reason += "".join(f"; {c}: {why}" for c, why in sorted(short.items()) if why)
    if excluded:
        reason += f"; {len(excluded)} run(s) that did not train left out"
    worst, p_iut = iut_pick(per_model, decider)
    calibration = None if unit == "inputs" else RuleCalibration.over_configurations(
        per_model, lambda rec: next(iter(rec.calibration.power.values()), None),
        "size: the largest configuration's simulated size (seed_rule_calibration); power: per configuration")
    return ClaimRecord(
        "1", TITLE, verdict, reason + (f" ({FIXED_MODEL_UNIT})" if unit == "inputs" else "")
        + (f"; deciding {'model' if unit == 'inputs' else 'configuration'} {worst}" if worst else ""),
        estimate=per_model[worst].estimate if worst else None,
        margin=tuple(stats.margins["radius_spread_ratio"]),
        tests=[{"name": "radius-spread and offset equivalence over seeds (intersection-union over configurations)",
                "statistic": None, "pvalue": finite_or_none(p_iut),
                "rejected": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run, per_model=per_model, calibration=calibration,
        seeds=(fixed_model_unit(per_model) if unit == "inputs"
               else seed_unit({c: len(s) for (c, _), s in configs.items()}, nesting=NESTING)),
        details=Claim1Details(
            pvalue=p_iut, not_applicable=not_applicable, deciding_configuration=worst,
            decided_on={"pre": "LN output before the affine map (gamma, beta fold into the next linear maps)",
                        "post": "LN output after the affine map (the residual stream the next sublayer reads)"},
            margins={q: list(stats.margins[k]) for q, k in CRITERIA.items()}, rule=_RULE[unit],
            rule_history=claim_rule_history("1"),
            did_not_train=sorted(r for r, rec in per_run.items() if rec.verdict == DID_NOT_TRAIN)))
