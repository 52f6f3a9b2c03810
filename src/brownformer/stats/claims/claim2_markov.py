"""Claim 2: attention is a Markov kernel that is isotropic (vMF) and reversible, decided per head over seeds.

Row-stochasticity holds by construction, so the testable content (three criteria, each with its margin):
  - head isotropy, from the weights: per head M = W_Q^T W_K / sqrt(d_h) (with the pre-LN gamma folded in where
    the stage passes it: `weight_isotropy(gain=...)`, the form on the z the model computes on) and iota_relative =
    (tr M)^2 / (d_h ||M||_F^2) (stats/markov/markov_chain.py `weight_isotropy`). rank(M) <= d_h caps the identity fraction
    (tr M)^2/(d ||M||_F^2) at d_h/d, so no head with d_h < d is isotropic on the whole sphere; iota_relative = 1
    iff the head is isotropic within its d_h-dimensional subspace (M = c P), the best a head can be. Margin
    `head_isotropy` (lower 0.9: anisotropic logits carry at most 1/9 of the isotropic logits' variance). Per seed
    the worst head (min over layers and heads of its mean over the captures of the second half of training);
    undefined when the weights are stored as projections;
  - the isotropic kernel inside each head's subspace, judged by its consequence: per head,
    A_h,ij ~ softmax_j(kappa <P_h u_i, P_h u_j>) with P_h the head's query/key subspace (markov_chain.py
    `head_subspace_vmf`), and the attention output's relative error when A_h is replaced by it,
    ||(A - A_vMF) U||_F / ||(A - A_mean-field) U||_F (token positions U as values), <= the configured
    `vmf_output_error` ceiling 0.5 (the isotropic kernel reproduces at least 3/4 of the energy of the
    attention's displacement of tokens away from the mean field). Where the files have no fit in each head's
    subspace (weights missing or projected) the criterion is undefined (inconclusive), unless every head spans the
    whole space (d_h = d), where the whole-sphere fit is the head's; the whole-sphere fit is reported beside it;
  - reversibility: the detailed-balance residual r = ||Pi A - A^T Pi||_F / ||Pi A||_F <= the configured
    `reversibility_residual` margin 0.1, fixed before the data (rule_history). Its consequence: the additive
    reversibilisation A_rev = (A + Pi^-1 A^T Pi)/2 is the reversible chain with the same pi nearest to A, and
    Pi (A - A_rev) = (Pi A - A^T Pi)/2, so r <= 0.1 means that replacing the attention by a reversible chain moves
    its probability flows pi_i A_ij by at most 5% (Frobenius, relative). A symmetric M makes the chain exactly
    reversible (pi_i ~ Z_i); the per-head asymmetry ||M - M^T||_F / ||M + M^T||_F is reported beside it. Under a
    causal mask token 1 is absorbing (pi = e_1): reversibility is undefined, so a causal LM is at best inconclusive.

Seeds as the unit (stats/core/pooling.py `seed_pool`). Attention matrices of one probe input (all layers and heads)
are dependent and all inputs of one run share its weights, so per seed (one training run) each quantity is one
number: the mean over probe inputs of the per-input means over layers and heads, averaged over the captures
after initialisation (the worst head for isotropy). Per configuration (model, optimizer) the t-interval over
seeds; an interval inside its margin -> supported, entirely outside -> not supported, also at the Bonferroni level
over the claim's (configuration, criterion) components that can refute (common.seed_verdict: a refutation needs
only one; `refutation_family`); fewer than MIN_SEEDS seeds: inconclusive, "n seeds < minimum". A configuration is
supported when every criterion is, not supported when one is not; configurations pool by intersection-union, each beside the pooled verdict (per_model). Each seed's record
(per_run) keeps its within-seed intervals over probe inputs and its nulls as description; it never decides.
The step-0 attention and weights are a baseline, never pooled into the estimate.

One fixed model (unit "inputs", common.UNITS; `brownformer pretrained` only). A pretrained checkpoint is one model,
not a sample of seeds: each criterion is decided on its interval over that model's probe inputs, the record says
"probe inputs of one fixed model; says nothing about other trainings" (common.FIXED_MODEL_UNIT) and gives each
criterion's power halfway between its ideal and its margin edge (common.interval_power).

Calibration. Size: the attention-level rule on the row-shuffled, shuffled-key and step-0 nulls of every seed
(a null that passes counts against the rule). Power at a point where the claim is true but not trivially true:
each criterion's true value halfway between its ideal (0, or 1 for isotropy) and its margin edge, the seeds'
observed spread, at this configuration's number of seeds and at POWER_DESIGN_SEEDS (noncentral t,
`seed_interval_power`); the positive controls (stats/controls/positive_controls_claims12.py) simulate it end to end.
"""
from __future__ import annotations

