"""Report sections that describe the study: introduction, methods, limitations (markdown strings)."""
from __future__ import annotations

import logging
from dataclasses import asdict

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.counts import run_counts
from brownformer.report.markdown import kv_table, md_table
from brownformer.report.phrases import count_noun
from brownformer.results.tables import goal_text, replicates_text

log = logging.getLogger(__name__)

__all__ = ["introduction", "methods", "limitations"]

CLAIMS = (
    ("1. Tokens on a hypersphere", "After LayerNorm, token features lie on a hypersphere of radius √d in the "
     "hyperplane Σz = 0. Before the affine map (γ, β) this holds by definition whenever a token's variance exceeds "
     "~50 ε, so it is only checked; the claim is decided on what the next layer reads, γ⊙z + β: the spread of the "
     "token radii about β relative to a Gaussian cloud of the same covariance (is the image a sphere or an "
     "ellipsoid?) and the distance of the centre β from the origin, with the residual stream for contrast."),
    ("2. Attention as a Markov chain", "softmax(QKᵀ/√d_k) is the transition matrix of a random walk on that sphere "
     "and training learns the kernel. Row-stochasticity holds by construction and proves nothing; we test, per "
     "head, whether M = W_Qᵀ W_K is isotropic (its identity fraction, capped at d_h/d by its rank, so read relative "
     "to that bound), whether the chain is reversible (detailed balance; exact for symmetric M; undefined for the "
     "causal LM, whose first token absorbs), and what replacing the attention by its fitted isotropic "
     "(von Mises–Fisher) kernel does to the attention output; spectral gap, stationary law and mixing are "
     "reported."),
    ("3. Brownian motion of tokens", "The update of tokens is a Brownian motion, so second-order (Itô) terms "
     "matter. Time is read two ways: depth (layer l → l+1 for a fixed input) and training (checkpoint t → t+1 "
     "for fixed probe inputs, and the weights themselves)."),
    ("4. Iterative K-FAC", "A K-FAC optimizer whose Kronecker-factored curvature is inverted by conjugate gradient "
     "on the attention (and MLP) layers trains the model better than first-order baselines."),
)

DECISIONS = (
    "LayerNorm placement is a model variant: `pre`, `post` and `none` (control).",
    "K-FAC factors: A = E[a aᵀ] over tokens (bias as an extra column of ones), G = E[g gᵀ]; running averages "
    "with decay 0.95 that start from the first measured factors, not from the identity (an identity start "
    "switches the curvature off for the first quarter of a short run); factors accumulated in float32 "
    "(float64 on retry) even under bf16 autocast. Weight sharing over tokens: `expand` (default) or `reduce` "
    "(Eschenhagen et al. 2023).",
    "Iterative K-FAC solves G X A + λX = ∇W per layer by conjugate gradient, for at most `cg_max_iter` "
    "iterations or relative residual `cg_tol`, as in the author's code; a diverging solve falls back to the raw "
    "gradient and is counted. The author's code used damping 3e-3, an inverse every 10 steps and a KL-clip of "
    "1e-3; we record them, but our settings are those a fair tuning on each model measures (a KL-clip that binds "
    "on most steps makes the learning rate meaningless). The settings this run used are in 2.3.",
    "Baselines are first-order optimizers (SGD with momentum, AdamW, Muon: 2-D hidden weights, AdamW for the rest), "
    "each given the same tuning budget; the ones this config trains are listed in 2.3. Optimizers are compared on "
    "steps and on wall-clock to a common target.",
    "“Brownian” is an ensemble statement: over probe inputs (depth) or over SGD noise (training). A trajectory is "
    "called Brownian only if every key effect (MSD exponent, variance ratio, Hurst exponent, increment "
    "Gaussianity and tails) is defined and its (1 − 2α) confidence interval lies inside its pre-registered "
    "equivalence margin (TOST); a key effect outside its margin makes it “not Brownian”, anything else "
    "(an undefined test included) “inconclusive”. On the sphere the exact spherical laws "
    "E[cos θ_t] = exp(−(d−1)Dt) replace power-law fits of chord distances.",
    "With large samples every goodness-of-fit test rejects, so verdicts rest on effect sizes with bootstrap "
    "confidence intervals and equivalence margins, each test is calibrated on simulated data of the same size, "
    "and p-values are corrected (Benjamini–Hochberg within a family, Holm across headline claims).",
    "A run that diverged or ended at chance is “did not train”: it is listed in the results and left out of "
    "every claim, never pooled silently.",
)


