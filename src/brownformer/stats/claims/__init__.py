"""Claim verdicts, one module per claim family, each taking a StatsConfig and returning a verdicts.ClaimRecord.

- claim1_sphere.py: claim 1 (LayerNorm output on S^(d-2));
- claim2_markov.py: claim 2 (attention isotropic and reversible);
- claim3_brownian.py: claims 3a/3b/3c (Brownian over depth / training / weights), the calibrated battery rule;
- claim4_optimizer.py: claim 4 (time to target, stats/comparison/time_to_target.py's rule);
- common.py: the shared equivalence rule, intervals over units, pooling and Holm.
"""
from .claim1_sphere import sphere_claim
from .claim2_markov import markov_claim
from .claim3_brownian import BROWNIAN_FAMILIES, brownian_family_claim
from .claim4_optimizer import optimizer_claim
from .common import headline_holm

__all__ = ["sphere_claim", "markov_claim", "brownian_family_claim", "optimizer_claim", "headline_holm",
           "BROWNIAN_FAMILIES"]