import math
from dataclasses import replace

from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord
from brownformer.statsfile import AttentionStats, AttentionVerdicts, CriterionVerdict, Decision, EffectResult

from brownformer.stats.core.pooling import MIN_SEEDS, seed_interval_power, seed_pool
from brownformer.stats.core.rule_history import claim_rule_history
from .claim2_seed import (OUTPUT_ERROR, RESIDUAL, TITLE, SeedValues, combine, fmt_value, per_input_values, seed_record,
                          upper_margin)
from .details import (Claim2ConfigurationDetails, Claim2Details, Claim2FixedModelDetails, InputCriterion2,
                      InputPower, PooledCriterion, RuleCalibration, SeedPower)
from .claim_inputs import AttentionFile
from .common import (FIXED_MODEL_UNIT, check_unit, configuration_of, did_not_train_record, equivalence_pvalue,
                    equivalence_verdict, finite_or_none, fixed_model_unit, interval_power, iut_pick, pool_runs,
                    seed_unit, seed_verdict)

__all__ = ["markov_claim", "file_verdicts", "per_input_values", "TITLE", "OUTPUT_ERROR_NULL_FRACTION",
           "POWER_DESIGN_SEEDS", "CRITERIA"]

#: `stats attention` on a user's array (no heads, no seeds): the whole-sphere vMF fit must also beat the
#: row-shuffled null by this factor, so that passing it means more than a random Markov matrix would
OUTPUT_ERROR_NULL_FRACTION = 0.5

#: the seed count issue 32 asks of every deciding configuration: the power is also stated there
POWER_DESIGN_SEEDS = 5
#: the decision rule of each unit (common.UNITS), as claims.json states it
_RULE = {"seeds": "per configuration, the t-interval over seeds of each criterion inside its margin; pooled: every "
                  "configuration supported",
         "inputs": "per fixed model, each criterion's interval over its probe inputs inside its margin (head isotropy "
                   "exact, from the weights); pooled: every model supported (" + FIXED_MODEL_UNIT + ")"}
#: the rule of a configuration's (or fixed model's) verdict
CRITERIA_RULE = "intersection-union over the criteria (head isotropy, vMF output error, reversibility)"
#: criterion -> (margin key, which edge binds, the ideal value)
CRITERIA = {"head_isotropy": ("head_isotropy", "lower", 1.0), "vmf_output_error": ("vmf_output_error", "upper", 0.0),
            "reversibility": ("reversibility_residual", "upper", 0.0)}


def _power(pool, margin, edge: str, ideal: float, stats) -> SeedPower:
    """Power of the seed-level rule where the claim is true but not trivially: halfway to the margin edge."""
    bound = margin[0] if edge == "lower" else margin[1]
    true = 0.5 * (ideal + bound)
    sd = pool.standard_error * math.sqrt(pool.n_seeds) if pool.n_seeds >= 2 else math.nan
    one = (bound, math.inf) if edge == "lower" else (-math.inf, bound)
    at = {n: seed_interval_power(n, sd, true, one, confidence_level=stats.confidence_level)
          if math.isfinite(sd) else None for n in sorted({pool.n_seeds, MIN_SEEDS, POWER_DESIGN_SEEDS})}
    return SeedPower(true_value=true, seed_sd=finite_or_none(sd), power_at_n_seeds={str(k): v for k, v in at.items()},
                     method="noncentral t: per-seed estimates N(true value, observed seed SD^2)")


def configuration_rule_power(rec: ClaimRecord) -> float | None:
    """P(a configuration's rule says "supported") with every criterion halfway between its ideal and its margin edge
    (at the observed seed SD, or a fixed model's standard error: each criterion's power in ``rec.calibration.power``):
    at least 1 - the sum of the criteria's misses (Bonferroni; the intersection-union rule needs all three to pass),
    which is the bound returned. 0 under a causal mask, where reversibility is undefined by construction, so the
    rule cannot say "supported"; None where a criterion's power is unknown (fewer than 2 seeds of it)."""
    if getattr(rec.details, "causal", False):
        return 0.0
    n = str(rec.calibration.shape.get("n_seeds")) if isinstance(rec.calibration.shape, dict) else None
    misses = []
    for p in rec.calibration.power.values():
        value = p.power if isinstance(p, InputPower) else p.power_at_n_seeds.get(n)
        if value is None:
            return None
        misses.append(1.0 - value)
    return max(0.0, 1.0 - sum(misses))