def introduction(ctx: ReportContext) -> str:
    lines = ["## 1. Introduction", "",
             "Chen (2021, arXiv 2107.05264) argues that a transformer moves token representations like a Brownian "
             "particle on a sphere and proposes an iterative (conjugate-gradient) K-FAC optimizer for its "
             "self-attention layers (arXiv 2101.00218). The paper gives few details and its public code never runs "
             "the conjugate-gradient path. We restate each claim as a measurable hypothesis, measure it with "
             "calibrated statistics, and report whether the data support it.", ""]
    for title, text in CLAIMS:
        lines.append(f"- **Claim {title}.** {text}")
    return "\n".join(lines)


def _optimizer_table(ctx: ReportContext) -> pd.DataFrame:
    """Each optimizer's settings from the config, and the registry's keys it leaves at their defaults."""
    from brownformer.optim.registry import REGISTRY

    in_grid = {r.optimizer for r in ctx.cfg.runs()}
    rows = []
    for name, o in ctx.cfg.optimizers.items():
        params = ", ".join(f"{k}={v}" for k, v in sorted(o.params.items())) or "—"
        entry = REGISTRY.get(o.type)
        unset = ", ".join(k for k in entry.keys if k not in o.params) if entry else "n/a"
        rows.append({"name": name, "type": o.type, "in the grid": "yes" if name in in_grid else "no (defined only)",
                     "lr": o.lr, "settings from the config": params,
                     "left at the optimizer's default": unset or "—"})
    return pd.DataFrame(rows)


def _metrics_only_seeds(cfg) -> dict[tuple[str, str], tuple[int, ...]]:
    """(model, optimizer) -> the seeds of that pair that train without probes (pairs with none left out)."""
    probed = {(r.model, r.optimizer, r.seed) for r in cfg.probed_runs()}
    out = {}
    for (model, name), seeds in cfg.pair_seeds().items():
        unprobed = tuple(s for s in seeds if (model, name, s) not in probed)
        if unprobed:
            out[model, name] = unprobed
    return out


