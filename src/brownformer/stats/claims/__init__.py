"""Claim verdicts, one module per claim family, each taking a StatsConfig and returning a verdicts.ClaimRecord.

- sphere.py: claim 1 (LayerNorm output on S^(d-2));
- markov.py: claim 2 (attention isotropic and reversible);
- brownian.py: claims 3a/3b/3c (Brownian over depth / training / weights), the calibrated battery rule;
- optimizer.py: claim 4 (time to target, stats/time_to_target.py's rule);
- common.py: the shared equivalence rule, intervals over units, pooling and Holm.
"""
from .brownian import BROWNIAN_FAMILIES, brownian_family_claim
from .common import headline_holm
from .markov import markov_claim
from .optimizer import optimizer_claim
from .sphere import sphere_claim

__all__ = ["sphere_claim", "markov_claim", "brownian_family_claim", "optimizer_claim", "headline_holm",
           "BROWNIAN_FAMILIES"]