def refutation_family(configs: dict[str, dict[str, tuple[ClaimRecord, SeedValues]]]) -> int:
    """How many (configuration, criterion) components a refutation of claim 2 is corrected over
    (``common.seed_verdict``'s ``family``): every criterion of every configuration, except reversibility under a causal
    mask, which is undefined by construction (token 1 is absorbing) and so can never refute."""
    return max(1, len(CRITERIA) * len(configs) - sum(_causal(seeds) for seeds in configs.values()))


def _causal(seeds: dict[str, tuple[ClaimRecord, SeedValues]]) -> bool:
    """Whether a configuration's model is causal (its attention has an absorbing first token)."""
    return any(info.causal for _, info in seeds.values())


def _configuration_record(config: str, seeds: dict[str, tuple[ClaimRecord, SeedValues]], stats,
                          family: int = 1) -> ClaimRecord:
    causal = _causal(seeds)
    crit, powers = {}, {}
    for name, (key, edge, ideal) in CRITERIA.items():
        margin = tuple(stats.margins[key])
        pool = seed_pool({s: info.values.get(name) for s, (_, info) in seeds.items()},
                         confidence_level=stats.confidence_level)
        one = (margin[0], math.inf) if edge == "lower" else (-math.inf, margin[1])
        decision = seed_verdict(pool, one, family=family)
        undefined = name == "reversibility" and causal
        if undefined:
            decision = Decision(INCONCLUSIVE, "causal mask: token 1 is absorbing, pi = e_1", rule=decision.rule)
        elif pool.n_seeds == 0:
            decision = replace(decision, reason="undefined in every seed" + "".join(
                f" ({w})" for w in sorted({info.why.get(name) for _, info in seeds.values()} - {None})))
        verdict, why = decision.verdict, decision.reason or None
        p = (None if undefined or not pool.decidable else
             equivalence_pvalue(pool.estimate, pool.standard_error, one, df=pool.df or None))
        crit[name] = PooledCriterion(verdict=verdict, estimate=pool.estimate,
                                     confidence_interval=list(pool.confidence_interval), margin=list(margin), why=why,
                                     pool=pool.to_dict(), pvalue=p)
        powers[name] = _power(pool, margin, edge, ideal, stats)
    decision, rec, fits = _decided_record(crit, powers, seeds, stats, f"{len(seeds)} seed(s)", "mean over seeds",
                                          "over seeds")
    return replace(rec, verdict=decision.verdict, reason=decision.reason, details=Claim2ConfigurationDetails(
        pvalue=_largest([c.pvalue for c in crit.values()]), causal=causal, criteria=crit, vmf_fit=fits,
        seeds=sorted(seeds), verdict_head_isotropy=crit["head_isotropy"].verdict,
        verdict_vmf_output_error=crit[OUTPUT_ERROR].verdict, verdict_reversibility=crit["reversibility"].verdict))


def _fixed_model_record(run: str, rec: ClaimRecord, info: SeedValues, stats) -> ClaimRecord:
    """Claim 2 on one fixed model (unit "inputs"): each criterion's interval over its probe inputs (head isotropy
    exact: the weights are known), its power halfway between the ideal and the margin edge at the observed standard
    error; the seed record's details kept as description."""
    crit, powers = {}, {}
    for name, (key, edge, ideal) in CRITERIA.items():
        margin = tuple(stats.margins[key])
        one = (margin[0], math.inf) if edge == "lower" else (-math.inf, margin[1])
        value, ci, se = info.within.get(name, (math.nan, (math.nan, math.nan), math.nan))
        why = info.why.get(name) if not math.isfinite(value) else None
        true = 0.5 * (ideal + (margin[0] if edge == "lower" else margin[1]))
        crit[name] = InputCriterion2(
            verdict=equivalence_verdict(ci, one), estimate=value, confidence_interval=list(ci), margin=list(margin),
            why=why, interval_over=FIXED_MODEL_UNIT if name != "head_isotropy" else
            "exact: the worst head of the fixed model's weights (no sampling error)",
            pvalue=equivalence_pvalue(value, se, one) if math.isfinite(value) else None)
        powers[name] = InputPower(true_value=true, standard_error=finite_or_none(se),
                                  power=interval_power(se, true, one, confidence_level=stats.confidence_level),
                                  n_inputs=info.n_inputs,
                                  method="normal: the estimate over inputs N(true value, its standard error^2); exact "
                                         "quantities (se 0) have power 1 at any true value inside the margin")
    decision, out, fits = _decided_record(crit, powers, {run: (rec, info)}, stats,
                                          f"one fixed model ({FIXED_MODEL_UNIT})", "over its probe inputs",
                                          "over probe inputs")
    return replace(out, verdict=decision.verdict, reason=decision.reason, details=Claim2FixedModelDetails(
        pvalue=_largest([c.pvalue for c in crit.values()]), causal=info.causal, criteria=crit, vmf_fit=fits, seeds=[],
        verdict_head_isotropy=crit["head_isotropy"].verdict, verdict_vmf_output_error=crit[OUTPUT_ERROR].verdict,
        verdict_reversibility=crit["reversibility"].verdict, unit=FIXED_MODEL_UNIT, description=rec.details))


