"""Which parts of the claim-3 decision rule were fixed before any real trajectory was analysed, and which changed
after results had been seen (from the git history; docs/methods/claim3-rules.md tells the story).

The first commits (b25cc04, da8d4d6, 184625f) fixed the exponent, variance-ratio, kurtosis, Hurst, sphere-radius
and harmonic-ratio margins before any run. Every later change was made after default runs had been looked at, so
a referee should read it as post hoc, whatever its reason. claims.json carries this list (claims 3a-3c,
details.rule_history) and the report can print it.
"""
from __future__ import annotations

__all__ = ["RULE_HISTORY", "rule_history"]

#: (rule, when: "before data" | "after data", commit, what and why)
RULE_HISTORY = (
    ("margins msd_exponent, variance_ratio [0.9, 1.1]; excess_kurtosis [-0.5, 0.5]; hurst [0.4, 0.6]; "
     "harmonic_ratio [0.9, 1.1]", "before data", "b25cc04", "set in the skeleton, from the statistics notes"),
    ("verdict = TOST: every key effect's (1 - 2 alpha) interval inside its margin", "before data", "b25cc04",
     "equivalence, not failure to reject"),
    ("margins increment_autocorrelation, volatility_autocorrelation [-0.1, 0.1]; tail_index_ratio [0.8, 10]; "
     "drift_fraction [0, 0.1]", "after data", "9fddd29", "added with the key-effect set of the refactored rule"),
    ("key effects per kind (sphere: exponent, harmonic ratio, variance ratio, autocorrelation; kurtosis descriptive "
     "on the sphere)", "after data", "9fddd29", "finite tangent steps make the sphere's kurtosis step-size dependent"),
    ("'not brownian' also by a calibrated rejection (p < alpha and estimate outside the margin)", "after data",
     "9fddd29", "refactor of the rule into stats/rule.py"),
    ("clock: sum of lr^2 for 3b/3c, per-walker drift removal for weights", "after data", "9fddd29",
     "3c's exponent 2.55 came from step time with warm-up inside and only the common drift removed"),
    ("3a measured on a 16-layer model (a 2-3 point slope before); MIN_TIME_POINTS = 8", "after data", "9fddd29",
     "too few depth points"),
    ("each file verdict held to its own false-positive rate: size for 'not brownian', size and power for "
     "'brownian'", "after data", "63a2c08", "low power at exponent 1.1 vetoed rejections (3b: 21 -> 28 runs)"),
    ("run level: majority of files; claim level: any run not supported", "after data", "9fddd29",
     "replaced in issue 19 by count rules with a stated size (stats/pooling.py)"),
    ("issue 19: power gate on the Clopper-Pearson lower bound; size gate on the upper bound; calibration at the data's "
     "own correlation and decay (no grid, no clipping); the data's resample count in the calibration; alternatives "
     "at the edge of every key margin; fitted null; Markov / Poisson-binomial count pooling; 3a-3c in Holm; "
     "fewer than MIN_GROUPS groups inconclusive", "after data", "issue 19",
     "a referee's objections to the validity of the rules, made after the default run's verdicts were known"),
    ("issue 19, after the first windowed default run: the calibration simulates the window exponent (the verdict's "
     "MSD effect) at each file's window; the window's lag is each run's own momentum time; excess kurtosis scaled per "
     "walker, step and coordinate with its shrinkage undone; sphere harmonic and variance ratios within strata of "
     "similar walker rate; a file's size in the Markov count capped at the gate's ceiling", "after data", "issue 19",
     "the cited size was another rule's; Brownian walkers of different rates were rejected (vit-deep's fitted nulls "
     "read sizes up to 1.0); the kurtosis edges read -0.41/0.34 for -0.5/0.5"),
    ("issue 30 (fixed after data seen): a sidecar 'momentum' sets the window (from max(warm-up, the momentum time), "
     "captures a momentum time apart) and the null (Brownian motion through heavy-ball momentum; the full-range key "
     "effects less what momentum alone gives them); on an even clock the window exponent averages displacements "
     "over origins in the first 10% of the window; kurtosis scaled by leave-one-out scales; margins unchanged",
     "after data", "issue 30",
     "momentum alone made 3c's AdamW weights 'not brownian'; plain Brownian motion (200 x 200) was inconclusive "
     "under the one-origin window exponent; the kurtosis edges still read 0.42/-0.47 at that shape"),
)


def rule_history() -> list[dict]:
    """RULE_HISTORY as JSON-ready records."""
    return [{"rule": r, "fixed": w, "commit": c, "why": why} for r, w, c, why in RULE_HISTORY]
