"""Report sections that describe the study: introduction, methods, limitations (markdown strings)."""
from __future__ import annotations

import inspect
import logging
from dataclasses import asdict

import pandas as pd

from brownformer.report.context import ReportContext, kv_table, md_table

log = logging.getLogger(__name__)

__all__ = ["introduction", "methods", "limitations"]

CLAIMS = (
    ("1. Tokens on a hypersphere", "After LayerNorm, token features lie on a hypersphere of radius √d in the "
     "hyperplane Σz = 0 (before the affine γ, β)."),
    ("2. Attention as a Markov chain", "softmax(QKᵀ/√d_k) is the transition matrix of a random walk on that sphere "
     "and training learns the kernel. Row-stochasticity holds by construction and proves nothing; we test whether "
     "the kernel is isotropic (von Mises–Fisher), whether the chain is reversible, and its spectral gap, "
     "stationary law and mixing."),
    ("3. Brownian motion of tokens", "The update of tokens is a Brownian motion, so second-order (Itô) terms "
     "matter. Time is read two ways: depth (layer l → l+1 for a fixed input) and training (checkpoint t → t+1 "
     "for fixed probe inputs, and the weights themselves)."),
    ("4. Iterative K-FAC", "A K-FAC optimizer whose Kronecker-factored curvature is inverted by conjugate gradient "
     "on the attention (and MLP) layers trains the model better than first-order baselines."),
)

DECISIONS = (
    "LayerNorm placement is a model variant: `pre`, `post` and `none` (control).",
    "K-FAC factors: A = E[a aᵀ] over tokens (bias as an extra column of ones), G = E[g gᵀ]; running averages "
    "with decay 0.95 starting from the identity; factors accumulated in float32 (float64 on retry) even under "
    "bf16 autocast. Weight sharing over tokens: `expand` (default) or `reduce` (Eschenhagen et al. 2023).",
    "Iterative K-FAC solves G X A + λX = ∇W per layer by conjugate gradient, warm-started from the previous "
    "solution, for at most `cg_max_iter` iterations or relative residual `cg_tol`, as in the author's code; a "
    "diverging solve falls back to the raw gradient and is counted. Damping 3e-3, inverse every 10 steps and "
    "KL-clip 1e-3 follow the author's code.",
    "Baselines: SGD with momentum, AdamW, and Muon (2-D hidden weights; AdamW for the rest), each given the same "
    "tuning budget. Optimizers are compared on steps and on wall-clock to a common target.",
    "“Brownian” is an ensemble statement: over probe inputs (depth) or over SGD noise (training). A trajectory is "
    "called Brownian only if its MSD exponent, variance ratio, Hurst exponent, increment Gaussianity and tails all "
    "fall inside pre-registered equivalence margins; on the sphere the exact spherical laws "
    "E[cos θ_t] = exp(−(d−1)Dt) replace power-law fits of chord distances.",
    "With large samples every goodness-of-fit test rejects, so verdicts rest on effect sizes with bootstrap "
    "confidence intervals and equivalence margins, each test is calibrated on simulated data of the same size, "
    "and p-values are corrected (Benjamini–Hochberg within a family, Holm across headline claims).",
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
    rows = []
    for name, o in ctx.cfg.optimizers.items():
        params = ", ".join(f"{k}={v}" for k, v in sorted(o.params.items())) or "—"
        rows.append({"name": name, "type": o.type, "lr": o.lr, "settings from the config": params})
    return pd.DataFrame(rows)


def _kfac_defaults() -> str:
    try:
        from brownformer.optim import KFAC
    except ImportError as exc:  # the report must not depend on the optimizer importing
        return f"(K-FAC constructor defaults not available: {exc})"
    sig = inspect.signature(KFAC.__init__)
    items = [f"`{p.name}={p.default!r}`" for p in sig.parameters.values()
             if p.default is not inspect.Parameter.empty]
    return "K-FAC constructor defaults (used wherever the config is silent): " + ", ".join(items) + "."


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
    parts = [
        "## 2. Methods", "",
        f"**Design.** {len(runs)} training runs: every (model variant, optimizer) pair of the config's grid, "
        f"each with seeds {', '.join(map(str, cfg.seeds))}. Device: `{cfg.device}`.", "",
        "### 2.1 Data", md_table(datasets), "",
        "### 2.2 Models", "Vision transformers (`vit`) on images and character-level language models (`lm`) on "
        "text; Q, K, V and O are separate linear layers.", "", md_table(models), "",
        "### 2.3 Optimizers", md_table(_optimizer_table(ctx)), "", _kfac_defaults(), "",
        "### 2.4 Training", "Linear warm-up then cosine decay of the learning rate to `min_lr_ratio`.", "",
        train, "",
        "### 2.5 Probes and trajectories", "Fixed probe inputs are passed through the model at log-spaced "
        "checkpoints; LayerNorm outputs (before the affine map, divided by √d), the residual stream, attention "
        "matrices, weights and minibatch gradient noise are stored as trajectory arrays (time, walkers, dims).", "",
        probes, "",
        "### 2.6 Statistics and what “Brownian” means", stats, "",
        "Pre-registered equivalence margins (a value inside counts as Brownian / on the sphere):", "",
        md_table(margin_df), "",
        "**Calibration.** Every test of the battery is run on simulated processes with the same numbers of times, "
        "walkers and dimensions as each real trajectory: Brownian motion (euclidean and spherical), "
        "Ornstein–Uhlenbeck, fractional Brownian motion (H = 0.3, 0.7), α-stable increments (α = 1.5), correlated "
        f"increments and deterministic drift, {cfg.stats.calibration_replicates} replicates each. The rejection "
        f"rate on Brownian motion is the size (goal 2–8 % at nominal {cfg.stats.alpha:.0%}); on the others, the "
        "power (goal ≥ 0.9).", "",
        "### 2.7 Decisions where the paper is silent", *[f"- {d}" for d in DECISIONS],
    ]
    return "\n".join(parts)


def limitations(ctx: ReportContext) -> str:
    cfg = ctx.cfg
    items = [
        f"Scale: models of width {', '.join(sorted({str(m.d_model) for m in cfg.models.values()}))} and "
        f"{', '.join(sorted({str(m.n_layers) for m in cfg.models.values()}))} layers trained for "
        f"{cfg.train.steps} steps; conclusions about large transformers are extrapolations.",
        f"Seeds: {len(cfg.seeds)} per configuration, so seed spreads are coarse and optimizer rankings can flip "
        "with more seeds.",
        "Tuning: each optimizer has the learning rate in the config; an equal tuning budget does not guarantee "
        "each is at its best, and K-FAC's extra hyper-parameters (damping, inverse period) were not searched here.",
        "Wall-clock times depend on the machine, its load and thread settings; compare them within this report only.",
        "“Brownian” is tested as an ensemble property with finitely many walkers and time points; a Brownian "
        "verdict means indistinguishable within the stated margins at this sample size, not proven.",
    ]
    notes = sorted(set(ctx.results.notes + ctx.missing))
    if notes:
        items.append("Inputs missing when this report was built (the corresponding parts say “not available”): "
                     + "; ".join(notes) + ".")
    return "## 5. Limitations\n\n" + "\n".join(f"- {i}" for i in items)