def _largest(pvalues: list[float | None]) -> float | None:
    """The intersection-union p-value: the largest, None unless every one is defined."""
    return None if None in pvalues else max(pvalues)


def _decided_record(crit: dict, powers: dict, seeds: dict[str, tuple[ClaimRecord, SeedValues]], stats, who: str,
                    over: str, test_over: str) -> tuple[Decision, ClaimRecord, list[str]]:
    """(Decision, record, vMF fits) of one configuration (over seeds) or one fixed model (over its inputs): the
    verdict taken once (intersection-union over the criteria), the record without its details carrying it, and
    the vMF fits it rests on."""
    fits = sorted({info.fit for _, info in seeds.values() if info.fit})
    e = crit[OUTPUT_ERROR]
    reason = f"{who}; " + "; ".join(
        f"{n.replace('_', ' ')} {fmt_value(c.estimate)} CI [{fmt_value(c.confidence_interval[0])}, "
        f"{fmt_value(c.confidence_interval[1])}] vs {'>=' if CRITERIA[n][1] == 'lower' else '<='} "
        f"{c.margin[0 if CRITERIA[n][1] == 'lower' else 1]:.3g} ({c.verdict}"
        + (f": {c.why}" if c.why else "") + ")" for n, c in crit.items())
    decision = Decision(combine([c.verdict for c in crit.values()]), reason, rule=CRITERIA_RULE, alpha=stats.alpha)
    cals = [r.calibration for r, _ in seeds.values()]
    sizes = [c.size for c in cals if c and c.size is not None]
    est = EffectResult.headline("attention-output error of the isotropic (vMF) kernel "
                                + (f"({', '.join(fits)})" if fits else "(undefined: no fit in each head's subspace)")
                                + f", relative to the mean field ({over})", e.estimate, tuple(e.confidence_interval),
                                stats.confidence_level)
    rec = ClaimRecord(
        "2", TITLE, decision.verdict, decision.reason, estimate=est, margin=tuple(e.margin),
        calibration=RuleCalibration(shape={"n_seeds": len(seeds)}, size=max(sizes) if sizes else None, size_se=None,
                                    power=powers, n_replicates=sum(c.n_replicates for c in cals if c),
                                    method="size: largest per-seed pass rate of the rule on its nulls; power: module "
                                           "docstring"),
        tests=[{"name": f"{n} equivalence {test_over} (TOST)", "statistic": finite_or_none(c.estimate),
                "pvalue": c.pvalue, "rejected": None if c.pvalue is None else bool(c.pvalue < stats.alpha)}
               for n, c in crit.items()])
    return decision, rec, fits


def file_verdicts(result: AttentionStats, stats) -> AttentionVerdicts:
    """A verdict per claim-2 criterion for one attention file (`stats attention`), with its margin.

    The configured margins of `markov_claim`, on the whole-sphere fit (a user's file carries no head subspaces), whose
    output-error margin is also lowered to OUTPUT_ERROR_NULL_FRACTION of the row-shuffled null's lower bound; the
    units are the file's matrices (a user's array carries no
    grouping; each aggregate interval is the percentile bootstrap of the mean over matrices): interval inside
    the margin -> "supported", entirely outside -> "not supported", else (or undefined) "inconclusive".
    """
    f = AttentionFile.from_result(result)
    null = f.null_models.row_shuffled
    out = {}
    for q, frac, why in ((RESIDUAL, None, "undefined under a causal mask: token 1 is absorbing (pi = e_1)"),
                         (OUTPUT_ERROR, OUTPUT_ERROR_NULL_FRACTION, "needs --features (the token features)")):
        ceiling = tuple(stats.margins[q])
        null_q = null.get(q) if null is not None else None
        lo_null = ((null_q.confidence_interval if null_q is not None else None) or [None])[0]
        margin = (ceiling[0], min(ceiling[1], frac * lo_null) if lo_null is not None and frac else ceiling[1])
        a = f.aggregate.get(q)
        if a is None or a.mean is None:
            out[q] = CriterionVerdict(INCONCLUSIVE, list(margin), why_undefined=why)
            continue
        out[q] = CriterionVerdict(equivalence_verdict(a.confidence_interval, upper_margin(margin)), list(margin),
                                  a.mean, a.confidence_interval, null_row_shuffled_lower=lo_null)
    margin = tuple(stats.margins["head_isotropy"])
    if f.head_layers:
        worst = min(min(rec.identity_fraction_relative) for rec in f.head_layers)
        out["head_isotropy"] = CriterionVerdict(SUPPORTED if worst >= margin[0] else NOT_SUPPORTED, list(margin),
                                                worst, rank_bound=f.head_layers[0].rank_bound)
    else:
        out["head_isotropy"] = CriterionVerdict(INCONCLUSIVE, list(margin), why_undefined=f.heads_undefined
                                                or "needs --wq and --wk (W_Q, W_K weights)")
    return AttentionVerdicts(**out)