def _and_join(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _seed_text(seeds: tuple[int, ...]) -> str:
    """'seed 3', 'seeds 2 and 5' or, for a run of three or more consecutive seeds, 'seeds 2–4'."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) >= 3 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seeds " + _and_join([str(s) for s in seeds])


def _metrics_only_text(cfg) -> str:
    """Which runs train without probes, e.g. 'seeds 2–4 of adamw and kfac-iterative on vit-pre and vit-post'
    (pairs grouped by equal seeds, then optimizers by equal models); empty when every run is probed."""
    by_seeds: dict[tuple[int, ...], dict[str, list[str]]] = {}
    for (model, name), seeds in _metrics_only_seeds(cfg).items():
        by_seeds.setdefault(seeds, {}).setdefault(name, []).append(model)
    phrases = []
    for seeds, models_of in by_seeds.items():
        optimizers_of: dict[tuple[str, ...], list[str]] = {}
        for name, models in models_of.items():
            optimizers_of.setdefault(tuple(models), []).append(name)
        phrases += [f"{_seed_text(seeds)} of {_and_join(names)} on {_and_join(models)}"
                    for models, names in optimizers_of.items()]
    return "; ".join(phrases)


def _trained_with_table(ctx: ReportContext) -> pd.DataFrame:
    """The lr (and damping) each (model, optimizer) pair of the grid actually trains with (`tuned` applied),
    its seeds and, when some run is metrics-only, which of them train without probes."""
    unprobed = _metrics_only_seeds(ctx.cfg)
    rows = []
    for (model, name), seeds in ctx.cfg.pair_seeds().items():
        o = ctx.cfg.optimizer_for(model, name)
        row = {"model": model, "optimizer": name, "lr": o.lr, "damping": o.params.get("damping", "—"),
               "seeds": ", ".join(map(str, seeds))}
        if unprobed:
            row["of which metrics only"] = ", ".join(map(str, unprobed.get((model, name), ()))) or "—"
        rows.append(row)
    return pd.DataFrame(rows)


def _replicas_text(ctx: ReportContext) -> str:
    """The replica runs of the training noise (claims 3b, 3c), counted from the config's `replicas` blocks."""
    sets = ctx.cfg.replica_sets()
    if not sets:
        return ""
    extra = len(ctx.cfg.replica_runs())
    sizes = sorted({len(reps) for reps in sets.values()})
    return (f" Claims 3b and 3c add {count_noun(extra, 'replica run')} of the training noise ({len(sets)} replica "
            f"set(s) of {' or '.join(map(str, sizes))} replicas each, replica 0 being the grid's run), "
            f"{len(ctx.cfg.runs()) + extra} training jobs in all.")


def _kfac_options_text(ctx: ReportContext) -> list[str]:
    """The settings the proposed optimizer trains with on each model (config and `tuned`), as K-FAC reads them;
    a key the config does not set takes the optimizer's default."""
    cfg, name = ctx.cfg, ctx.cfg.report.proposed
    models = [m for (m, o) in cfg.pair_seeds() if o == name]
    if not models:
        return []
    lines = [f"`{name}` (type `{cfg.optimizers[name].type}`) trains with these settings; a key not listed takes "
             "the optimizer's default (for K-FAC, `warm_start` off: every CG solve starts from zero):", ""]
    for m in models:
        o = cfg.optimizer_for(m, name)
        lines.append(f"- `{m}`: lr={o.lr}, " + ", ".join(f"{k}={v}" for k, v in sorted(o.params.items())))
    return lines


def _tuning_text(cfg) -> str:
    """Limitations: the tuning protocol as the config's `tuning` block states it (seeds, trials, knobs)."""
    tuning = cfg.raw.get("tuning")
    if not tuning:
        return ("Tuning: this config has no `tuning` block; the optimizers train with the settings it gives "
                "(and its `tuned` block, where present).")
    knobs = "; ".join(f"{opt}: {', '.join(k['key'] for k in ks)}" for opt, ks in sorted(tuning["knobs"].items()))
    return (f"Tuning: {tuning.get('trials', 'n/a')} trials per (model, optimizer) on "
            f"{', '.join(tuning['models'])}, each trained on the {len(tuning['seeds'])} tuning seeds "
            f"{', '.join(map(str, tuning['seeds']))} (disjoint from the grid's) and ranked by steps to the target "
            f"(benchmarks/results/tuning.md). Settings searched: {knobs}; every other setting keeps the config's "
            "value. An equal budget does not guarantee each optimizer is at its best.")


def methods(ctx: ReportContext) -> str:
    cfg = ctx.cfg
    models = pd.DataFrame([{k: v for k, v in asdict(m).items()} for m in cfg.models.values()])
    datasets = pd.DataFrame([{k: v for k, v in asdict(d).items() if v is not None} for d in cfg.datasets.values()])
    train, probes = kv_table(asdict(cfg.train)), kv_table(asdict(cfg.probes))
    st = asdict(cfg.stats)
    margins = st.pop("margins")
    stats = kv_table(st)
    margin_df = pd.DataFrame([{"quantity": k, "low": v[0], "high": v[1]} for k, v in sorted(margins.items())])
    runs = cfg.runs()
    seed_sets = set(cfg.pair_seeds().values())
    seeds_text = (f"each with seeds {', '.join(map(str, seed_sets.pop()))}" if len(seed_sets) == 1
                  else "with the seeds listed per pair in 2.3")
    unprobed = _metrics_only_text(cfg)
    if unprobed:
        n_probed = len(cfg.probed_runs())
        why = "for claim 4's seed count" if cfg.probes.enabled else "`probes.enabled` is false"
        seeds_text += (f". {len(runs) - n_probed} of them train without probes (metrics only, {why}): {unprobed}. Their metrics enter claim 4 and the training status; they have no "
                       f"trajectories or per-run statistics, and claims 1–3 rest on the other {n_probed} runs")
        counts = run_counts(ctx)
        if counts["set_to_stop"]:
            seeds_text += (f"; {counts['set_to_stop']} of the metrics-only runs are set to stop at their first "
                           f"evaluation on claim 4's target (`stop_at_target`), and {counts['stopped']} did (a run "
                           "that never reaches it trains its whole budget)")
    parts = [
        "## 2. Methods", "",
        f"**Design.** {count_noun(len(runs), 'training run')}: every (model variant, optimizer) pair of the config's "
        f"grid, {seeds_text}.{_replicas_text(ctx)} Device: `{cfg.device}`.", "",
        "### 2.1 Data", md_table(datasets), "",
        "### 2.2 Models", "Vision transformers (`vit`) on images and character-level language models (`lm`) on "
        "text; Q, K, V and O are separate linear layers.", "", md_table(models), "",
        "### 2.3 Optimizers", md_table(_optimizer_table(ctx)), "",
        "Settings the config leaves out take the optimizer's own defaults (torch.optim's for SGD, AdamW and "
        "Muon; brownformer.optim.KFAC's for K-FAC); the keys each optimizer accepts come from the optimizer "
        "registry (brownformer.optim.registry). Claim 4 compares the proposed optimizer "
        f"`{cfg.report.proposed}` with the baseline `{cfg.report.target_optimizer}`.", "",
        "What each model trains with: the settings above overridden per model by the equal-budget tuning "
        "(`tuned` in the config; the same number of trials for every optimizer on every model, "
        "benchmarks/results/tuning.md):", "", md_table(_trained_with_table(ctx)), "",
        *_kfac_options_text(ctx), "",
        "### 2.4 Training", "Linear warm-up then cosine decay of the learning rate to `min_lr_ratio`.", "",
        train, "",
        "### 2.5 Probes and trajectories", "Fixed probe inputs are passed through the model at log-spaced "
        "checkpoints; LayerNorm outputs (before the affine map, divided by √d), the residual stream, attention "
        "matrices, weights and minibatch gradient noise are stored as trajectory arrays (time, walkers, dims).", "",
        probes, "",
        "### 2.6 Statistics and what “Brownian” means", stats, "",
        "Pre-registered equivalence margins (a value inside counts as Brownian / on the sphere):", "",
        md_table(margin_df), "",
        "**Calibration.** The decision rule the claims apply is run on simulated processes of the same shape as "
        "each real trajectory (times, walkers, dimensions), Brownian motion and alternatives to it: "
        f"{replicates_text(cfg.stats.calibration_replicates)}. The rate at which it calls Brownian motion “not "
        f"Brownian” is its size (α = {cfg.stats.alpha:.0%}); the rate at which it withholds “Brownian” on an "
        f"alternative, its power (goals: {goal_text()}). Each verdict in Section 3 quotes the size and power of "
        "its rule at its shape; a claim-3 verdict without a calibration at its shape is never “supported”. Claims 1 and 2 are decided on margins tied to a consequence, over seeds: claim 1's rule (a t-interval "
        "over seeds inside the margin) is simulated at each configuration's shape (its seeds and the between-seed "
        "covariance of its layers and criteria) with every component at its margin edge (size) and at half of it "
        "(power); claim 2's size is how often the rule passes the shuffled-key and step-0 nulls of each seed, its power "
        "per configuration at least 1 minus the criteria's misses at half their margins (0 for a causal LM, whose "
        "reversibility is undefined).", "",
        "### 2.7 Decisions where the paper is silent", *[f"- {d}" for d in DECISIONS],
    ]
    return "\n".join(parts)


def limitations(ctx: ReportContext) -> str:
    cfg = ctx.cfg
    n_seeds = sorted({len(seeds) for seeds in cfg.pair_seeds().values()})  # per (model, optimizer) pair
    items = [
        f"Scale: models of width {', '.join(sorted({str(m.d_model) for m in cfg.models.values()}, key=int))} and "
        f"{', '.join(sorted({str(m.n_layers) for m in cfg.models.values()}, key=int))} layers trained for "
        f"{', '.join(sorted({str(m.steps or cfg.train.steps) for m in cfg.models.values()}, key=int))} steps; "
        "conclusions about large transformers are extrapolations.",
        f"Seeds: {' to '.join(map(str, dict.fromkeys([n_seeds[0], n_seeds[-1]])))} per configuration, so seed "
        "spreads are coarse and optimizer rankings can flip with more seeds.",
        _tuning_text(cfg),
        "Wall-clock times depend on the machine, its load and thread settings; compare them within this report only.",
        "“Brownian” is tested as an ensemble property with finitely many walkers and time points; a Brownian "
        "verdict means indistinguishable within the stated margins at this sample size, not proven.",
    ]
    notes = sorted(set(ctx.results.notes + ctx.missing))
    if notes:
        items.append("Inputs missing when this report was built (the corresponding parts say “not available”): "
                     + "; ".join(notes) + ".")
    return "## 5. Limitations\n\n" + "\n".join(f"- {i}" for i in items)