def markov_claim(files: list[dict], stats, *, excluded: dict[str, str] | None = None,
                 unit: str = "seeds") -> ClaimRecord:
    """Claim 2 over every configuration, seeds as the unit (module docstring), or over fixed models (unit "inputs").

    Args:
        files: [{"run", "attention": an attention file's AttentionStats (stats_stage.attention_files.
            attention_file_record), or its JSON}] (with "step", "null_models", "head_kernels" with, where the stage
            computed it, "subspace_vmf" (markov_chain.head_subspace_vmf); the step-0 capture is the baseline).
        stats: StatsConfig (confidence_level, n_resamples, seed, alpha, margins["head_isotropy"],
            margins["vmf_output_error"], margins["reversibility_residual"]).
        excluded: run -> reason for runs that did not train.
        unit: "seeds" (training runs of a configuration: toy runs) or "inputs" (each run is one fixed model, e.g. a
            pretrained checkpoint, decided on its probe inputs; common.FIXED_MODEL_UNIT).

    Returns:
        The claim's ClaimRecord: per_model one record per configuration decided on its seeds, per_run one
        descriptive record per seed (unit "inputs": per_model and per_run the fixed model's decided record).
    """
    check_unit(unit)
    excluded = dict(excluded or {})
    by_run: dict[str, list[AttentionFile]] = {}
    for f in files:
        by_run.setdefault(f["run"], []).append(AttentionFile.from_result(f["attention"]))
    per_run, configs = {}, {}
    for run, fs in sorted(by_run.items()):
        if run in excluded:
            per_run[run] = did_not_train_record("2", TITLE, excluded[run])
            continue
        rec, info = seed_record(run, fs, stats)
        if unit == "inputs":
            per_run[run] = _fixed_model_record(run, rec, info, stats)
            continue
        per_run[run] = rec
        config, seed = configuration_of(run)
        configs.setdefault(config, {})[seed] = (rec, info)
    family = refutation_family(configs)
    per_model = ({run: rec for run, rec in per_run.items() if run not in excluded} if unit == "inputs" else
                 {c: _configuration_record(c, seeds, stats, family) for c, seeds in sorted(configs.items())})
    fixed = unit == "inputs"
    pooled, decider = pool_runs(per_model, excluded={}, unit="fixed models" if fixed else "configurations")
    verdict, reason = pooled.verdict, pooled.reason
    reason += f" ({FIXED_MODEL_UNIT})" if fixed else ""
    whys = {c: next((k.why for k in rec.details.criteria.values() if k.why), None) for c, rec in per_model.items()}
    reason += "".join(f"; {c}: {why}" for c, why in sorted(whys.items()) if why)
    if excluded:
        reason += f"; {len(excluded)} run(s) that did not train left out"
    pick, p_iut = iut_pick(per_model, decider)
    return ClaimRecord(
        "2", TITLE, verdict, reason + (f"; deciding {'model' if fixed else 'configuration'} {pick}" if pick else ""),
        estimate=per_model[pick].estimate if pick else None, margin=per_model[pick].margin if pick else None,
        calibration=RuleCalibration.over_configurations(
            per_model, configuration_rule_power,
            "size: the largest per-configuration pass rate of the rule on its nulls; power per configuration: "
            "configuration_rule_power") if per_model else None,
        tests=[{"name": "head isotropy, vMF output error and reversibility over seeds (intersection-union over "
                        "configurations)", "statistic": None,
                "pvalue": finite_or_none(p_iut), "rejected": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run, per_model=per_model,
        seeds=fixed_model_unit(per_model) if fixed else seed_unit({c: len(s) for c, s in configs.items()}),
        details=Claim2Details(pvalue=p_iut, deciding_configuration=pick, rule_history=claim_rule_history("2"),
                              rule=_RULE[unit]))
